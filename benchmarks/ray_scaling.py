"""A sweep on 1 and 2 Ray workers against one process, side by side in one run.

    .venv/bin/python benchmarks/ray_scaling.py [--repeats 3] [--json out.json]

Two sweeps: the shipped weekdays layer sweep (documents/real/weekdays_layer_sweep.json,
24 points x 60 rows on causalab-toy/weekdays, 8L d64) and benchmarks/sweep.py's
synthetic one (16 points x 40 rows on a random 8L d256 Llama). Each is run end to
end as a user runs it, one fresh `causalab run` per run: `--out` alone (one
process), `--workers 1`, `--workers 2` (a local cluster on 127.0.0.1 each time:
start, workers, one model load each, the chunks, the shutdown). Repeats are
interleaved and the table shows medians, with each one's ratio to one process and,
beside it, the median of the ratios taken repeat by repeat (a repeat's three runs
follow each other: the fairest comparison on a shared machine). Read the ratios.

Where the time goes in a worker run is measured once per sweep in this process
(`ray` split): starting the cluster; starting the workers and giving them the plan
(``RayChunks.start``); the chunks (model loads included: each worker loads at its
first chunk); and the shutdown. The machine's CPU count is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).parent.parent
CAUSALAB = str(Path(sys.executable).parent / "causalab")
CONFIGS = {"one process": [], "1 worker": ["--workers", "1"], "2 workers": ["--workers", "2"]}


def synthetic_doc() -> Path:
    """benchmarks/sweep.py's 8L d256 sweep: its model, its 40 rows, its document."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sweep import sweep_doc

    from causalab_testing import models
    from causalab_testing.data import weekday_rows

    scratch = Path(tempfile.mkdtemp(prefix="ray-scaling-"))
    wide = models.build(scratch / "wide", arch="llama", layers=8, width=256, heads=8)
    (scratch / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(40, seed=11)))
    doc = scratch / "doc.json"
    doc.write_text(json.dumps(sweep_doc(str(wide), 8, [-4, -1], scratch / "rows.jsonl")))
    return doc


def run_once(doc: Path, out: Path, options: list[str]) -> float:
    t = time.perf_counter()
    done = subprocess.run([CAUSALAB, "run", str(doc), "--out", str(out), "--force", *options], capture_output=True,
                          text=True)
    seconds = time.perf_counter() - t
    if done.returncode:
        raise SystemExit(f"{doc.name} {' '.join(options)}: {done.stderr.strip()}")
    return seconds


def metric_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.json"))
            if p.name not in ("run.json", "manifest.json")}


def split(doc: Path, workers: int) -> dict[str, float]:
    """One worker run in a fresh process, timed by stage (``--split``'s answer)."""
    done = subprocess.run([sys.executable, __file__, "--split", str(doc), str(workers)], capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed_stages(doc: Path, workers: int) -> dict[str, float]:
    from causalab_core import api
    from causalab_core.plugins.registry import registry
    from causalab_core.results.resume import open_store
    from causalab_ray.cluster import start_local
    from causalab_ray.runner import RayChunks

    reg = registry()
    plan = api.plan(doc)
    t0 = time.perf_counter()
    cluster = start_local()
    t1 = time.perf_counter()
    chunks = RayChunks(workers, None)
    chunks.start(plan, registry=reg, engine="hooks", options={}, batch_size=None, device_map=None)
    t2 = time.perf_counter()
    out = Path(tempfile.mkdtemp()) / "o"
    store = open_store(out, {"benchmark": "ray_scaling"}, resume=False)
    api.run_kept(plan, store, None, lambda: {}, None, chunks)
    t3 = time.perf_counter()
    count = -(-len(plan.points) // chunks.chunk_size(len(plan.points)))
    chunks.close()
    cluster.close()
    t4 = time.perf_counter()
    store.remove()
    return {"cluster start": t1 - t0, "workers start": t2 - t1, "chunks": t3 - t2, "shutdown": t4 - t3,
            "chunk count": count}


def bench(label: str, doc: Path, repeats: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="ray-scaling-out-"))
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for repeat in range(repeats + 1):  # the first round warms the disk cache, untimed
        for name, options in CONFIGS.items():
            seconds = run_once(doc, scratch / name.replace(" ", "-"), options)
            if repeat:
                times[name].append(seconds)
    files = {name: metric_bytes(scratch / name.replace(" ", "-")) for name in CONFIGS}
    same = all(files[name] == files["one process"] for name in CONFIGS)
    medians = {name: statistics.median(t) for name, t in times.items()}
    paired = {name: statistics.median(a / b for a, b in zip(times[name], times["one process"])) for name in CONFIGS}
    stages = {f"{n} worker{'s' if n > 1 else ''}": split(doc, n) for n in (1, 2)}
    from causalab_core import api

    plan = api.plan(doc)
    return {"sweep": label, "points": len(plan.points), "rows": plan.rows, "median_s": medians, "paired": paired,
            "times_s": times, "same_metric_bytes": same, "stages_s": stages}


def print_table(results: list[dict], load: tuple[float, ...]) -> None:
    shown = lambda xs: " ".join(f"{x:.1f}" for x in xs)  # noqa: E731
    print(f"\n{os.cpu_count()} CPUs; load average (1, 5, 15 min) at the start {shown(load)}, "
          f"at the end {shown(os.getloadavg())}")
    for r in results:
        print(f"\n{r['sweep']}: {r['points']} points x {r['rows']} rows, median of {len(r['times_s']['one process'])}"
              f" (metric files the same bytes: {'yes' if r['same_metric_bytes'] else 'NO'})")
        print(f"  {'':<12} {'median s':>9} {'x one':>7} {'paired':>7}")
        for name, seconds in r["median_s"].items():
            print(f"  {name:<12} {seconds:>9.2f} {seconds / r['median_s']['one process']:>6.2f}x "
                  f"{r['paired'][name]:>6.2f}x")
        print(f"  {'in one run':<12} {'cluster':>9} {'workers':>9} {'chunks':>9} {'shutdown':>9}  (s)")
        for name, s in r["stages_s"].items():
            print(f"  {name:<12} {s['cluster start']:>9.2f} {s['workers start']:>9.2f} {s['chunks']:>9.2f} "
                  f"{s['shutdown']:>9.2f}  {s['chunk count']} chunks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--split", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.split:
        print(json.dumps(timed_stages(Path(args.split[0]), int(args.split[1]))))
        return
    load = os.getloadavg()
    results = [bench("weekdays layer sweep (toy, 8L d64)", ROOT / "documents/real/weekdays_layer_sweep.json",
                     args.repeats),
               bench("synthetic llama (8L, d256)", synthetic_doc(), args.repeats)]
    print_table(results, load)
    if args.json:
        args.json.write_text(json.dumps({"cpus": os.cpu_count(), "load_average": [load, os.getloadavg()],
                                         "results": results}, indent=1))


if __name__ == "__main__":
    main()
