"""Where a document is wrong, in words: pydantic's error locations as JSON paths, and its messages as one line."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from causalab_core.errors import echo, shorten


def path_key(key: Any) -> str:
    """A key as a JSON path shows it: a huge key is cut, like any echoed value."""
    return shorten(str(key), 64)


def json_path(loc: tuple[Any, ...], data: Any) -> str:
    """Render a pydantic error location as a JSON path, dropping union-member tags.

    A tag is a location element that is not a key (or index) of the input at
    that depth; the last element is kept even so, since it names a missing or
    unexpected field.
    """
    out = "$"
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int) and isinstance(data, list) and 0 <= part < len(data):
            out += f"[{part}]"
            data = data[part]
        elif isinstance(data, dict) and part in data:
            out += f".{path_key(part)}"
            data = data[part]
        elif last:
            out += f".{path_key(part)}"
        # else: a union tag, not part of the user's document
    return out


def describe(error: dict[str, Any]) -> str:
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "extra_forbidden":
        return "unknown key"
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] in {"literal_error", "string_pattern_mismatch", "int_type", "string_type",
                         "dict_type", "list_type", "too_short", "greater_than_equal"}:
        msg += f" (got {echo(error['input'])})"
    msg = shorten(msg, 600)
    return msg


def validation_message(source: str, exc: ValidationError, data: Any) -> str:
    first = exc.errors()[0]
    more = len(exc.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{source}: {json_path(tuple(first['loc']), data)}: {describe(first)}{tail}"
