"""Reading a document and its data from disk, with one-line errors that say where."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from causalab_core.document.schema import DataSpec, Document
from causalab_core.errors import DocumentError


@dataclass(frozen=True)
class LoadedDocument:
    """A validated document, where it came from, and its rows."""

    document: Document
    source: str
    rows: tuple[dict[str, Any], ...]
    data_folder: Path
    """Where relative data paths resolve: --data-root, or the document's folder."""


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
            out += f".{part}"
            data = data[part]
        elif last:
            out += f".{part}"
        # else: a union tag, not part of the user's document
    return out


def _describe(error: dict[str, Any]) -> str:
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "extra_forbidden":
        return "unknown key"
    msg = error["msg"].removeprefix("Value error, ")
    if error["type"] in {"literal_error", "string_pattern_mismatch", "int_type", "string_type",
                         "dict_type", "list_type", "too_short", "greater_than_equal"}:
        msg += f" (got {error['input']!r})"
    return msg


def validation_message(source: str, exc: ValidationError, data: Any) -> str:
    first = exc.errors()[0]
    more = len(exc.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return f"{source}: {json_path(tuple(first['loc']), data)}: {_describe(first)}{tail}"


def parse_document(data: Any, source: str) -> Document:
    if not isinstance(data, dict):
        raise DocumentError(f"{source}: $: expected a JSON object, got {type(data).__name__}")
    try:
        return Document.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(validation_message(source, exc, data)) from None


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise DocumentError(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def load_rows(data: DataSpec, folder: Path, source: str = "", where: str = "$.data") -> tuple[dict[str, Any], ...]:
    """Rows inline, or read from a JSONL file relative to ``folder``."""
    if data.rows is not None:
        return tuple(data.rows)
    rel = Path(data.path)
    path = rel if rel.is_absolute() else folder / rel
    if not path.is_file():
        raise DocumentError(f"{source}: {where}.path: data file {str(path)!r} does not exist")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise DocumentError(f"{path}:{number}: a row must be a JSON object")
        rows.append(row)
    if not rows:
        raise DocumentError(f"{path}: the data file has no rows")
    return tuple(rows)


def load_document(path: str | Path, data_root: str | Path | None = None) -> LoadedDocument:
    """Read, parse and validate a document file and load its rows."""
    path = Path(path)
    document = parse_document(read_json(path), str(path))
    folder = Path(data_root) if data_root else path.parent
    return LoadedDocument(document, str(path), load_rows(document.data, folder, str(path)), folder)
