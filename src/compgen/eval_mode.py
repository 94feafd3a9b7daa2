"""A context manager that runs modules in eval mode and restores each one's previous mode afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn


@contextlib.contextmanager
def eval_mode(*modules: nn.Module) -> Iterator[None]:
    """Put ``modules`` in eval mode for the block (sampling, encoding, probing), then restore their modes, so a
    helper called during training never leaves a model in the wrong mode."""
    previous = [module.training for module in modules]
    for module in modules:
        module.eval()
    try:
        yield
    finally:
        for module, training in zip(modules, previous, strict=True):
            module.train(training)
