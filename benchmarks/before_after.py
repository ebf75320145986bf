"""The same interchange sweeps timed on two checkouts of causalab, interleaved (issue #32: no regression).

    .venv/bin/python benchmarks/before_after.py --side before=/tmp/before-venv/bin/python \\
        --side after=/tmp/after-venv/bin/python [--threads 1] [--repeats 15] [--heatmap-repeats 6] \\
        [--heatmap-rows 2] [--noise-repeats 9] [--json out.json] [--skip sweep heatmap noise]

Each side is a Python whose causalab (core and plugins) is another checkout: a venv whose editable
``.pth`` files point at a ``git worktree`` of that commit (the README's "interventions: before and
after" section says how one is made). Every worker imports whichever causalab is first on its path
and reports the files it imported and the commit of their tree, so the output says which code ran.

- ``sweep``: the causalab rows of ``sweep.py`` (its documents and its ``Causalab`` class: compile,
  execute, write, weights loaded once), on the toy weekdays model (16 points x 60 rows) and the
  synthetic llama (8L, d256; 16 points x 40 rows). Each side is one long-lived process that runs a
  contender when asked, so the two alternate run by run (A B, then B A) and see the same load; the
  first run of each contender on each side is an untimed warm-up.
- ``heatmap``: the causalab rows of ``heatmap.py`` (hooks, hooks with ``positions=false``, nnterp),
  each a fresh ``heatmap.worker`` process per side per repeat, the sides alternating per contender,
  on ``--heatmap-rows`` rows (264 points).
- ``noise`` (the second side only): a 24-point x 60-row sweep of the toy weekdays model written with
  ``{"kind": "zero"}``, ``{"kind": "noise", "scale": 1}`` and a swap at the same sites, interleaved
  in one process, with the time spent inside ``runtime.interventions.noise`` (a generator per row).

The documents, rows and checkpoints are written once by this driver and handed to both sides; every
run's metric values are compared across sides. Read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# sweep.py's causalab contenders: engine and options, as sweep.setup builds them.
SWEEP = {
    "causalab hooks": ("hooks", {}),
    "hooks, positions": ("hooks", {"positions": True}),
    "hooks, no positions": ("hooks", {"positions": False}),
    "hooks, no reuse": ("hooks", {"optimize": False, "positions": False}),
    "causalab nnterp": ("nnterp", {}),
    "nnterp, positions": ("nnterp", {"positions": True}),
    "nnterp, no reuse": ("nnterp", {"optimize": False, "positions": False}),
}
REPLY = "REPLY "
HEATMAP = ("causalab hooks", "hooks, no positions", "causalab nnterp")  # heatmap.py's default causalab rows


# ---------------------------------------------------------------- inside a worker (either side)

def code() -> dict:
    """Which causalab this process imported: files and the commit of their tree."""
    import causalab_core
    import causalab_hooks
    import causalab_nnterp

    import torch

    files = {m.__name__: m.__file__ for m in (causalab_core, causalab_hooks, causalab_nnterp)}
    root = Path(causalab_core.__file__).resolve().parent.parent
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    dirty = git("status", "--porcelain", "--", "causalab_core", "plugins")
    return {"files": files, "root": str(root), "commit": git("rev-parse", "HEAD"), "dirty": bool(dirty),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def values_digest(out: Path) -> str:
    """sha256 of every point's metric values (the numbers, not the file layout, which changed between commits)."""
    found = {}
    for f in sorted(out.glob("*/*.json")):
        if f.name == "document.json":
            continue
        found[f"{f.parent.name}/{f.name}"] = json.loads(f.read_text())["values"]
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()[:16]


def sweep_server(spec: dict) -> None:
    """Runs sweep.py's contenders one at a time as the driver asks (a JSON line on stdin each), replying with
    the seconds on a line that starts with ``REPLY`` (libraries may print too)."""
    import sweep

    print(REPLY + json.dumps({"code": code()}), flush=True)
    runs, out = {}, Path(spec["scratch"]) / f"out-{os.getpid()}"
    for line in sys.stdin:
        ask = json.loads(line)
        key = (ask["doc"], ask["contender"])
        if key not in runs:  # loads its own weights on its first run (the driver's untimed warm-up)
            engine, options = SWEEP[ask["contender"]]
            runs[key] = sweep.Causalab(engine, **options)
        t = time.perf_counter()
        runs[key](Path(ask["doc"]), out)
        seconds = time.perf_counter() - t
        print(REPLY + json.dumps({"seconds": seconds, "split": runs[key].split, "digest": values_digest(out)}),
              flush=True)


class Server:
    """A side's sweep server: one long-lived process, so the two sides can alternate run by run."""

    def __init__(self, python: str, scratch: Path):
        self.log = open(scratch / f"server-{len(list(scratch.glob('server-*')))}.log", "w")
        self.process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--sweep-server", json.dumps({"scratch": str(scratch)})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=worker_env(), cwd="/")
        self.code = self.reply()["code"]

    def reply(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        raise SystemExit(f"a sweep server stopped: see {self.log.name}")

    def run(self, doc: str, contender: str) -> dict:
        self.process.stdin.write(json.dumps({"doc": doc, "contender": contender}) + "\n")
        self.process.stdin.flush()
        return self.reply()

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait()
        self.log.close()


def heatmap_worker(spec: dict) -> dict:
    import heatmap

    got = heatmap.worker(spec)
    got["code"] = code()
    return got


def noise_worker(spec: dict) -> dict:
    """zero, noise and swap at the same sites, interleaved; seconds inside ``interventions.noise``."""
    import torch

    import sweep
    from causalab_core.runtime import interventions

    drawn = {"seconds": 0.0, "calls": 0, "rows": 0, "shapes": set()}
    original = interventions.noise

    def timed_noise(seed, rows, shape):
        t = time.perf_counter()
        out = original(seed, rows, shape)
        drawn["seconds"] += time.perf_counter() - t
        drawn["calls"] += 1
        drawn["rows"] += len(rows)
        drawn["shapes"].add(tuple(shape))
        return out

    interventions.noise = timed_noise
    result = {"code": code(), "engines": {}}
    out = Path(spec["scratch"]) / f"out-noise-{os.getpid()}"
    for engine in spec["engines"]:
        runs = {kind: sweep.Causalab(engine) for kind in spec["docs"]}
        times = {kind: [] for kind in runs}
        splits = {kind: [] for kind in runs}
        in_noise = []
        for repeat in range(spec["repeats"] + 1):
            for kind, run in runs.items():
                before = dict(drawn)
                t = time.perf_counter()
                run(Path(spec["docs"][kind]), out)
                if repeat:
                    times[kind].append(time.perf_counter() - t)
                    splits[kind].append(run.split)
                    if kind == "noise":
                        in_noise.append({"seconds": drawn["seconds"] - before["seconds"],
                                         "calls": drawn["calls"] - before["calls"],
                                         "rows": drawn["rows"] - before["rows"]})
        result["engines"][engine] = {"times": times, "splits": splits, "in_noise": in_noise,
                                     "position_reuse": runs["noise"].engine.details.get("position_reuse")}
    # What a generator per row costs: the same draws, one generator per row vs one draw per call.
    shapes = sorted(drawn["shapes"])
    counted = next((e["in_noise"][-1] for e in result["engines"].values() if e["in_noise"][-1]["calls"]), None)
    calls = counted["calls"] if counted else 0
    per_call_rows = round(counted["rows"] / calls) if calls else 0
    if shapes and calls:
        shape = shapes[0]
        rows = list(range(per_call_rows))
        t = time.perf_counter()
        for _ in range(calls):
            original(0, rows, shape)
        per_row = time.perf_counter() - t
        generator = torch.Generator().manual_seed(0)
        t = time.perf_counter()
        for _ in range(calls):
            torch.randn((len(rows), *shape), generator=generator, dtype=torch.float32)
        one = time.perf_counter() - t
        result["draw_alone"] = {"calls": calls, "rows_per_call": per_call_rows, "shape": list(shape),
                                "generator_per_row_s": per_row, "one_draw_per_call_s": one}
    drawn["shapes"] = sorted(drawn["shapes"])
    result["noise_calls_total"] = {k: v for k, v in drawn.items()}
    return result


# ---------------------------------------------------------------- the driver

THREADS: dict[str, str] = {}  # --threads: the workers' OMP_NUM_THREADS


def worker_env(extra: dict | None = None) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1", **THREADS,
           **(extra or {})}
    env.pop("PYTHONPATH", None)  # each side's venv decides which causalab it imports
    return env


def spawn(python: str, mode: str, spec: dict, env: dict | None = None) -> dict:
    argv = [python, str(Path(__file__).resolve()), f"--{mode}-worker", json.dumps(spec)]
    done = subprocess.run(argv, capture_output=True, text=True, env=worker_env(env), cwd="/")
    if done.returncode != 0:
        raise SystemExit(f"{mode} worker of {python} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare(scratch: Path, heatmap_rows: int) -> dict:
    """Documents, rows and checkpoints, written once for both sides."""
    import heatmap
    import sweep
    from causalab_testing import models
    from causalab_testing.data import weekday_rows
    from causalab_toy.models import install

    weekdays = install("weekdays")
    wide = models.build(scratch / "wide", arch="llama", layers=8, width=256, heads=8)
    cases = []
    for name, folder, key, rows in (("toy weekdays (8L, d64): 16 points x 60 rows", weekdays, "causalab-toy/weekdays", 60),
                                    ("synthetic llama (8L, d256): 16 points x 40 rows", wide, str(wide), 40)):
        stem = f"sweep-{len(cases)}"
        (scratch / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(rows, seed=11)))
        layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
        (scratch / f"{stem}.json").write_text(json.dumps(sweep.sweep_doc(key, layers, [-4, -1], scratch / f"{stem}.jsonl")))
        cases.append({"name": name, "doc": str(scratch / f"{stem}.json")})

    folder = heatmap.model_dir()
    data = heatmap.heatmap_rows(heatmap_rows)
    length = heatmap.token_length(folder, data)
    doc = heatmap.write_problem(scratch, folder, data, 12, length, "heatmap")
    heat = {"model_dir": str(folder), "rows": str(scratch / "heatmap.jsonl"), "doc": str(doc),
            "scratch": str(scratch), "layers": 12, "length": length}

    # The noise sweep: every layer x 3 positions of the weekdays model, 60 rows; zero, noise, swap.
    (scratch / "noise.jsonl").write_text("".join(json.dumps(r) + "\n" for r in weekday_rows(60, seed=11)))
    site = {"layer": {"sweep": "layers"}, "site": "block_input", "position": {"sweep": "pos"}}
    common = {"version": "2", "model": {"key": "causalab-toy/weekdays"}, "data": {"path": str(scratch / "noise.jsonl")},
              "metrics": {"iia": {"kind": "iia", "choices": ["base_answer", "cf_answer"], "label": "cf_answer"}},
              "sweep": {"layers": list(range(8)), "pos": [-4, -2, -1]}}
    docs = {}
    for kind, write in (("zero", {"intervention": {"kind": "zero"}}),
                        ("noise", {"intervention": {"kind": "noise", "scale": 1}}),
                        ("swap", {"source": "cf"})):
        doc_ = {**common, "writes": {"w": {"input": "base", **site, **write}}}
        if kind == "swap":
            doc_["reads"] = {"cf": {"input": "counterfactual", **site}}
        (scratch / f"noise-{kind}.json").write_text(json.dumps(doc_))
        docs[kind] = str(scratch / f"noise-{kind}.json")
    return {"cases": cases, "heatmap": heat, "noise": docs}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side", action="append", default=[], help="NAME=PYTHON, twice (first: the baseline)")
    parser.add_argument("--repeats", type=int, default=15, help="Timed runs of each sweep contender per side.")
    parser.add_argument("--heatmap-repeats", type=int, default=6, help="Fresh processes per heatmap contender per side.")
    parser.add_argument("--heatmap-rows", type=int, default=2)
    parser.add_argument("--noise-repeats", type=int, default=9)
    parser.add_argument("--skip", nargs="*", default=[], choices=["sweep", "heatmap", "noise"])
    parser.add_argument("--threads", type=int, help="torch threads in every worker (default: torch's own)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--sweep-server", help=argparse.SUPPRESS)
    for mode in ("heatmap", "noise"):
        parser.add_argument(f"--{mode}-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sweep_server:
        return sweep_server(json.loads(args.sweep_server))
    for mode, fn in (("heatmap", heatmap_worker), ("noise", noise_worker)):
        spec = getattr(args, f"{mode}_worker")
        if spec:
            print(json.dumps(fn(json.loads(spec)), default=str))
            return
    if args.threads:
        THREADS.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    sides = dict(s.split("=", 1) for s in args.side)
    if len(sides) != 2:
        sys.exit("give two sides: --side before=PYTHON --side after=PYTHON")
    names = list(sides)
    a, b = names
    scratch = Path(tempfile.mkdtemp(prefix="before-after-"))
    problem = prepare(scratch, args.heatmap_rows)
    load = lambda: " ".join(Path("/proc/loadavg").read_text().split()[:3])  # noqa: E731
    print(f"started {time.strftime('%Y-%m-%d %H:%M:%S')}, load average {load()}", flush=True)
    codes: dict[str, list[dict]] = {n: [] for n in names}
    report: dict = {"sides": sides, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_at_start": load()}
    if "sweep" not in args.skip:
        servers = {n: Server(sides[n], scratch) for n in names}
        for n in names:
            codes[n].append(servers[n].code)
        runs = {case["name"]: {c: {n: [] for n in names} for c in SWEEP} for case in problem["cases"]}
        for case in problem["cases"]:
            for contender in SWEEP:  # untimed: loads each engine's weights, first-use costs
                for n in names:
                    servers[n].run(case["doc"], contender)
            for repeat in range(args.repeats):
                order = names if repeat % 2 == 0 else names[::-1]  # A B, then B A: neither side always first
                for contender in SWEEP:
                    for n in order:
                        runs[case["name"]][contender][n].append(servers[n].run(case["doc"], contender))
                hooks = runs[case["name"]]["causalab hooks"]
                print(f"  [{repeat + 1}/{args.repeats}] {case['name'].split(':')[0]}: causalab hooks "
                      + "  ".join(f"{n} {hooks[n][-1]['seconds']:.3f} s" for n in names), flush=True)
        for server in servers.values():
            server.stop()
        report["sweep"] = sweep_table(runs, a, b)
    if "heatmap" not in args.skip:
        heat_env = __import__("heatmap").ALLOCATOR
        heat_runs = {n: {c: [] for c in HEATMAP} for n in names}
        for repeat in range(args.heatmap_repeats):
            order = names if repeat % 2 == 0 else names[::-1]
            for contender in HEATMAP:
                for n in order:
                    got = spawn(sides[n], "heatmap", {**problem["heatmap"], "contender": contender}, heat_env)
                    codes[n].append(got.pop("code"))
                    heat_runs[n][contender].append(got)
                    print(f"  [{repeat + 1}/{args.heatmap_repeats}] heatmap {n:<7} {contender:<20} "
                          f"{got['seconds']:7.2f} s", flush=True)
        report["heatmap"] = heatmap_table(heat_runs, a, b, problem["heatmap"])
    if "noise" not in args.skip:
        got = spawn(sides[b], "noise", {"docs": problem["noise"], "engines": ["hooks", "nnterp"],
                                        "repeats": args.noise_repeats, "scratch": str(scratch)})
        codes[b].append(got["code"])
        report["noise"] = noise_table(got, b)
    report.update(finished=time.strftime("%Y-%m-%d %H:%M:%S"), load_at_end=load(),
                  code={n: codes[n][0] if codes[n] else None for n in names},
                  one_code_per_side={n: len({json.dumps(c, sort_keys=True) for c in codes[n]}) == 1 for n in names if codes[n]})
    print(f"\nfinished {report['finished']}, load average {load()}")
    for n in (n for n in names if codes[n]):
        print(f"{n}: {json.dumps(report['code'][n])}  (the same in all {len(codes[n])} {n} processes: "
              f"{report['one_code_per_side'][n]})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)


def sweep_table(runs: dict, a: str, b: str) -> dict:
    """Median seconds per side, their ratio, and the median of the per-repeat ratios (adjacent runs)."""
    table = {}
    for case, contenders in runs.items():
        n = len(contenders["causalab hooks"][a])
        print(f"\n{case}, median of {n} per side")
        print(f"  {'contender':<20} {a + ' s':>9} {b + ' s':>9} {b + '/' + a:>12} {'paired':>7}   "
              f"compile / execute / write ms, {a} | {b}   values")
        table[case] = {}
        for name, sides in contenders.items():
            ta, tb = [r["seconds"] for r in sides[a]], [r["seconds"] for r in sides[b]]
            paired = median([y / x for x, y in zip(ta, tb)])
            same = {r["digest"] for r in sides[a] + sides[b]}
            split = {n: {part: median([r["split"][part] for r in sides[n]]) for part in ("compile", "execute", "write")}
                     for n in (a, b)}
            row = {a: median(ta), b: median(tb), "ratio": median(tb) / median(ta), "paired_ratio": paired,
                   "split": split, "same_values": len(same) == 1, "all_s": {a: ta, b: tb}}
            table[case][name] = row
            parts = " | ".join(" / ".join(f"{1000 * split[n][p]:.0f}" for p in ("compile", "execute", "write"))
                               for n in (a, b))
            print(f"  {name:<20} {row[a]:>9.3f} {row[b]:>9.3f} {row['ratio']:>11.2f}x {paired:>6.2f}x   "
                  f"{parts:<32}   {'same' if row['same_values'] else 'DIFFER'}", flush=True)
    return table


def heatmap_table(runs: dict, a: str, b: str, spec: dict) -> dict:
    table = {}
    n = len(runs[a][HEATMAP[0]])
    print(f"\nsynthetic gpt2 (12L, d768): {spec['layers'] * spec['length']} points x "
          f"{sum(1 for _ in open(spec['rows']))} rows, median of {n} per side")
    print(f"  {'contender':<20} {a + ' s':>9} {b + ' s':>9} {b + '/' + a:>12} {'paired':>7}   "
          f"execute {a} / {b}   max |grid {b} - {a}|")
    for name in HEATMAP:
        ra, rb = runs[a][name], runs[b][name]
        ta, tb = [r["seconds"] for r in ra], [r["seconds"] for r in rb]
        paired = median([y / x for x, y in zip(ta, tb)])
        diff = max(abs(x - y) for ga in (r["grid"] for r in ra) for gb in (r["grid"] for r in rb)
                   for rowa, rowb in zip(ga, gb) for x, y in zip(rowa, rowb))
        row = {a: median(ta), b: median(tb), "ratio": median(tb) / median(ta), "paired_ratio": paired,
               "execute": {a: median([r["split"]["execute"] for r in ra]), b: median([r["split"]["execute"] for r in rb])},
               "grid_max_abs_diff": diff, "position_reuse": {a: ra[0].get("position_reuse"), b: rb[0].get("position_reuse")}}
        table[name] = row
        print(f"  {name:<20} {row[a]:>9.2f} {row[b]:>9.2f} {row['ratio']:>11.2f}x {paired:>6.2f}x   "
              f"{row['execute'][a]:.2f} / {row['execute'][b]:.2f}   {diff:.2e}", flush=True)
    return table


def noise_table(got: dict, side: str) -> dict:
    print(f"\nnoise vs zero ({side}: {got['code']['root']} {got['code']['commit'][:7]}): toy weekdays (8L, d64), "
          "24 points x 60 rows (every layer x positions -4, -2, -1, block_input)")
    print(f"  {'engine':<8} {'zero s':>8} {'noise s':>8} {'swap s':>8} {'noise/zero':>11} {'paired':>7} {'in noise() s':>13} "
          f"{'share':>6}   calls   position reuse")
    table = {"engines": {}, "draw_alone": got.get("draw_alone")}
    for engine, e in got["engines"].items():
        m = {k: median(v) for k, v in e["times"].items()}
        paired = median([n / z for n, z in zip(e["times"]["noise"], e["times"]["zero"])])
        drawn = median([d["seconds"] for d in e["in_noise"]])
        share = median([d["seconds"] / t for d, t in zip(e["in_noise"], e["times"]["noise"])])
        calls = e["in_noise"][0]["calls"] if e["in_noise"] else 0
        table["engines"][engine] = {"median_s": m, "ratio_noise_zero": m["noise"] / m["zero"], "paired_ratio": paired,
                                    "all_s": e["times"], "in_noise_s": drawn,
                                    "share": share, "calls": calls, "rows": e["in_noise"][0]["rows"] if e["in_noise"] else 0,
                                    "position_reuse": e["position_reuse"]}
        reuse = (e["position_reuse"] or {}).get("used")
        print(f"  {engine:<8} {m['zero']:>8.3f} {m['noise']:>8.3f} {m['swap']:>8.3f} {m['noise'] / m['zero']:>10.2f}x "
              f"{paired:>6.2f}x {drawn:>13.4f} {share:>5.1%}   {calls:>5}   {reuse}", flush=True)
    alone = got.get("draw_alone")
    if alone:
        print(f"  the same {alone['calls']} draws of {alone['rows_per_call']} rows x {alone['shape']} alone: "
              f"{alone['generator_per_row_s']:.4f} s with a generator per row, "
              f"{alone['one_draw_per_call_s']:.4f} s as one draw per call", flush=True)
    return table


if __name__ == "__main__":
    main()
