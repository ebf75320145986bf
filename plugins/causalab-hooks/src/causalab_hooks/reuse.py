"""Prefix reuse with plain hooks: skipped blocks return the clean run's cached output instead of computing.

What is shared and where a run starts is decided in ``causalab_core.runtime.reuse``,
one implementation for every engine.
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def skipped_blocks(model, layers_path: str, upto: int, cached):
    """Blocks ``0..upto-1`` return ``cached`` (block ``upto - 1``'s clean output) instead of computing."""
    blocks = model.get_submodule(layers_path)
    for block in list(blocks)[:upto]:
        block.forward = lambda *args, **kwargs: cached
    try:
        yield
    finally:
        for block in list(blocks)[:upto]:
            del block.forward
