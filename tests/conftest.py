"""Shared test fixtures."""

import pytest
import torch
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


@pytest.fixture(scope="module")
def single_thread():
    """Small models on a shared 2-core machine run far faster single-threaded; restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
