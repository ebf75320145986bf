"""Documents given from Python: a path, JSON text, a dict or the schema's models, rows from a DataFrame.

Each becomes the plain JSON data a file would hold, so a document built in Python and the same document read
from a file are checked and run alike."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from causalab_core.errors import DocumentError, shorten

IN_MEMORY = "document"
"""How messages name a document given as a dict or a model (a file is named by its path)."""


@dataclass(frozen=True)
class Given:
    """A document as the loader reads it: its data, how messages name it, and its file (None in memory)."""

    data: Any
    source: str
    path: Path | None


def is_frame(value: Any) -> bool:
    """A pandas DataFrame (checked by duck type: pandas is optional)."""
    return hasattr(value, "to_dict") and hasattr(value, "columns") and hasattr(value, "iloc")


def plain(value: Any) -> Any:
    """A value as JSON holds it: numpy and pandas scalars as Python ones, arrays and Series as lists;
    anything else as it is."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:  # a numpy scalar
        value = value.item()
    if hasattr(value, "tolist"):  # a numpy array, a pandas Series
        value = value.tolist()
    return value


def missing(value: Any) -> bool:
    """A DataFrame's missing cell: None, NaN, pandas' NA or NaT (a ragged record's absent key, once framed)."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (
        type(value).__name__ in {"NAType", "NaTType"})


def frame_rows(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts of plain values, columns as strings, in the frame's order (its index is not
    read: rows are named by place, ``$.data.rows[i]``). A missing cell is an absent key, as in a ragged list of
    dicts: the message about it then says which row has no such column."""
    columns = [str(c) for c in frame.columns]
    twice = next((c for c in columns if columns.count(c) > 1), None)
    if twice is not None:
        raise DocumentError(f"rows: the DataFrame has two columns named {twice!r}")
    return [{c: value for c, v in zip(columns, row) if not missing(value := plain(v))}
            for row in frame.itertuples(index=False, name=None)]


def as_rows(rows: Any, where: str) -> list[dict[str, Any]]:
    """Rows given from Python (a DataFrame, or a list of dicts) as a list of dicts."""
    if is_frame(rows):
        return frame_rows(rows)
    if isinstance(rows, (list, tuple)):
        return [dict(r) if isinstance(r, dict) else r for r in rows]
    raise DocumentError(f"{where}: rows must be a list of dicts or a pandas DataFrame, got {type(rows).__name__}")


def _data(value: Any, where: str = "$", source: str = IN_MEMORY) -> Any:
    """Plain JSON data from what Python code built: models dumped, DataFrames as rows, tuples as lists; a value
    JSON cannot hold (an object, a set, a key that is not text) is one line naming its place."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="python")
    if is_frame(value):
        value = frame_rows(value)
    elif not isinstance(value, (dict, list, tuple, str)):
        value = plain(value)  # a numpy array or scalar, a Series
    if isinstance(value, dict):
        bad = next((k for k in value if not isinstance(k, str)), None)
        if bad is not None:
            raise DocumentError(f"{source}: {where}: the key {bad!r} is not text (a JSON object's keys are)")
        return {k: _data(v, f"{where}.{k}", source) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_data(v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if value is not None and not isinstance(value, (str, int, float, bool)):
        raise DocumentError(f"{source}: {where}: a value of type {type(value).__name__} is not a JSON value "
                            "(text, a number, true or false, null, a list or an object)")
    return value


def is_json_text(text: str) -> bool:
    """A string that is a JSON document rather than a path: one that opens an object or a list (after a byte
    order mark and blanks) and names no file."""
    if text.lstrip("\ufeff \t\r\n")[:1] not in ("{", "["):
        return False
    try:
        return not Path(text).is_file()
    except (OSError, ValueError):  # a name too long, or holding NUL, for a file
        return True


def given(document: Any) -> Given:
    """What the API was handed, as the loader reads it: a file's path (its data read by the loader), or data."""
    if isinstance(document, os.PathLike) or (isinstance(document, str) and not is_json_text(document)):
        found = Given(None, shorten(os.fspath(document)), Path(document))
    elif isinstance(document, str):  # JSON text
        try:
            found = Given(json.loads(document.lstrip("\ufeff")), "JSON text", None)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"JSON text: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise DocumentError("JSON text: nested too deep") from None
    elif isinstance(document, (dict, BaseModel)):
        try:
            found = Given(_data(document), IN_MEMORY, None)
        except RecursionError:
            raise DocumentError(f"{IN_MEMORY}: nested too deep") from None
    else:
        raise DocumentError(f"a document is a file path, JSON text, a dict or a causalab_core.Document, "
                            f"got {type(document).__name__}")
    return found


def with_rows(data: Any, rows: Any, source: str) -> Any:
    """A document's data with ``rows`` (a DataFrame or a list of dicts) inline in place of its own."""
    if rows is None or not isinstance(data, dict):
        return data  # without rows= as it is; a document that is no object is refused by the loader
    return {**data, "data": {"rows": _data(as_rows(rows, "rows="), "$.data.rows", source)}}
