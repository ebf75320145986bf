"""How much work each block did in a run: counted by a hook on each block's MLP (a skipped block counts nothing)."""

from __future__ import annotations

from collections.abc import Callable


def block_work(module, layers_path: str, run: Callable[[], object], *, tokens: bool = False) -> list[int]:
    """Per block of ``module``, how many times its MLP ran during ``run()`` (with ``tokens``: how many
    positions it computed, summed over forwards)."""
    blocks = module.get_submodule(layers_path)
    work = [0] * len(blocks)

    def count(i, args):
        work[i] += args[0].shape[1] if tokens else 1

    handles = [b.mlp.register_forward_pre_hook(lambda m, a, i=i: count(i, a)) for i, b in enumerate(blocks)]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return work
