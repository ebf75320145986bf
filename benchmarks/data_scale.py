"""Memory per data row: `causalab validate` and a one-point `causalab run` on 10^3 .. 10^6 short rows.

    .venv/bin/python benchmarks/data_scale.py [--rows 1000 10000 100000 1000000] [--engine hooks]

Each command runs in a fresh process on a JSONL file of weekday rows (four short prompts and answers a row, as
`documents/examples/`), on the toy weekdays model, one point (layer 3, last position); its peak resident memory
is read from the kernel (``ru_maxrss`` of the child). The table shows the peak, the peak above the 1,000-row
run's (what the rows add), and that per row. A row count over the documented limit is refused in one line:
its row shows the refusal's peak and time instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
CAUSALAB = str(Path(sys.executable).parent / "causalab")


def document() -> dict:
    doc = json.loads((ROOT / "documents/real/weekdays_layer_sweep.json").read_text())
    doc.pop("sweep", None)
    doc["data"] = {"path": "rows.jsonl"}
    for spec in (*doc["reads"].values(), *doc["writes"].values()):
        spec["layer"], spec["position"] = 3, -1
    doc.pop("description", None)
    doc["metrics"] = json.loads((ROOT / "documents/examples/weekdays_sweep.json").read_text())["metrics"]
    return doc


def write_rows(path: Path, count: int) -> None:
    from causalab_testing.data import weekday_rows

    pattern = [json.dumps(r) + "\n" for r in weekday_rows(200, seed=3)]
    with path.open("w") as f:
        for i in range(count):
            f.write(pattern[i % len(pattern)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--engine", default="hooks")
    args = parser.parse_args()
    doc = document()
    print("| rows | command | peak MiB | MiB above 1,000 rows | KiB a row | seconds | exit |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    base: dict[str, float] = {}
    for count in sorted(args.rows):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "doc.json").write_text(json.dumps(doc))
            write_rows(folder / "rows.jsonl", count)
            for command in ("validate", "run"):
                extra = ["--out", str(folder / "out"), "--engine", args.engine] if command == "run" else []
                # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: measure each in its own process.
                code = (f"import resource, subprocess, sys; p = subprocess.run({[CAUSALAB, command, str(folder / 'doc.json'), *extra]!r}, "
                        "capture_output=True, text=True); "
                        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode, "
                        "repr((p.stderr.strip().splitlines() or [''])[-1]))")
                start = time.perf_counter()
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split(" ", 2)
                seconds = time.perf_counter() - start
                peak, exit_code, line = int(out[0]) / 1024, int(out[1]), out[2].strip()
                if count == min(args.rows):
                    base[command] = peak
                above = peak - base.get(command, peak)
                per_row = above * 1024 / (count - min(args.rows)) if count > min(args.rows) else float("nan")
                shown = "" if exit_code == 0 else f" ({line[:90]})"
                print(f"| {count:,} | {command} | {peak:,.0f} | {above:,.0f} | {per_row:.1f} | {seconds:.1f} | "
                      f"{exit_code}{shown} |", flush=True)


if __name__ == "__main__":
    main()
