"""Work engines share across sweep points without changing a bit of any result: shared reads, clean prefixes.

- Shared reads: every read-only run of one input (typically the counterfactual
  at each sweep point) is served by one forward per batch recording all of
  their reads at once, instead of one forward per point.
- Prefix reuse: the blocks below a run's lowest touched block compute exactly
  what the clean run of that input computes, so their output comes from one
  clean forward per batch and the run starts at its own block.
- Bounded memory: a clean block output is computed when a point first starts
  above it and kept only while a remaining point does (``CleanPrefixes``).

Pure bookkeeping over the plan IR (no torch), imported inside engines' blocks.
"""

from __future__ import annotations

from causalab_core.ir import Point, Read, Run


def is_shared(step) -> bool:
    """A read-only run (no writes, not scored): served by the input's shared forward."""
    return step.kind == "run" and bool(step.reads) and not step.writes and step.scoring is None


def shared_reads(points: tuple[Point, ...]) -> dict[str, Run]:
    """Per input, one merged read-only run holding every point's reads (named ``point/read``)."""
    merged: dict[str, list[Read]] = {}
    for point in points:
        for step in point.steps:
            if is_shared(step):
                merged.setdefault(step.input, []).extend(
                    Read(f"{point.name}/{r.name}", r.site, r.windows) for r in step.reads
                )
    return {name: Run(f"shared/{name}", name, reads=tuple(reads)) for name, reads in merged.items()}


def split_shared(found: dict, stores: dict) -> None:
    """Hand a shared run's reads (``point/read``) to each point's store."""
    for key, values in found.items():
        point, read = key.rsplit("/", 1)
        stores[point][read] = values


def first_written_layer(step: Run) -> int:
    """The lowest block a writing run touches; blocks below it can be skipped (0: nothing to skip)."""
    if not step.writes:
        return 0
    return min(op.site.layer for op in (*step.reads, *step.writes))


class CleanPrefixes:
    """Clean block outputs per (input, batch start), computed as points first need them, from the highest
    output kept below (so a layer-by-layer sweep holds one block's output, not one per block), and kept only
    while a remaining point starts above them, or while the highest kept one is the way up to a block a
    remaining point will start from."""

    def __init__(self, points: tuple[Point, ...]):
        self.last_use: dict[tuple[str, int], int] = {}
        """(input, block) -> index of the last point whose run starts above that block."""
        for index, point in enumerate(points):
            for step in point.steps:
                if step.kind == "run" and first_written_layer(step) > 0:
                    self.last_use[(step.input, first_written_layer(step) - 1)] = index
        self.kept: dict[tuple[str, int], dict[int, object]] = {}

    def wanted(self, input_name: str) -> list[int]:
        """The blocks whose clean output some point of this input starts from."""
        return sorted(block for name, block in self.last_use if name == input_name)

    def get(self, input_name: str, start: int, block: int):
        """The kept output, or None when it has not been computed (or is no longer needed)."""
        return self.kept.get((input_name, start), {}).get(block)

    def missing(self, input_name: str, start: int, block: int) -> tuple[int, list[int]]:
        """How to compute ``block``'s clean output on a batch: the highest kept block below it to start from
        (-1: none, start at the embeddings), and the wanted blocks to record on the way, ``block`` the last."""
        kept = self.kept.get((input_name, start), {})
        base = max((b for b in kept if b < block), default=-1)
        return base, [b for b in self.wanted(input_name) if base < b <= block]

    def keep(self, input_name: str, start: int, outputs: dict) -> None:
        self.kept.setdefault((input_name, start), {}).update(outputs)

    def release(self, index: int) -> None:
        """After point ``index``: drop the outputs no later point starts from, but the highest kept one
        while a later point starts above it."""
        for (input_name, _), outputs in self.kept.items():
            top = max(outputs, default=-1)
            climbing = any(name == input_name and block > top and last > index
                           for (name, block), last in self.last_use.items())
            for block in [b for b in outputs if self.last_use.get((input_name, b), -1) <= index
                          and not (b == top and climbing)]:
                del outputs[block]
