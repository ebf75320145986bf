"""A finished run as tidy tables: one row per point x data row x metric, summaries and trained files alongside."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from causalab_core.document.sweep import axis_label, points as sweep_points  # torch-free: the compiler package is lazy
from causalab_core.document.load import safetensors_metadata
from causalab_core.errors import CausalabError, OutputError, echo
from causalab_core.results.manifest import MANIFEST, UNTRUSTED, read_manifest, read_run
from causalab_core.results.score import NOT_A_NUMBER, _number

TOP_FILES = {"document.json", "run.json", MANIFEST, "data.jsonl", "circuit.json", "faithfulness.json"}


@dataclass(frozen=True, repr=False)
class LoadedRun:
    """What ``causalab_core.load`` returns. Each table is a pandas DataFrame where pandas is installed,
    else a list of plain records (dicts); ``records`` always holds the plain ones."""

    folder: Path | None
    """The output folder it was read from or written to; None for a run kept in memory (``run(out=None)``)."""
    document: dict[str, Any]
    run: dict[str, Any]
    axes: tuple[str, ...]
    records: dict[str, list[dict[str, Any]]]
    files: dict[str, bytes] = field(default_factory=dict, repr=False)
    """Every file the manifest lists, by path, as checked against it: what the tables were read from."""
    reads: tuple[Path, ...] = field(default=(), repr=False)
    """What the run read (its document, data, featurizer files, model folder): ``save`` never replaces them."""
    orders: dict[str, list[Any]] = field(default_factory=dict, repr=False)
    """Per position axis (one a read's or write's position takes), its values in prompt order: the tables'
    column of it is an ordered categorical, so a pivot or a sort puts positions as the prompt has them."""

    def save(self, out: str | Path, *, force: bool = False) -> Path:
        """Write the run's folder to ``out``: byte for byte the folder a run with ``out`` writes (its manifest
        too). An existing folder is refused unless ``force`` (and only a causalab output folder is replaced)."""
        from causalab_core.results.folder import write_folder

        if not isinstance(out, (str, os.PathLike)):
            raise OutputError(f"save: expected a folder path, got {echo(out)}")
        write_folder(Path(out), dict(self.files), force, self.reads)
        return Path(out)

    def __repr__(self) -> str:
        from causalab_core.results.view import text

        return text(self)

    def _repr_html_(self) -> str:
        from causalab_core.results.view import html

        return html(self)

    def plot(self, metric: str | None = None) -> Any:
        """A matplotlib figure of ``metric`` over the sweep (default: the first metric), from the installed report
        plugin (causalab-report): a heatmap over two axes, a line over one."""
        from causalab_core.results.view import figure

        return figure(self, metric)

    @property
    def rows(self) -> Any:
        """One row per point x data row x metric: the point's axis values, ``point``, ``metric``, ``kind``,
        ``row`` (0-based, in data order), ``eligible``, ``reason`` (why a row was not scored: a position's
        reason code, ``answers_coincide``; None where it was) and ``value`` (None where the row was not scored)."""
        return _frame(self.records["rows"], self.orders)

    @property
    def summaries(self) -> Any:
        """One row per point x metric: the axis values, ``point``, ``metric``, ``kind`` and each summary field."""
        return _frame(self.records["summaries"], self.orders)

    @property
    def positions(self) -> Any:
        """The positions record: one row per point x read or write x data row: the axis values, ``point``,
        ``name`` (the read's or write's), ``role``, ``input``, ``row``, ``window`` (token indices), ``tokens`` and
        ``reason`` (why it did not resolve; None where it did). Built when asked for, from the metric files."""
        found, firsts = [], {}
        for summary in self.records["summaries"]:
            firsts.setdefault(summary["point"], summary)
        for summary in firsts.values():
            point, metric = summary["point"], summary["metric"]  # a point's metric files share one record
            where = {_axis(a): summary[_axis(a)] for a in self.axes}
            content = json.loads(self.files[f"{point}/{metric}.json" if point else f"{metric}.json"])
            for name, record in (content.get("positions") or {}).items():
                for i, row in enumerate(record.get("rows") or []):
                    found.append({**where, "point": point, "name": name, "role": record.get("role"),
                                  "input": record.get("input"), "row": i, "window": row.get("window"),
                                  "tokens": row.get("tokens"), "reason": row.get("reason")})
        return _frame(found, self.orders)

    @property
    def circuit(self) -> dict[str, Any] | None:
        """A circuit search's choice (``circuit.json``): ``edges``, ``nodes``, ``size``, how it was chosen
        (``select``, ``scored_by``, ``ablation``), its ``faithfulness`` and every edge's score; None without one."""
        return json.loads(self.files["circuit.json"]) if "circuit.json" in self.files else None

    @property
    def faithfulness(self) -> Any:
        """A circuit search's faithfulness curve: one row per circuit size (``edges`` kept), its ``mean``,
        ``share`` of the full model's effect and their bounds (empty without a circuit search)."""
        curve = json.loads(self.files["faithfulness.json"])["curve"] if "faithfulness.json" in self.files else []
        return _frame([{k: float(v) if isinstance(v, str) else v for k, v in p.items()} for p in curve])

    @property
    def featurizers(self) -> Any:
        """One row per trained featurizer file: the axis values, ``point``, ``name``, ``file`` and its identity."""
        return _frame(self.records["featurizers"], self.orders)


def _frame(records: list[dict[str, Any]], orders: dict[str, list[Any]] | None = None) -> Any:
    try:
        import pandas
    except ImportError:
        return records
    frame = pandas.DataFrame.from_records(records)
    for column, order in (orders or {}).items():
        if column in frame.columns:
            frame[column] = pandas.Categorical(frame[column], categories=order, ordered=True)
    return frame


def position_axes(document: dict[str, Any]) -> dict[str, list[str]]:
    """Each sweep axis a read's or write's position takes: the names of those reads and writes."""
    found: dict[str, list[str]] = {}
    for part in ("writes", "reads"):
        for name, spec in (document.get(part) or {}).items():
            position = spec.get("position") if isinstance(spec, dict) else None
            if isinstance(position, dict) and set(position) == {"sweep"}:
                found.setdefault(position["sweep"], []).append(name)
    return found


def prompt_order(document: dict[str, Any], shown: dict[str, list[Any]], contents: list) -> dict[str, list[Any]]:
    """Per position axis, its shown values sorted by where they land in the prompt: the mean first token index
    of the windows they resolve to (from the metric files' positions records); the sweep's order breaks ties,
    and a value that resolves on no row comes last."""
    orders = {}
    for axis, names in position_axes(document).items():
        if axis not in shown:
            continue
        where: dict[int, float] = {}
        for _, content in contents:
            place = _place(document["sweep"][axis], (content.get("point") or {}).get(axis))
            if place is None or place in where:
                continue
            records = content.get("positions") or {}
            starts = [row["window"][0] for name in names for row in (records.get(name) or {}).get("rows") or []
                      if isinstance(row, dict) and row.get("window")]
            if starts and all(isinstance(x, int) for x in starts):
                where[place] = sum(starts) / len(starts)
        values = shown[axis]
        ranked = sorted(range(len(values)), key=lambda i: (i not in where, where.get(i, 0.0), i))
        orders[_axis(axis)] = list(dict.fromkeys(values[i] for i in ranked))
    return orders


def _json(folder: Path, rel: str, data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OutputError(f"{echo(str(folder / rel))}: not a readable causalab output file ({type(exc).__name__})") from None


def metric_files(folder: Path, listed: Iterable[str] | None = None) -> list[str]:
    """Every metric file of a run folder that its manifest lists (paths inside it): top-level ones, then each point's."""
    listed = sorted(read_manifest(folder) or {}) if listed is None else sorted(listed)
    top = [rel for rel in listed if "/" not in rel and rel.endswith(".json") and rel not in TOP_FILES]
    return top + [rel for rel in listed if rel.count("/") == 1 and rel.endswith(".json")
                  and not rel.endswith("/document.json") and not rel.startswith(".")]


FIELDS = ("point", "metric", "kind", "row", "eligible", "reason", "value", "name", "file")
"""The tables' own columns; a sweep axis of one of these names is shown as ``sweep_<name>``."""


def _axis(name: str) -> str:
    return f"sweep_{name}" if name in FIELDS else name


def _valid(content: Any) -> bool:
    if not isinstance(content, dict) or not {"metric", "values", "eligible", "summary"} <= set(content):
        return False
    values, eligible = content["values"], content["eligible"]
    return (isinstance(values, list) and isinstance(eligible, list) and len(values) == len(eligible)
            and isinstance(content["summary"], dict) and isinstance(content.get("point", {}), dict)
            and all(isinstance(ok, bool) for ok in eligible)
            and (content.get("reasons") is None or (isinstance(content["reasons"], list)
                 and len(content["reasons"]) == len(values)
                 and all(r is None or isinstance(r, str) for r in content["reasons"])))
            and all(v is None or v in NOT_A_NUMBER.values() or (isinstance(v, (int, float)) and not isinstance(v, bool))
                    for v in values))


def hashable(values: list[Any]) -> list[Any]:
    """A sweep axis's values as table cells: numbers, strings or booleans as they are (one kind per axis);
    any other axis (objects, lists, a mix) by the label its point folders show, so a pivot can group by it."""
    kinds = {"number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__ for v in values}
    if len(kinds) == 1 and kinds <= {"number", "str", "bool"}:
        return list(values)
    return [axis_label(v) for v in values]


def _order(document: dict[str, Any], content: dict[str, Any]) -> tuple:
    """Where a point stands in the sweep's own order (its values' places in the document's axes)."""
    sweep, point = document.get("sweep") or {}, content.get("point") or {}
    places = []
    for axis, values in sweep.items():
        place = _place(values, point.get(axis))
        places.append(len(values) if place is None else place)
    return tuple(places)


def _check_points(folder: Path, sweep: dict[str, list], metrics: list[str], contents: list) -> None:
    """The metric files are the ones the run's document makes: one per point and metric, each in the folder its
    point's values name. A manifest edited along with the files (a point removed or renamed) is refused here."""
    try:
        expected = {name: dict(values) for name, values in sweep_points(SimpleNamespace(sweep=sweep))}
    except CausalabError:
        raise OutputError(f"{folder / 'document.json'}: $.sweep: not a document causalab wrote") from None
    found = set()
    for rel, content in contents:
        point = rel.rpartition("/")[0]
        if point not in expected or json.dumps(_number(content.get("point") or {}), sort_keys=True) != json.dumps(
                _number(expected[point]), sort_keys=True):
            raise OutputError(f"{echo(str(folder / rel))}: not a point of the run's document.json; {UNTRUSTED}")
        found.add((point, content["metric"]))
    missing = [f"{p}/{m}.json" if p else f"{m}.json" for p in expected for m in metrics if (p, m) not in found]
    if missing:
        raise OutputError(f"{echo(str(folder / missing[0]))} is missing ({len(missing)} metric file"
                          f"{'s' if len(missing) != 1 else ''} of the run's document.json); {UNTRUSTED}")


def load(out: str | Path) -> LoadedRun:
    """Read a finished causalab output folder (any engine, any document, with or without a sweep).

    Only what the folder's manifest lists is read, each file checked against it first: a file changed or
    removed since the run is refused in one line, never read as if it were the run's. Points come in the
    sweep's own order, each point's metrics in the document's; a sweep axis of objects (positions such as
    ``{"variable": ...}``) is shown by its label, so the tables group and pivot on it."""
    if not isinstance(out, (str, os.PathLike)):
        raise OutputError(f"load: expected a run's folder, got {echo(out)}")
    folder = Path(out)
    return from_files(read_run(folder), folder)


def from_files(files: dict[str, bytes], folder: Path | None) -> LoadedRun:
    """The tables of a run's files (path -> bytes, as its manifest lists them); ``folder`` names them in
    messages, and is None for a run kept in memory."""
    where = folder if folder is not None else Path("(in memory)")
    loaded = _tables(files, where)
    return replace(loaded, folder=folder)


def _tables(files: dict[str, bytes], folder: Path) -> LoadedRun:
    if "run.json" not in files or "document.json" not in files:
        raise OutputError(f"{echo(str(folder))} is not a causalab output folder (no run.json and document.json)")
    document = _json(folder, "document.json", files["document.json"])
    if not isinstance(document, dict):
        raise OutputError(f"{folder / 'document.json'}: not a document causalab wrote (not a JSON object)")
    sweep = document.get("sweep") or {}
    if not isinstance(sweep, dict) or not all(isinstance(v, list) for v in sweep.values()):
        raise OutputError(f"{folder / 'document.json'}: $.sweep: not a document causalab wrote "
                          f"(the sweep is not an object of lists: {echo(sweep)})")
    axes = tuple(sweep)
    shown = {axis: hashable(values) for axis, values in sweep.items()}
    metric_order = list(document.get("metrics") or {}) if isinstance(document.get("metrics"), dict) else []
    contents = []
    for rel in metric_files(folder, files):
        content = _json(folder, rel, files[rel])
        if not _valid(content):
            raise OutputError(f"{echo(str(folder / rel))}: not a causalab metric file")
        contents.append((rel, content))
    _check_points(folder, sweep, metric_order, contents)
    contents.sort(key=lambda item: (_order(document, item[1]), metric_order.index(item[1]["metric"])
                                    if item[1]["metric"] in metric_order else len(metric_order), item[0]))
    rows, summaries, featurizers, points = [], [], [], {}
    for rel, content in contents:
        point = rel.rpartition("/")[0]
        points[point] = {_axis(k): _shown(sweep, shown, k, v) for k, v in (content.get("point") or {}).items()}
        where = {**points[point], "point": point, "metric": content["metric"], "kind": content.get("kind")}
        reasons = content.get("reasons") or [None] * len(content["values"])  # older runs have none
        for i, (value, eligible, reason) in enumerate(zip(content["values"], content["eligible"], reasons)):
            # "NaN" / "Infinity" in the file (a value the metric could not compute) are floats here.
            rows.append({**where, "row": i, "eligible": eligible, "reason": reason,
                         "value": float(value) if isinstance(value, str) else value})
        summaries.append({**where, **content["summary"], **estimate_columns(content)})
    order = list(dict.fromkeys(rel.rpartition("/")[0] for rel, _ in contents))
    for rel in sorted((r for r in files if r.endswith(".safetensors")),
                      key=lambda r: (order.index(r.rpartition("/")[0]) if r.rpartition("/")[0] in order else len(order), r)):
        identity = safetensors_metadata(files[rel], str(folder / rel))
        point = rel.rpartition("/")[0]
        where = {**points.get(point, {}), "point": point, "name": Path(rel).stem, "file": rel}
        featurizers.append({**where, **{k: v for k, v in identity.items() if k not in where}})
    return LoadedRun(folder, document, _json(folder, "run.json", files["run.json"]), axes,
                     {"rows": rows, "summaries": summaries, "featurizers": featurizers}, files,
                     orders=prompt_order(document, shown, contents))


def estimate_columns(content: dict[str, Any]) -> dict[str, Any]:
    """A summary's columns for an estimated point (``estimate``): the method and its integrated-gradient steps
    (1: the plain estimate), the clean run's mean it starts from, and where the point was confirmed, the patched
    mean; nothing for a patched run."""
    estimate = content.get("estimate")
    if not isinstance(estimate, dict):
        return {}
    patched = (content.get("patched") or {}).get("summary") or {}
    return {"estimate": estimate.get("method"), "estimate_steps": estimate.get("steps", 1),
            "clean_mean": estimate.get("clean_mean"),
            "patched_mean": patched.get("mean")}


def _place(values: list[Any], value: Any) -> int | None:
    """Where ``value`` stands among an axis's values (1 and True, 1 and 1.0 told apart), or None."""
    return next((i for i, v in enumerate(values) if v == value and type(v) is type(value)), None)


def _shown(sweep: dict[str, list[Any]], shown: dict[str, list[Any]], axis: str, value: Any) -> Any:
    """A point's value of ``axis`` as the tables show it."""
    place = _place(sweep.get(axis, []), value)
    if place is not None:
        return shown[axis][place]
    return value if isinstance(value, (int, float, str, bool)) or value is None else axis_label(value)
