"""Positions anchored on a row's own text: a prompt variable's tokens, or a chat turn's tokens.

- ``{"variable": "entity"}``: every token that spells the row's value of ``entity``;
- ``{"index": -1, "scope": {"variable": "entity"}}``: the last of those tokens;
- ``{"index": -1, "scope": {"segment": "user[1]"}}``: the last token of the second user turn's text;
- ``{"index": 0, "scope": {"variable": "entity", "segment": "user[1]"}}``: the variable, searched inside that turn.

Values are found in the prompt's characters and mapped to tokens through the
tokenizer's offsets, never by re-tokenizing a fragment. A value is matched as
a whole word where it begins or ends with a word character. A window whose
edge token also spells text outside the value (SentencePiece's ``▁Q:Alice``
for ``Alice``) is refused: no token is the value's own.
"""

from __future__ import annotations

import re
from typing import Any

from causalab_core.plugins.contracts import PositionResolver, Resolved, RowText
from causalab_positions.index import OUT_OF_RANGE

MISSING = "alignment_missing"
AMBIGUOUS = "alignment_ambiguous"
NO_SEGMENT = "segment_missing"
NO_VARIABLE = "variable_missing"
PARTIAL = "alignment_partial"
FOLDED = "segment_folded"
SEGMENT = re.compile(r"^(system|user\[\d+\]|assistant\[\d+\]|generation)$")


def occurrences(text: str, value: str, start: int, end: int) -> list[tuple[int, int]]:
    """Character spans of ``value`` in ``text[start:end]``, as whole words where it has word edges."""
    left = r"(?<!\w)" if value[:1].isalnum() or value[:1] == "_" else ""
    right = r"(?!\w)" if value[-1:].isalnum() or value[-1:] == "_" else ""
    pattern = re.compile(left + re.escape(value) + right)
    return [(m.start(), m.end()) for m in pattern.finditer(text, start, end)]


def scope_span(scope: dict[str, str], row: RowText) -> tuple[int, int] | str:
    """The character span a scope selects in the row's prompt, or a reason code."""
    start, end = 0, len(row.text)
    if "segment" in scope:
        if scope["segment"] not in row.segments:
            # The template wrote that turn inside another (Gemma's system prompt): it has no tokens of its own.
            inside = any(k.startswith(f"{scope['segment']} (folded into ") for k in row.segments)
            return FOLDED if inside else NO_SEGMENT
        start, end = row.segments[scope["segment"]]
    if "variable" in scope:
        name = scope["variable"]
        if name not in row.variables or not isinstance(row.variables[name], (str, int, float)):
            return NO_VARIABLE
        found = occurrences(row.text, str(row.variables[name]), start, end)
        if not found:
            return MISSING
        if len(found) > 1:
            return AMBIGUOUS
        start, end = found[0]
    return start, end


def tokens_in(span: tuple[int, int], row: RowText) -> tuple[int, ...]:
    """Indices of the tokens whose characters overlap the span (zero-width tokens excluded)."""
    start, end = span
    return tuple(i for i, (s, e) in enumerate(row.offsets) if e > s and s < end and e > start)


def window(span: tuple[int, int], row: RowText) -> tuple[int, ...] | str:
    """The span's tokens, or ``alignment_partial`` where one also spells text beyond it.

    Only whitespace may lie outside: the leading space or ``▁`` a token carries is its own.
    """
    start, end = span
    tokens = tokens_in(span, row)
    for i in tokens:
        s, e = row.offsets[i]
        if row.text[s:start].strip() or row.text[end:e].strip():
            return PARTIAL
    return tokens


def _check_scope(scope: Any) -> None:
    if not isinstance(scope, dict) or not scope or set(scope) - {"variable", "segment"}:
        raise ValueError(f"`scope` must be an object with `variable` and/or `segment`, got {scope!r}")
    for key, value in scope.items():
        if not isinstance(value, str) or not value:
            raise ValueError(f"`scope.{key}` must be a name, got {value!r}")
    if "segment" in scope and not SEGMENT.match(scope["segment"]):
        raise ValueError(f"`scope.segment` must be system, user[i], assistant[i] or generation, got {scope['segment']!r}")


class ScopedIndexResolver(PositionResolver):
    """The n-th token inside a scope (a variable's tokens, a chat turn's tokens, or both)."""

    name = "scoped_index"

    def accepts(self, spec: Any) -> bool:
        return isinstance(spec, dict) and set(spec) == {"index", "scope"}

    def check(self, spec: Any) -> None:
        if not isinstance(spec["index"], int) or isinstance(spec["index"], bool):
            raise ValueError(f"`index` must be an integer, got {spec['index']!r}")
        _check_scope(spec["scope"])

    def resolve(self, spec: Any, row: RowText) -> Resolved:
        span = scope_span(spec["scope"], row)
        if isinstance(span, str):
            return Resolved(reason=span)
        tokens = window(span, row)
        if isinstance(tokens, str):
            return Resolved(reason=tokens)
        index = spec["index"]
        if not -len(tokens) <= index < len(tokens):
            return Resolved(reason=OUT_OF_RANGE if tokens else MISSING)
        return Resolved(positions=(tokens[index],))


class VariableResolver(PositionResolver):
    """Every token of a variable's value: ``{"variable": "entity"}`` (optionally ``"segment"`` too)."""

    name = "variable"

    def accepts(self, spec: Any) -> bool:
        return isinstance(spec, dict) and "variable" in spec and set(spec) <= {"variable", "segment"}

    def check(self, spec: Any) -> None:
        _check_scope(spec)

    def resolve(self, spec: Any, row: RowText) -> Resolved:
        span = scope_span(spec, row)
        if isinstance(span, str):
            return Resolved(reason=span)
        tokens = window(span, row)
        if isinstance(tokens, str):
            return Resolved(reason=tokens)
        return Resolved(positions=tokens) if tokens else Resolved(reason=MISSING)
