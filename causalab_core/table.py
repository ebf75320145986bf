"""A finished run as tidy tables: one row per point x data row x metric, summaries and trained files alongside."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from causalab_core.errors import OutputError, echo
from causalab_core.output import MANIFEST, _read_manifest
from causalab_core.results import NOT_A_NUMBER

TOP_FILES = {"document.json", "run.json", MANIFEST, "data.jsonl"}


@dataclass(frozen=True)
class LoadedRun:
    """What ``causalab_core.load`` returns. Each table is a pandas DataFrame where pandas is installed,
    else a list of plain records (dicts); ``records`` always holds the plain ones."""

    folder: Path
    document: dict[str, Any]
    run: dict[str, Any]
    axes: tuple[str, ...]
    records: dict[str, list[dict[str, Any]]]

    @property
    def rows(self) -> Any:
        """One row per point x data row x metric: the point's axis values, ``point``, ``metric``, ``kind``,
        ``row`` (0-based, in data order), ``eligible`` and ``value`` (None where the row was not scored)."""
        return _frame(self.records["rows"])

    @property
    def summaries(self) -> Any:
        """One row per point x metric: the axis values, ``point``, ``metric``, ``kind`` and each summary field."""
        return _frame(self.records["summaries"])

    @property
    def featurizers(self) -> Any:
        """One row per trained featurizer file: the axis values, ``point``, ``name``, ``file`` and its identity."""
        return _frame(self.records["featurizers"])


def _frame(records: list[dict[str, Any]]) -> Any:
    try:
        import pandas
    except ImportError:
        return records
    return pandas.DataFrame.from_records(records)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise OutputError(f"{echo(str(path))}: not a readable causalab output file ({type(exc).__name__})") from None


def metric_files(folder: Path) -> list[Path]:
    """Every metric file of a run folder, in a stable order: top-level ones, then each point's."""
    found = [p for p in sorted(folder.glob("*.json")) if p.name not in TOP_FILES]
    for point in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        found += [p for p in sorted(point.glob("*.json")) if p.name != "document.json"]
    return found


FIELDS = ("point", "metric", "kind", "row", "eligible", "value", "name", "file")
"""The tables' own columns; a sweep axis of one of these names is shown as ``sweep_<name>``."""


def _axis(name: str) -> str:
    return f"sweep_{name}" if name in FIELDS else name


def _checked(folder: Path) -> None:
    """Refuse a folder whose files are not what causalab wrote (its manifest's sha256 of each)."""
    listed = _read_manifest(folder)
    if listed is None:
        raise OutputError(f"{echo(str(folder))} is not a causalab output folder (no manifest.json of causalab's)")
    for rel, digest in sorted(listed.items()):
        path = folder / rel
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            what = "is missing" if not path.is_file() else "changed since causalab wrote it"
            raise OutputError(f"{echo(str(path))} {what}; the run's numbers cannot be read from it")


def _valid(content: Any) -> bool:
    if not isinstance(content, dict) or not {"metric", "values", "eligible", "summary"} <= set(content):
        return False
    values, eligible = content["values"], content["eligible"]
    return (isinstance(values, list) and isinstance(eligible, list) and len(values) == len(eligible)
            and isinstance(content["summary"], dict) and isinstance(content.get("point", {}), dict)
            and all(isinstance(ok, bool) for ok in eligible)
            and all(v is None or v in NOT_A_NUMBER.values() or (isinstance(v, (int, float)) and not isinstance(v, bool))
                    for v in values))


def load(out: str | Path) -> LoadedRun:
    """Read a finished causalab output folder (any engine, any document, with or without a sweep).

    Every file is checked against the folder's manifest first: a file changed or removed since the run
    is refused in one line, never read as if it were the run's."""
    folder = Path(out)
    if not (folder / "run.json").is_file() or not (folder / "document.json").is_file():
        raise OutputError(f"{echo(str(folder))} is not a causalab output folder (no run.json and document.json)")
    _checked(folder)
    document = _json(folder / "document.json")
    axes = tuple((document.get("sweep") or {}) if isinstance(document, dict) else ())
    rows, summaries, featurizers, points = [], [], [], {}
    for path in metric_files(folder):
        content = _json(path)
        if not _valid(content):
            raise OutputError(f"{echo(str(path))}: not a causalab metric file")
        point = path.parent.name if path.parent != folder else ""
        points[point] = {_axis(k): v for k, v in (content.get("point") or {}).items()}
        where = {**points[point], "point": point, "metric": content["metric"], "kind": content.get("kind")}
        for i, (value, eligible) in enumerate(zip(content["values"], content["eligible"])):
            # "NaN" / "Infinity" in the file (a value the metric could not compute) are floats here.
            rows.append({**where, "row": i, "eligible": eligible, "value": float(value) if isinstance(value, str) else value})
        summaries.append({**where, **content["summary"]})
    for path in sorted(folder.glob("**/*.safetensors")):
        from safetensors import safe_open

        with safe_open(path, "pt") as f:
            identity = f.metadata() or {}
        point = path.parent.name if path.parent != folder else ""
        where = {**points.get(point, {}), "point": point, "name": path.stem, "file": str(path.relative_to(folder))}
        featurizers.append({**where, **{k: v for k, v in identity.items() if k not in where}})
    return LoadedRun(folder, document, _json(folder / "run.json"), axes,
                     {"rows": rows, "summaries": summaries, "featurizers": featurizers})

