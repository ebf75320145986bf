"""Wall time of the same sweep through each engine, side by side in one run.

    .venv/bin/python benchmarks/engines.py [--repeats 5] [--rows 42] [--json out.json]

For each model, every engine runs the same compiled plan; repeats are
interleaved (engine A, engine B, A, B, ...) so that machine noise hits both,
and the table reports medians and each engine's ratio to `hooks`. Weights are
loaded once per engine before timing (warm-up run), as in a long session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from causalab_core import api
from causalab_core.plugins.registry import registry
from causalab_testing import models
from causalab_testing.data import sweep_document, weekday_rows

ENGINES = ("hooks", "nnterp")


def model_dirs(scratch: Path) -> dict[str, Path]:
    return {
        "tiny-llama (4L, d32)": models.ensure("tiny-llama"),
        "tiny-gpt2 (4L, d32)": models.ensure("tiny-gpt2"),
        "llama 8L d256": models.build(scratch / "wide", arch="llama", layers=8, width=256, heads=8),
    }


def bench(model: Path, rows: int, repeats: int, scratch: Path) -> dict:
    layers = list(range(min(8, api_layers(model))))
    doc = sweep_document(str(model), layers=layers, positions=[-4, -1])
    (scratch / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(rows)))
    path = scratch / "doc.json"
    path.write_text(json.dumps(doc))
    t0 = time.perf_counter()
    plan = api.plan(path)
    compile_s = time.perf_counter() - t0
    engines = {name: registry().get("engine", name)() for name in ENGINES}
    for engine in engines.values():
        engine.execute(plan)  # warm-up: loads weights
    times = {name: [] for name in ENGINES}
    for _ in range(repeats):
        for name, engine in engines.items():
            t = time.perf_counter()
            engine.execute(plan)
            times[name].append(time.perf_counter() - t)
    return {"points": len(plan.points), "rows": rows, "compile_s": compile_s,
            "median_s": {n: statistics.median(t) for n, t in times.items()}}


def api_layers(model: Path) -> int:
    return json.loads((model / "config.json").read_text()).get("num_hidden_layers") or json.loads(
        (model / "config.json").read_text())["n_layer"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=42)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, model in model_dirs(Path(tmp)).items():
            report[label] = bench(model, args.rows, args.repeats, Path(tmp))
    header = f"{'model':<22} {'points':>6} {'rows':>5} {'compile s':>10} " + " ".join(
        f"{e + ' s':>10}" for e in ENGINES) + " " + " ".join(f"{e + '/hooks':>13}" for e in ENGINES[1:])
    print(header)
    for label, r in report.items():
        med = r["median_s"]
        print(f"{label:<22} {r['points']:>6} {r['rows']:>5} {r['compile_s']:>10.3f} "
              + " ".join(f"{med[e]:>10.3f}" for e in ENGINES) + " "
              + " ".join(f"{med[e] / med['hooks']:>12.2f}x" for e in ENGINES[1:]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
