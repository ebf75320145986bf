"""Positions by token index: ``-1`` or ``{"index": -1}``; negative counts from the end."""

from __future__ import annotations

from typing import Any

from causalab_core.plugins.contracts import PositionResolver, Resolved, RowText

OUT_OF_RANGE = "position_out_of_range"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class IndexResolver(PositionResolver):
    """The n-th token of the prompt (special tokens such as BOS included)."""

    name = "index"

    def accepts(self, spec: Any) -> bool:
        return _is_int(spec) or (isinstance(spec, dict) and set(spec) == {"index"})

    def check(self, spec: Any) -> None:
        if isinstance(spec, dict) and not _is_int(spec["index"]):
            raise ValueError(f"`index` must be an integer, got {spec['index']!r}")

    def resolve(self, spec: Any, row: RowText) -> Resolved:
        index = spec if _is_int(spec) else spec["index"]
        absolute = index + len(row.ids) if index < 0 else index
        if not 0 <= absolute < len(row.ids):
            return Resolved(reason=OUT_OF_RANGE)
        return Resolved(positions=(absolute,))
