"""A point's runs: the rows every read resolved on, the order the inputs run in, and what each write reads."""

from __future__ import annotations

from causalab_core.errors import PlanError
from causalab_core.ir import Read, Write


def eligible_rows(rows: int, reads: list[Read], writes: dict[str, list[Write]]) -> list[bool]:
    """The rows every read resolved on, leaving out reads that only give a statistic over rows (a mean, a
    mean subtracted, a standard deviation): a row missing from a statistic still has its own value to score."""
    direct = {w.source for ws in writes.values() for w in ws if w.intervention is None or w.intervention.needs != "mean"}
    statistics = {r for ws in writes.values() for w in ws for r in uses(w)} - direct
    eligible = [True] * rows
    for read in reads:
        if read.name not in statistics:
            eligible = [ok and bool(window) for ok, window in zip(eligible, read.windows)]
    return eligible


def run_order(inputs: list[str], read_inputs: dict[str, str], writes: dict[str, list[Write]],
              edges: dict | None = None) -> list[str]:
    """The inputs in the order their runs go: one whose writes (or edge patch) take a read's value after that
    read's input (which a write may change too: a read of a noised run patched into the clean one)."""
    edges = edges or {}
    after = {name: {read_inputs[r] for w in writes.get(name, ()) for r in uses(w)}
             | {read_inputs[r] for r in (edges[name].reads if name in edges else ())} for name in inputs}
    order: list[str] = []
    while len(order) < len(inputs):
        ready = [i for i in inputs if i not in order and after[i] <= set(order)]
        if not ready:
            left = sorted(set(inputs) - set(order))
            raise PlanError(f"$.writes: the inputs {left} each write a value read from another of them's run; "
                            "no order runs them")
        order.append(min(ready, key=lambda i: (i in writes or i in edges, inputs.index(i))))
    return order


def uses(write: Write) -> tuple[str, ...]:
    """The reads a write takes values from: its source, and what its intervention reads besides."""
    iv = write.intervention
    extra = () if iv is None else tuple(r for r in (iv.minus, iv.std_of) if r is not None)
    return tuple(r for r in (write.source, *extra) if r is not None)
