"""The report's size and the time to write it for a sweep of over 1,000 points (run on demand, never in CI).

    .venv/bin/python plugins/causalab-report/benchmarks/thousand_points.py [--out DIR]

The sweep: Gaussian noise added to the residual stream entering each block of the toy weekdays model, at
every position of its 12-token prompts, at 11 noise scales: 8 layers x 12 positions x 11 scales = 1,056
points, 60 rows each, 3 metrics (IIA of the base answer, its probability, and its logit difference with
the answer the counterfactual's count and day give). Prints the run's time, then the page's size and the
time ``causalab report`` takes, as a user runs it (a fresh process, the model's tokenizer loaded); the
page has three axes, so it shows layer x position at a chosen scale."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHOICES = ["base_answer", "label_count", "label_day", "label_answer"]


def document() -> dict:
    shipped = json.loads((ROOT / "documents" / "real" / "weekdays_layer_sweep.json").read_text())
    at = {"layer": {"sweep": "layer"}, "site": "block_input", "position": {"sweep": "pos"}}
    return {
        "version": "2", "name": "weekdays-noise-sweep",
        "description": "Noise at each block's input, each position and 11 scales: where does it break the answer?",
        "model": shipped["model"], "data": shipped["data"], "inputs": ["base", "counterfactual"],
        "writes": {"noise": {"input": "base", **at, "intervention": {"kind": "noise", "scale": {"sweep": "scale"}}}},
        "metrics": {"iia_base": {"kind": "iia", "choices": CHOICES, "label": "base_answer", "input": "base"},
                    "p_base": {"kind": "p_answer", "answer": "base_answer", "input": "base"},
                    "logit_diff": {"kind": "logit_diff", "target": "base_answer", "other": "label_answer",
                                   "input": "base"}},
        "sweep": {"layer": list(range(8)), "pos": list(range(12)),
                  "scale": [0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12]},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    folder = args.out or Path(tempfile.mkdtemp(prefix="report-1000-"))
    folder.mkdir(parents=True, exist_ok=True)
    doc = folder / "doc.json"
    doc.write_text(json.dumps(document(), indent=1))
    causalab = str(Path(sys.prefix) / "bin" / "causalab")
    start = time.perf_counter()
    subprocess.run([causalab, "run", str(doc), "--out", str(folder / "run"), "--force"], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    ran = time.perf_counter() - start
    points = sum(1 for p in (folder / "run").iterdir() if p.is_dir())
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([causalab, "report", str(folder / "run")], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    page = folder / "run" / "report.html"
    print(json.dumps({"points": points, "run_s": round(ran, 1), "report_s": [round(t, 2) for t in times],
                      "report_bytes": page.stat().st_size, "page": str(page)}, indent=1))


if __name__ == "__main__":
    main()
