"""Shared test fixtures."""

import pytest
from accelerate.state import AcceleratorState, GradientState


def reset_accelerate_state() -> None:
    """Forget the process-wide Accelerate state so that the next ``Accelerator()`` starts fresh."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


@pytest.fixture
def fresh_accelerator_state():
    """Run a test between two resets of Accelerate's singletons (several training runs in one process)."""
    reset_accelerate_state()
    yield
    reset_accelerate_state()
