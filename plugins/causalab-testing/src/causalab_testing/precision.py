"""A sweep document at another dtype, and how far a finished run's numbers sit from a reference run's."""

from __future__ import annotations

import json
from pathlib import Path

# What the half-precision figures measure besides the document's own IIA metrics: the answer label's
# logit over the base answer's, a number that moves with every rounding (IIA moves only when a row flips).
LOGIT_DIFF = {"kind": "logit_diff", "target": "label_answer", "other": "base_answer"}


def at_dtype(source: Path, dtype: str, folder: Path) -> Path:
    """``source`` (a document whose data a causal model generates) with ``model.dtype`` = ``dtype`` and a
    ``logit_diff`` metric added, written into ``folder``; its path."""
    document = json.loads(Path(source).read_text())
    document["model"]["dtype"] = dtype
    document["metrics"]["logit_diff"] = LOGIT_DIFF
    path = Path(folder) / f"{Path(source).stem}-{dtype}.json"
    path.write_text(json.dumps(document, indent=1))
    return path


def metric_files(out: Path) -> dict[tuple[str, str], dict]:
    """(point folder, metric) -> the metric file's content, for every point of a finished run (read as its
    manifest lists it, each file checked: ``causalab_core.load``)."""
    from causalab_core.results import table

    run = table.load(out)
    return {(rel.rpartition("/")[0], Path(rel).stem): json.loads(run.files[rel])
            for rel in table.metric_files(run.folder, run.files) if "/" in rel}


def deltas(run: Path, reference: Path) -> dict[str, float]:
    """How far ``run``'s numbers sit from ``reference``'s, over every point: IIA rows that flip, the largest
    change of a point's IIA, of a point's mean logit_diff, and of one row's logit_diff."""
    ours, theirs = metric_files(run), metric_files(reference)
    if ours.keys() != theirs.keys():
        raise ValueError(f"{run} and {reference} are not runs of the same sweep")
    found = {"iia_flips": 0, "iia_point": 0.0, "logit_diff_point": 0.0, "logit_diff_row": 0.0}
    for key, mine in ours.items():
        other = theirs[key]
        point = abs(mine["summary"]["mean"] - other["summary"]["mean"])
        # An IIA row whose choices tie is "NaN" (undefined): a flip when the other run decided it.
        pairs = [(a, b) for a, b in zip(mine["values"], other["values"]) if a is not None and b is not None]
        rows = [float(a != b) if "NaN" in (a, b) else abs(a - b) for a, b in pairs]
        if mine["kind"] == "iia":
            found["iia_flips"] += sum(d > 0 for d in rows)
            found["iia_point"] = max(found["iia_point"], point)
        elif mine["kind"] == "logit_diff":
            found["logit_diff_point"] = max(found["logit_diff_point"], point)
            found["logit_diff_row"] = max(found["logit_diff_row"], *rows)
    return found
