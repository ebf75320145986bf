"""The toy weekdays sweep on CUDA for each engine x dtype, timed, against the CPU float32 run: a table.

Run by scripts/gpu-check.sh (`python scripts/gpu_check.py OUT`; `OUT cpu` makes the same table on CPU).
Each run is the CLI a researcher types (`causalab run DOC --engine E --device-map cuda`), so a wall time
includes starting the process and loading the weights. Exits 1 if a run fails.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from causalab_testing.precision import at_dtype, deltas

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "documents" / "real" / "weekdays_layer_sweep.json"
CAUSALAB = Path(sys.executable).parent / "causalab"
DTYPES = ("float32", "float16", "bfloat16")
ENGINES = ("hooks", "nnterp")


def timed_run(document: Path, out: Path, engine: str, device: str) -> tuple[float, str | None]:
    """Wall seconds of one CLI run, and its last line of stderr where it failed."""
    start = time.perf_counter()
    done = subprocess.run([CAUSALAB, "run", document, "--out", out, "--force", "--engine", engine,
                           "--device-map", device], capture_output=True, text=True)
    failed = None if done.returncode == 0 else ((done.stderr.strip().splitlines() or ["no output"])[-1])
    return time.perf_counter() - start, failed


def main(folder: Path, device: str = "cuda") -> int:
    import torch

    docs = {dtype: at_dtype(SWEEP, dtype, folder) for dtype in DTYPES}
    reference = folder / "cpu-hooks-float32"
    rows = [("engine", "dtype", "device", "wall s", "IIA flips", "max|dIIA|", "max|d mean logit_diff|",
             "max|d row logit_diff|")]
    seconds, failed = timed_run(docs["float32"], reference, "hooks", "cpu")
    if failed:
        print(f"the CPU float32 reference run failed: {failed}")
        return 1
    rows.append(("hooks", "float32", "cpu", f"{seconds:.1f}", "reference", "", "", ""))
    status = 0
    for engine in ENGINES:
        for dtype in DTYPES:
            out = folder / f"{device}-{engine}-{dtype}"
            if out == reference:
                continue
            seconds, failed = timed_run(docs[dtype], out, engine, device)
            if failed:
                status = 1
                rows.append((engine, dtype, device, f"{seconds:.1f}", f"failed: {failed}", "", "", ""))
                continue
            d = deltas(out, reference)
            rows.append((engine, dtype, device, f"{seconds:.1f}", str(d["iia_flips"]), f"{d['iia_point']:.3g}",
                         f"{d['logit_diff_point']:.3g}", f"{d['logit_diff_row']:.3g}"))
    where = torch.cuda.get_device_name(0) if device.startswith("cuda") else device
    print(f"weekdays sweep (24 points x 60 rows) on {where}, torch {torch.__version__}, "
          f"against CPU float32; runs in {folder}")
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return status


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), *sys.argv[2:3]))
