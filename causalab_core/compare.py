"""Two finished runs side by side: per metric, which files and rows differ, by how much, and which IIA rows flipped."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from causalab_core.table import load, metric_files


def _by_file(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in metric_files(folder)}


def _same(a: Any, b: Any) -> bool:
    """Equal, a NaN counting as equal to a NaN."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def _grouped(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault((r["point"], r["metric"]), []).append(r)
    return grouped


def compare(a: str | Path, b: str | Path) -> dict[str, Any]:
    """``{"identical": bool, "metrics": {name: {...}}, "only_in_a": [...], "only_in_b": [...]}``.

    Per metric: ``files`` (in both), ``files_differ``, ``rows`` (compared), ``rows_differ``,
    ``largest_difference`` (over rows both scored with a finite number), ``not_a_number_differs``, ``flips`` (``{point: [row, ...]}`` for IIA: rows whose
    0/1 outcome changed), ``eligibility_differs`` (rows scored in one run only).
    """
    left, right = load(a), load(b)
    files_a, files_b = _by_file(left.folder), _by_file(right.folder)
    rows_a, rows_b = _grouped(left.records["rows"]), _grouped(right.records["rows"])
    metrics: dict[str, dict[str, Any]] = {}
    for rel in sorted(set(files_a) & set(files_b)):
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
    only_a = sorted(set(files_a) - set(files_b))
    only_b = sorted(set(files_b) - set(files_a))
    identical = not only_a and not only_b and all(m["files_differ"] == 0 for m in metrics.values())
    return {"identical": identical, "metrics": metrics, "only_in_a": only_a, "only_in_b": only_b}


def describe(report: dict[str, Any], a: str, b: str) -> str:
    """The report as lines a person reads."""
    if report["identical"]:
        files = sum(m["files"] for m in report["metrics"].values())
        return f"{a} and {b}: identical ({files} metric files)"
    lines = [f"{a} and {b} differ:"]
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
        if m["flips"]:
            flips = sum(len(rows) for rows in m["flips"].values())
            where = "; ".join(f"{point or '(no sweep)'}: rows {', '.join(map(str, rows))}" for point, rows in m["flips"].items())
            lines.append(f"    {flips} IIA rows flipped (0-based data rows): {where}")
    for side, files in (("only in " + a, report["only_in_a"]), ("only in " + b, report["only_in_b"])):
        if files:
            lines.append(f"  {side}: {', '.join(files)}")
    return "\n".join(lines)
