"""Work shared across sweep points, without changing a bit of any result.

- Shared reads: every read-only run of one input (typically the counterfactual
  at each sweep point) is served by one forward per batch that records all of
  their reads at once, instead of one forward per point.
- Prefix reuse: the blocks below a run's lowest write compute exactly what the
  clean run of that input computes, so their output is taken from one clean
  forward per batch, and each point's forward starts at its written block
  (the skipped blocks return the cached tensor instead of computing).
"""

from __future__ import annotations

import contextlib

from causalab_core.ir import Point, Read, Run


def shared_reads(points: tuple[Point, ...]) -> dict[str, Run]:
    """Per input, one merged read-only run holding every point's reads (named ``point/read``)."""
    merged: dict[str, list[Read]] = {}
    for point in points:
        for step in point.steps:
            if step.kind == "run" and step.reads and not step.writes and step.scoring is None:
                merged.setdefault(step.input, []).extend(
                    Read(f"{point.name}/{r.name}", r.site, r.windows) for r in step.reads
                )
    return {name: Run(f"shared/{name}", name, reads=tuple(reads)) for name, reads in merged.items()}


def is_shared(step: Run) -> bool:
    return step.kind == "run" and bool(step.reads) and not step.writes and step.scoring is None


def first_written_layer(step: Run) -> int:
    """The lowest block this run touches; blocks below it can be skipped (0: nothing to skip)."""
    if not step.writes:
        return 0
    return min(op.site.layer for op in (*step.reads, *step.writes))


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
