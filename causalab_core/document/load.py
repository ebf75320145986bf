"""Reading a document and its data from disk, with one-line errors that say where."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from causalab_core.document.schema import MAX_ROWS, DataSpec, Document, is_sweep_ref
from causalab_core.document.given import given, with_rows
from causalab_core.document.messages import describe, json_path, path_key, validation_message
from causalab_core.errors import DocumentError, clip, echo, shorten


@dataclass(frozen=True)
class LoadedDocument:
    """A validated document, where it came from, and its rows."""

    document: Document
    source: str
    rows: tuple[dict[str, Any], ...]
    data_folder: Path
    """Where relative data paths resolve: --data-root, or the document's folder."""
    generated: dict[str, Any] | None = None
    """For rows a causal model generated: the model, its provider, the spec, and the rows' sha256."""
    path: Path | None = None
    """The document's file; None for one given in memory."""
    home: Path = Path(".")
    """Where a model key that is a relative folder resolves: the document's folder (the working folder in memory)."""

    def read_paths(self) -> list[Path]:
        """Every file or folder this run reads: the document, its data, training data, featurizer files, the model."""
        doc = self.document
        data = [doc.data] + [f.train.data for f in doc.featurizers.values() if f.train is not None]
        paths = [self.path] if self.path is not None else []
        paths += [self.data_folder / d.path for d in data if d.path]
        paths += [path for _, path in featurizer_files(doc, self.data_folder)]  # swept files too
        model = self.home / Path(doc.model.key).expanduser()
        return paths + ([model] if model.is_dir() else [])


MAX_DEPTH = 100
"""Deepest nesting a document or a data row may have: far beyond any real one, far below Python's recursion limit."""


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """The JSON path of the first value nested deeper than ``limit``, or None (iterative: any depth)."""
    stack = [(value, "$", 0)]
    while stack:
        node, where, depth = stack.pop()
        if depth > limit:
            return where
        if isinstance(node, dict):
            stack += [(v, f"{where}.{k}" if len(where) < 200 else where, depth + 1) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(v, f"{where}[{i}]" if len(where) < 200 else where, depth + 1) for i, v in enumerate(node)]
    return None


def not_finite(value: Any) -> tuple[str, float] | None:
    """The JSON path and value of the first float (in document order) that is NaN or infinite, or None.
    Python's JSON reads ``NaN``, ``Infinity`` and a literal too big for a float (``1e999``) as such; no
    parameter means anything there, and no file could write it back (iterative: any depth)."""
    stack = [(value, "$")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return where, node
        if isinstance(node, dict):
            stack += reversed([(v, f"{where}.{path_key(k)}" if len(where) < 200 else where) for k, v in node.items()])
        elif isinstance(node, list):
            stack += reversed([(v, f"{where}[{i}]" if len(where) < 200 else where) for i, v in enumerate(node)])
    return None


def parse_document(data: Any, source: str) -> Document:
    if not isinstance(data, dict):
        raise DocumentError(f"{source}: $: expected a JSON object, got {type(data).__name__}")
    deep = too_deep(data)
    if deep:
        raise DocumentError(f"{source}: {deep}: nested deeper than {MAX_DEPTH} levels")
    if (bad := not_finite(data)) is not None:
        shown = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[str(bad[1])]
        raise DocumentError(f"{source}: {bad[0]}: {shown} is not a finite number (NaN, Infinity and numbers "
                            "too large for a float mean nothing here)")
    try:
        return Document.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(validation_message(source, exc, data)) from None


def _loads(text: str, where: str, *, lines: bool = True) -> Any:
    """JSON text -> value; bad or absurdly deep JSON is one DocumentError naming ``where``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = f" at line {exc.lineno} column {exc.colno}" if lines else f" at column {exc.colno}"
        raise DocumentError(f"{where}: invalid JSON{at}: {exc.msg}") from None
    except RecursionError:
        raise DocumentError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise DocumentError(f"{where}: invalid JSON: {shorten(str(exc))}") from None


@contextmanager
def _reading(where: str) -> Iterator[None]:
    """A file that is missing, a folder or unreadable: one DocumentError line naming ``where``."""
    try:
        yield
    except FileNotFoundError:
        raise DocumentError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise DocumentError(f"{where}: is a folder, not a file") from None
    except OSError as exc:
        raise DocumentError(f"{where}: cannot be read: {exc.strerror or exc}") from None


def count_rows(path: Path, where: str) -> int:
    """The non-blank lines of a JSONL file, read a line at a time (constant memory); past ``MAX_ROWS``, one line
    saying so, before any row is parsed."""
    count = 0
    with _reading(where), path.open("rb") as f:
        for line in f:
            if line.strip():
                count += 1
                if count > MAX_ROWS:
                    raise DocumentError(f"{where}: holds more than {MAX_ROWS:,} rows, the most a document may hold "
                                        "(a run keeps each row in memory); split it into documents of at most that")
    return count


def read_text(path: Path, where: str) -> str:
    """A UTF-8 file's text; a missing file, a folder or bad bytes is one DocumentError line."""
    with _reading(where):
        data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DocumentError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from None


def read_json(path: Path) -> Any:
    return _loads(read_text(path, str(path)), str(path))


HEADER_LIMIT = 100_000_000
"""Largest safetensors header read (the format's own limit)."""


def safetensors_metadata(data: bytes, where: str, size: int | None = None) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (header: 8-byte little-endian length, then a JSON object).

    ``data`` holds at least the header; ``size`` is the whole file's (default ``len(data)``).
    Anything else is one DocumentError naming ``where``.
    """
    size = len(data) if size is None else size
    length = int.from_bytes(data[:8], "little")
    if len(data) < 8 or length > HEADER_LIMIT or 8 + length > size:
        raise DocumentError(f"{where}: not a safetensors file (no header of the length its first 8 bytes give)")
    try:
        header = json.loads(data[8:8 + length])
    except RecursionError:
        raise DocumentError(f"{where}: not a safetensors file (its header is nested too deep)") from None
    except ValueError:  # bad JSON, bad UTF-8, a number too long to convert
        raise DocumentError(f"{where}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise DocumentError(f"{where}: not a safetensors file (its header is not a JSON object)")
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise DocumentError(f"{where}: not a safetensors file (its __metadata__ is not an object of strings)")
    return metadata


def _read_header(path: Path, where: str) -> None:
    """Check, before any work, that a featurizer file can be read and has a safetensors header."""
    with _reading(where), path.open("rb") as file:
        size = os.fstat(file.fileno()).st_size
        if stat.S_ISDIR(os.fstat(file.fileno()).st_mode):
            raise IsADirectoryError
        head = file.read(8)
        length = int.from_bytes(head, "little")
        if len(head) == 8 and length <= HEADER_LIMIT:
            head += file.read(length)
    safetensors_metadata(head, where, size)


def featurizer_files(document: Document, folder: Path) -> list[tuple[str, Path]]:
    """(where, path) of every featurizer file a document loads, swept values included."""
    files = []
    for name, spec in document.featurizers.items():
        load = (spec.model_extra or {}).get("load")
        where = f"$.featurizers.{name}.load"
        if is_sweep_ref(load):
            values = [(f"$.sweep.{load['sweep']}[{i}] (used by {where})", v)
                      for i, v in enumerate(document.sweep.get(load["sweep"], []))]
        else:
            values = [(where, load)]
        # Only strings are paths; any other value is refused with the featurizer's parameters.
        files += [(w, folder / v) for w, v in values if isinstance(v, str) and v]
    return files


def check_featurizer_files(document: Document, folder: Path, source: str) -> None:
    for where, path in featurizer_files(document, folder):
        _read_header(path, f"{source}: {where}: featurizer file {echo(str(path))}")


class Rows(tuple):
    """Data rows, each with the name a user finds it by: ``FILE:LINE`` of a JSONL file, or ``$.data.rows[i]``."""

    names: tuple[str, ...]

    def __new__(cls, rows: Any, names: Any) -> Rows:
        made = super().__new__(cls, rows)
        made.names = tuple(names)
        return made


def row_name(rows: Any, i: int) -> str:
    """How messages name row ``i``: the line of its JSONL file (what a user can open), or its inline path."""
    names = getattr(rows, "names", None)
    return f"row {names[i]}" if names else f"row $.data.rows[{i}]"


def load_rows(data: DataSpec, folder: Path, source: str = "", where: str = "$.data", registry: Any = None) -> Rows:
    """Rows inline, read from a JSONL file relative to ``folder``, or generated from a causal model."""
    at = f"{source}: " if source else ""
    if data.causal_model is not None:
        rows, _ = generated_rows(data.causal_model, f"{at}{where}.causal_model", registry)
        return Rows(rows, (f"{where}.causal_model#{i}" for i in range(len(rows))))
    if data.rows is not None:
        if not data.rows:
            raise DocumentError(f"{at}{where}.rows: no rows (a document needs at least one)")
        return Rows(data.rows, (f"{where}.rows[{i}]" for i in range(len(data.rows))))
    rel = Path(data.path)
    path = rel if rel.is_absolute() else folder / rel
    count_rows(path, f"{at}{where}.path: data file {echo(str(path))}")
    text = read_text(path, f"{at}{where}.path: data file {echo(str(path))}")
    rows, names = [], []
    # JSON Lines ends lines with \n only: a U+2028 inside a string is part of the row, not a line break.
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        row = _loads(line, f"{path}:{number}", lines=False)
        if not isinstance(row, dict):
            raise DocumentError(f"{path}:{number}: a row must be a JSON object, got {type(row).__name__}")
        deep = too_deep(row)
        if deep:
            raise DocumentError(f"{path}:{number}: {deep}: nested deeper than {MAX_DEPTH} levels")
        rows.append(row)
        names.append(f"{path.name}:{number}")
    if not rows:
        raise DocumentError(f"{path}: the data file has no rows")
    return Rows(rows, names)


def generated_rows(spec: Any, where: str, registry: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A causal model's rows, and what names them: the model, its provider, and the rows' sha256."""
    from causalab_core.document.causal import generate, rows_digest
    from causalab_core.errors import MissingPlugin
    from causalab_core.plugins.registry import registry as default_registry

    registry = registry or default_registry()
    try:
        cls = registry.get("causal_model", spec.kind, f"{where}.kind")
    except MissingPlugin as exc:
        raise DocumentError(str(exc)) from None
    try:
        params = cls.Params.model_validate(spec.model_extra or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        # A model validator's error has no location: it is about the spec as a whole.
        path = json_path(tuple(error["loc"]), spec.model_extra or {}).removeprefix("$")
        raise DocumentError(f"{where}{path}: {clip(describe(error))}") from None
    rows = generate(cls(params), spec, where)
    provider = registry.provider("causal_model", spec.kind)
    return rows, {"causal_model": spec.kind, "provider": f"{provider.distribution} {provider.version}",
                  "spec": spec.model_dump(), "rows": len(rows), "sha256": rows_digest(rows),
                  "labels_agree": labels_agree(rows)}


def labels_agree(rows: list[dict[str, Any]]) -> dict[str, float]:
    """For each pair of answer columns (the base answer and each label) that agree on some rows, the share of
    rows they agree on: 1.0 names hypotheses these rows cannot tell apart, which no finding may choose between."""
    columns = ["base_answer", *sorted(c for c in (rows[0] if rows else {}) if c.startswith("label_"))]
    shares = {}
    for i, a in enumerate(columns):
        for b in columns[i + 1:]:
            same = sum(row[a] == row[b] for row in rows)
            if same:
                shares[f"{a} = {b}"] = round(same / len(rows), 6)
    return shares


def load_document(document: Any, data_root: str | Path | None = None, registry: Any = None,
                  rows: Any = None) -> LoadedDocument:
    """Read, parse and validate a document and load (or generate) its rows. ``document``: a file path, JSON
    text, a dict or a ``Document`` (:mod:`causalab_core.document.given`); ``rows`` (a DataFrame or a list of
    dicts) replaces its data. Relative paths resolve from ``data_root``, else the document's folder, else the
    working folder for a document given in memory."""
    found = given(document)
    data = read_json(found.path) if found.data is None else found.data
    document = parse_document(with_rows(data, rows, found.source), found.source)
    home = found.path.parent if found.path is not None else Path.cwd()
    folder = Path(data_root) if data_root else home
    check_featurizer_files(document, folder, found.source)
    generated = None
    if document.data.causal_model is not None:
        made, generated = generated_rows(document.data.causal_model, f"{found.source}: $.data.causal_model", registry)
        loaded = Rows(made, (f"$.data.causal_model#{i}" for i in range(len(made))))
    else:
        loaded = load_rows(document.data, folder, found.source)
    return LoadedDocument(document, found.source, loaded, folder, generated, found.path, home)


def to_json(document: Any) -> str:
    """A document (a path, JSON text, a dict or a ``Document``) as the JSON text of a document file, after checking
    it against the schema. A relative ``data.path`` (or a featurizer's ``load``) resolves from the file's folder
    once written, from the working folder (or ``data_root``) in memory: write the file where its data is."""
    found = given(document)
    parsed = parse_document(read_json(found.path) if found.data is None else found.data, found.source)
    return json.dumps(parsed.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n"
