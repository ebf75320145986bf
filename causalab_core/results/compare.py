"""Two finished runs side by side: per metric, which files and rows differ, by how much, and which IIA rows flipped."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from causalab_core.errors import shorten
from causalab_core.results.table import LoadedRun, load, metric_files

SHOWN = 3
"""Points and document paths named in the one line that says two runs are not of one experiment."""
SETTING = ("name", "description", "sweep", "model", "estimate")
"""Document fields the experiment check leaves out: names, or what it reports on its own (points, model, and
an estimate: the same experiment estimated, whose agreement with patching ``estimate_agreement`` gives)."""


def _by_file(run: LoadedRun) -> dict[str, bytes]:
    """The run's metric files in the order its tables list them (the sweep's, then the document's metrics)."""
    listed = metric_files(run.folder, run.files)
    shown = [f"{s['point']}/{s['metric']}.json" if s["point"] else f"{s['metric']}.json" for s in run.records["summaries"]]
    return {rel: run.files[rel] for rel in [*dict.fromkeys(r for r in shown if r in listed), *listed]}


def _paths(a: Any, b: Any, where: str = "$") -> list[str]:
    """The JSON paths at which two documents differ, shallowest first."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for key in sorted(set(a) | set(b), key=str)
                for p in (_paths(a.get(key), b.get(key), f"{where}.{key}") if key in a and key in b else [f"{where}.{key}"])]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _paths(x, y, f"{where}[{i}]")]
    return [] if a == b and type(a) is type(b) else [where]


def _rows(run: LoadedRun) -> tuple[int | None, str | None]:
    """How many data rows the run scored, and their sha256 where run.json records it."""
    data = run.run.get("data") if isinstance(run.run, dict) else None
    digest = data.get("sha256") if isinstance(data, dict) else None
    counts = {len(json.loads(run.files[rel])["values"]) for rel in metric_files(run.folder, run.files)}
    return (counts.pop() if len(counts) == 1 else None), digest


def _named(items: list[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def experiment(left: LoadedRun, right: LoadedRun) -> dict[str, Any]:
    """What makes two runs not of one experiment: ``{"document": [paths], "model": ..., "data": ...,
    "points": {...}}`` for each that differs (empty when they are of one), and ``engines`` when they differ."""
    differs: dict[str, Any] = {}
    doc_a, doc_b = left.document, right.document
    (count_a, digest_a), (count_b, digest_b) = _rows(left), _rows(right)
    skip = set(SETTING) | ({"data"} if digest_a and digest_b else set())  # the same rows from another path
    paths = _paths({k: v for k, v in doc_a.items() if k not in skip}, {k: v for k, v in doc_b.items() if k not in skip})
    if paths:
        differs["document"] = paths
    if doc_a.get("model") != doc_b.get("model"):
        differs["model"] = [doc_a.get("model"), doc_b.get("model")]
    if count_a != count_b or (digest_a and digest_b and digest_a != digest_b):  # an older run.json has no digest
        differs["data"] = {"rows": [count_a, count_b], "sha256": [digest_a, digest_b]}
    points_a = list(dict.fromkeys(r["point"] for r in left.records["summaries"]))  # in the sweep's order
    points_b = list(dict.fromkeys(r["point"] for r in right.records["summaries"]))
    if set(points_a) != set(points_b) or list(left.axes) != list(right.axes):
        differs["points"] = {"only_in_a": [p for p in points_a if p not in points_b],
                             "only_in_b": [p for p in points_b if p not in points_a],
                             "axes": [list(left.axes), list(right.axes)]}
    engines = [left.run.get("engine"), right.run.get("engine")] if isinstance(left.run, dict) and \
        isinstance(right.run, dict) else [None, None]
    return {"differs": differs, **({"engines": engines} if engines[0] != engines[1] else {})}


def _experiment_line(found: dict[str, Any], a: str, b: str) -> str | None:
    """One line: what makes the two runs not of one experiment, or None."""
    differs, said = found["differs"], []
    if "document" in differs:
        said.append(f"the documents differ at {_named(differs['document'])}")
    if "model" in differs:
        a_model, b_model = ((m if isinstance(m, dict) else {}) for m in differs["model"])
        fields = [k for k in dict.fromkeys([*a_model, *b_model]) if a_model.get(k) != b_model.get(k)]
        said.append("the models differ ({})".format(", ".join(
            f"{k} {shorten(str(a_model.get(k)), 60)} vs {shorten(str(b_model.get(k)), 60)}" for k in fields)))
    if "data" in differs:
        rows = differs["data"]["rows"]
        said.append(f"the data rows differ ({rows[0]} vs {rows[1]} rows)" if rows[0] != rows[1] else
                    f"the data rows differ (both {rows[0]} rows, other rows or another order)")
    if "points" in differs:
        points = differs["points"]
        parts = [f"{len(points[k])} only in {side}: {_named(points[k])}"
                 for k, side in (("only_in_a", a), ("only_in_b", b)) if points[k]]
        if points["axes"][0] != points["axes"][1]:
            parts.insert(0, "sweep axes {} vs {}".format(*(", ".join(x) or "none" for x in points["axes"])))
        said.append(f"the points differ ({'; '.join(parts)})")
    return f"{a} and {b} are not runs of one experiment: {'; '.join(said)}" if said else None


def _same(a: Any, b: Any) -> bool:
    """Equal, a NaN counting as equal to a NaN."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _grouped(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault((r["point"], r["metric"]), []).append(r)
    return grouped


def _paired_summaries(left: LoadedRun, right: LoadedRun) -> dict[tuple[str, str], tuple[dict, dict]]:
    theirs = {(r["point"], r["metric"]): r for r in right.records["summaries"]}
    return {(r["point"], r["metric"]): (r, theirs[(r["point"], r["metric"])])
            for r in left.records["summaries"] if (r["point"], r["metric"]) in theirs}


def _apart(x: dict, y: dict) -> bool:
    """Whether two summaries' mean intervals do not overlap (False where either has none)."""
    bounds = [x.get("mean_low"), x.get("mean_high"), y.get("mean_low"), y.get("mean_high")]
    if not all(isinstance(b, (int, float)) and math.isfinite(b) for b in bounds):
        return False
    return bounds[1] < bounds[2] or bounds[3] < bounds[0]


def compare(a: str | Path, b: str | Path) -> dict[str, Any]:
    """``{"identical": bool, "metrics": {name: {...}}, "only_in_a": [...], "only_in_b": [...]}``.

    ``same_experiment``: whether the documents (but their name and description), model, data rows and
    points agree; ``experiment`` says what differs, and ``engines`` where the runs ran on two engines.
    Per metric: ``files`` (in both), ``files_differ``, ``rows`` (compared), ``rows_differ``,
    ``largest_difference`` (over rows both scored with a finite number), ``not_a_number_differs``, ``flips`` (``{point: [row, ...]}`` for IIA: rows whose
    0/1 outcome changed), ``eligibility_differs`` (rows scored in one run only); ``means_differ`` (points
    whose summary means differ) and ``intervals_apart`` (those points, among them, whose 95% bootstrap
    intervals do not overlap: a difference beyond what resampling the rows gives).
    """
    return compare_runs(load(a), load(b))


def compare_runs(left: LoadedRun, right: LoadedRun) -> dict[str, Any]:
    """``compare`` of two runs already read (a folder's, or one kept in memory)."""
    files_a, files_b = _by_file(left), _by_file(right)
    rows_a, rows_b = _grouped(left.records["rows"]), _grouped(right.records["rows"])
    metrics: dict[str, dict[str, Any]] = {}
    for rel in [r for r in files_a if r in files_b]:
        point, _, file = rel.rpartition("/")
        name = file.removesuffix(".json")
        entry = metrics.setdefault(name, {"files": 0, "files_differ": 0, "rows": 0, "rows_differ": 0,
                                          "largest_difference": 0.0, "flips": {}, "eligibility_differs": 0,
                                          "not_a_number_differs": 0})
        entry["files"] += 1
        mine, theirs = rows_a.get((point, name), []), rows_b.get((point, name), [])
        entry["rows"] += len(mine)
        if files_a[rel] == files_b[rel]:
            continue
        entry["files_differ"] += 1
        entry["rows_differ"] += abs(len(mine) - len(theirs))
        for x, y in zip(mine, theirs):
            if x["eligible"] == y["eligible"] and _same(x["value"], y["value"]):
                continue
            entry["rows_differ"] += 1
            if x["eligible"] != y["eligible"] or x["value"] is None or y["value"] is None:
                entry["eligibility_differs"] += 1
                continue
            if not (math.isfinite(x["value"]) and math.isfinite(y["value"])):  # NaN on one side: no distance
                entry["not_a_number_differs"] += 1
                continue
            entry["largest_difference"] = max(entry["largest_difference"], abs(x["value"] - y["value"]))
            if x["kind"] == "iia":
                entry["flips"].setdefault(point, []).append(x["row"])
    for (point, name), (x, y) in _paired_summaries(left, right).items():
        if name in metrics and not _same(x.get("mean"), y.get("mean")):
            entry = metrics[name]
            entry["means_differ"] = entry.get("means_differ", 0) + 1
            if _apart(x, y):
                entry.setdefault("intervals_apart", []).append(point)
    only_a = [r for r in files_a if r not in files_b]
    only_b = [r for r in files_b if r not in files_a]
    found = experiment(left, right)
    identical = (not only_a and not only_b and all(m["files_differ"] == 0 for m in metrics.values())
                 and not found["differs"])
    return {"identical": identical, "same_experiment": not found["differs"], "experiment": found,
            "metrics": metrics, "only_in_a": only_a, "only_in_b": only_b,
            **({"estimate": agreement} if (agreement := estimate_agreement(left, right)) else {})}


def estimate_agreement(left: LoadedRun, right: LoadedRun) -> dict[str, Any] | None:
    """Where one run estimates (``estimate``) and the other patches the same points: which one estimates, and
    per metric over the points both scored, how the estimated effects (mean less the clean run's) agree with
    the patched ones: ``spearman``, ``same_sign`` (share), ``mean_abs_error`` and ``mean_abs_effect``."""
    from causalab_core.results.confirm import spearman

    estimated = [isinstance(run.run.get("estimate"), dict) for run in (left, right)]
    if estimated[0] == estimated[1]:
        return None
    guess, real = (left, right) if estimated[0] else (right, left)
    metrics: dict[str, Any] = {}
    for (point, name), (x, y) in _paired_summaries(guess, real).items():
        values = (x.get("mean"), y.get("mean"), x.get("clean_mean"))
        if all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            pairs = metrics.setdefault(name, [])
            pairs.append((values[0] - values[2], values[1] - values[2]))
    for name, pairs in metrics.items():
        metrics[name] = {"points": len(pairs), "spearman": spearman([e for e, _ in pairs], [a for _, a in pairs]),
                         "same_sign": sum((e > 0) == (a > 0) for e, a in pairs) / len(pairs),
                         "mean_abs_error": sum(abs(e - a) for e, a in pairs) / len(pairs),
                         "mean_abs_effect": sum(abs(a) for _, a in pairs) / len(pairs)}
    return {"estimated": "a" if estimated[0] else "b", "method": guess.run["estimate"], "metrics": metrics}


def describe(report: dict[str, Any], a: str, b: str) -> str:
    """The report as lines a person reads: first, whether the runs are of one experiment at all."""
    engines = report["experiment"].get("engines")
    ran = f" (engines {engines[0]} and {engines[1]})" if engines else ""
    if report["identical"]:
        files = sum(m["files"] for m in report["metrics"].values())
        return f"{a} and {b}: identical ({files} metric files){ran}"
    other = _experiment_line(report["experiment"], a, b)
    lines = ([other] if other else []) + [f"{a} and {b} differ{ran}:"]
    for name, m in report["metrics"].items():
        if not m["files_differ"]:
            lines.append(f"  {name}: identical ({m['files']} files)")
            continue
        line = (f"  {name}: {m['files_differ']} of {m['files']} files differ, {m['rows_differ']} of {m['rows']} rows,"
                f" largest difference {m['largest_difference']:.9g}")
        if m["eligibility_differs"]:
            line += f", {m['eligibility_differs']} rows scored in one run only"
        if m["not_a_number_differs"]:
            line += f", {m['not_a_number_differs']} rows a number in one run and NaN or infinite in the other"
        lines.append(line)
        if m.get("means_differ"):
            apart = m.get("intervals_apart", [])
            lines.append(f"    the mean differs at {m['means_differ']} points: "
                         + (f"{len(apart)} beyond the 95% intervals of both runs ({_named(apart)}), "
                            f"{m['means_differ'] - len(apart)} within them" if apart
                            else "all within the 95% intervals over rows"))
        if m["flips"]:
            flips = sum(len(rows) for rows in m["flips"].values())
            where = "; ".join(f"{point or '(no sweep)'}: rows {', '.join(map(str, rows))}" for point, rows in m["flips"].items())
            lines.append(f"    {flips} IIA rows flipped (0-based data rows): {where}")
    if report.get("estimate"):
        found = report["estimate"]
        guess, real = (a, b) if found["estimated"] == "a" else (b, a)
        steps = found["method"].get("steps", 1)
        lines.append(f"  {guess} estimates ({found['method'].get('method')}"
                     + (f", {steps} steps" if steps > 1 else "") + f") what {real} patches:")
        for name, m in found["metrics"].items():
            rho = "-" if m["spearman"] is None else f"{m['spearman']:.2f}"
            share = f" ({m['mean_abs_error'] / m['mean_abs_effect']:.0%} of the mean effect)" if m["mean_abs_effect"] else ""
            lines.append(f"    {name}: over {m['points']} points Spearman {rho}, same sign {m['same_sign']:.0%}, "
                         f"mean error {m['mean_abs_error']:.3g}{share}")
    for side, files in (("only in " + a, report["only_in_a"]), ("only in " + b, report["only_in_b"])):
        if files:
            lines.append(f"  {side}: {_named(files)}")  # all of them with --json
    return "\n".join(lines)
