"""The activation-patching heatmap users run: every layer x every position of a GPT-2-small-sized model.

    .venv/bin/python benchmarks/heatmap.py [--rows 100] [--repeats 1] [--ndif] [--json out.json]
    .venv/bin/python benchmarks/heatmap.py --only-scaling [--scaling-rows 2 8 32] [--scaling-layers 1 4 12]

The model: a synthetic GPT-2 (12 layers, width 768, 12 heads, 85M parameters,
the byte-level BPE tokenizer of ``causalab_testing.models``), built locally from
a seed and cached under ``$CAUSALAB_HOME/benchmarks``. The rows: "A put the
key in the box and B has the ball. Q: who has the ball? A:" (22 tokens), the
counterfactual naming another holder, scored by the logit difference
(counterfactual answer minus base answer) at the last position. The sweep:
every layer x every position of ``block_input`` (264 points), as a causalab
document compiled and run end to end like the others in ``sweep.py``.

Contenders, each in a fresh process per repeat (weights loaded and an untimed
one-row warm-up before the clock starts; resident memory sampled every
millisecond above that baseline, so time and peak come from the same run;
glibc's mmap threshold fixed for every contender, see ``ALLOCATOR``):

- ``floor``: hand-written torch, one counterfactual forward capturing every
  block input, one patched forward per point, all rows batched;
- ``causalab hooks``, ``causalab nnterp``: the document end to end (compile,
  execute, write the output folder), position reuse as the planner picks it
  (it does here); ``hooks, no positions``: the same with ``positions=false``;
- ``pyvene``: one ``IntervenableModel`` per layer, a call per point;
- ``transformerlens``: ``transformer_lens.patching.get_act_patch_resid_pre`` on
  ``TransformerBridge.boot_transformers`` of the same folder, from its own
  environment (``benchmarks/setup-transformerlens.sh``; ``tl_heatmap.py``);
- ``causalab ndif`` (``--ndif``): the document through the real NDIF test
  server on loopback, client end to end, plus the server-side running time
  read from the model actor's own log and the actor process's peak memory.

Repeats are interleaved (every contender once, then again) and the table
shows medians. Every contender's grid [layer][position] is compared with the
floor's (max abs difference). ``--only-scaling`` times floor and hooks alone at
growing rows and points (one run each) to show how cost grows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
TL_PYTHON = HERE / ".venv-tl/bin/python"
SPEC = {"arch": "gpt2", "layers": 12, "width": 768, "heads": 12, "seed": 0}
PROMPT = "{a} put the key in the box and {b} has the ball. Q: who has the ball? A:"
FILLER = "{c} has the key. "
CONTENDERS = ("floor", "causalab hooks", "hooks, no positions", "causalab nnterp", "pyvene", "transformerlens")
# The causalab contenders: engine and options (none: the planner picks position reuse, as users get it).
ENGINES = {"causalab hooks": ("hooks", {}), "hooks, no positions": ("hooks", {"positions": False}),
           "causalab nnterp": ("nnterp", {}), "causalab ndif": ("ndif", {})}


# ---------------------------------------------------------------- model, rows, document

def model_dir() -> Path:
    """The synthetic GPT-2-small-sized checkpoint, built on first use (atomically) under $CAUSALAB_HOME."""
    from causalab_testing import models

    target = models.cache_root() / "benchmarks" / f"gpt2-12L-d768-{models.builder_digest()}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".gpt2-12L-d768-", dir=target.parent))
    models.build(tmp, **SPEC)
    try:
        tmp.rename(target)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def heatmap_rows(n: int, seed: int = 5, filler: int = 0) -> list[dict]:
    """``n`` rows of one token length: the counterfactual names another holder of the ball.
    ``filler`` prepends that many 5-token sentences to make longer prompts."""
    from causalab_testing.models import NAMES

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, c = rng.sample(NAMES, 3)
        prefix = "".join(FILLER.format(c=rng.choice(NAMES)) for _ in range(filler))
        rows.append({"base": prefix + PROMPT.format(a=a, b=b), "counterfactual": prefix + PROMPT.format(a=a, b=c),
                     "base_answer": " " + b, "cf_answer": " " + c})
    return rows


def token_length(folder: Path, rows: list[dict]) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    lengths = {len(tok(r[k])["input_ids"]) for r in rows for k in ("base", "counterfactual")}
    if len(lengths) != 1:
        raise SystemExit(f"heatmap rows must share one token length; got {sorted(lengths)}")
    for r in rows:
        for k in ("base_answer", "cf_answer"):
            assert len(tok(r[k])["input_ids"]) == 1, r[k]
    return lengths.pop()


def document(key: str, layers: int, positions: list[int], rows_path: Path) -> dict:
    site = {"layer": {"sweep": "layer"}, "site": "block_input", "position": {"sweep": "pos"}}
    return {
        "version": "2", "model": {"key": key, "dtype": "float32"}, "data": {"path": str(rows_path)},
        "reads": {"cf": {"input": "counterfactual", **site}},
        "writes": {"patch": {"input": "base", "source": "cf", **site}},
        "metrics": {"logit_diff": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}},
        "sweep": {"layer": list(range(layers)), "pos": positions},
    }


def write_problem(scratch: Path, folder: Path, rows: list[dict], layers: int, length: int, name: str) -> Path:
    """The rows file and the document (every layer < ``layers`` x every position) in ``scratch``."""
    rows_path = scratch / f"{name}.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = scratch / f"{name}.json"
    doc.write_text(json.dumps(document(str(folder), layers, list(range(-length, 0)), rows_path)))
    return doc


# ---------------------------------------------------------------- contenders (run inside a worker)

def tensors(folder: Path, rows: list[dict]):
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    ids = lambda key: torch.tensor([tok(r[key])["input_ids"] for r in rows])  # noqa: E731
    answer = lambda key: torch.tensor([tok(r[key])["input_ids"][0] for r in rows])  # noqa: E731
    return ids("base"), ids("counterfactual"), answer("cf_answer"), answer("base_answer")


def logit_diff(logits, target, other) -> float:
    last = logits[:, -1].float()
    return (last.gather(1, target[:, None]) - last.gather(1, other[:, None])).mean().item()


def floor(model, problem, layers: int) -> tuple[list[list[float]], int]:
    """One counterfactual forward capturing every block input, then one patched forward per point."""
    import torch

    base, cf, target, other = problem
    blocks = model.transformer.h
    captured = {}
    handles = [b.register_forward_pre_hook(lambda m, a, i=i: captured.__setitem__(i, a[0].clone()))
               for i, b in enumerate(blocks)]
    grid = []
    with torch.inference_mode():
        model(input_ids=cf, use_cache=False, logits_to_keep=1)
        for h in handles:
            h.remove()
        for layer in range(layers):
            grid.append([])
            for pos in range(base.shape[1]):
                def patch(m, a, layer=layer, pos=pos):
                    h = a[0].clone()
                    h[:, pos] = captured[layer][:, pos]
                    return (h, *a[1:])
                handle = blocks[layer].register_forward_pre_hook(patch)
                grid[-1].append(logit_diff(model(input_ids=base, use_cache=False, logits_to_keep=1).logits,
                                           target, other))
                handle.remove()
    return grid, 1 + layers * base.shape[1]


def pyvene(model, problem, layers: int) -> tuple[list[list[float]], int]:
    """As pyvene's users write it: one IntervenableModel per layer, a call per point."""
    import pyvene as pv
    import torch

    base, cf, target, other = problem
    grid, forwards = [], 0
    with torch.inference_mode():
        for layer in range(layers):
            config = pv.IntervenableConfig([{"layer": layer, "component": "block_input",
                                             "intervention_type": pv.VanillaIntervention}])
            intervenable = pv.IntervenableModel(config, model)
            grid.append([])
            for pos in range(base.shape[1]):
                where = [[[pos]] * base.shape[0]]
                _, out = intervenable({"input_ids": base}, [{"input_ids": cf}], {"sources->base": (where, where)})
                grid[-1].append(logit_diff(out.logits, target, other))
                forwards += 2
    return grid, forwards


class Causalab:
    """The document end to end through one engine instance: compile, execute, score, write."""

    def __init__(self, engine: str, options: dict):
        from causalab_core.plugins.registry import registry

        cls = registry().get("engine", engine)
        self.engine = cls(options=cls.Options(**options))
        self.split: dict[str, float] = {}

    def __call__(self, doc: Path, out: Path, layers: int, length: int) -> list[list[float]]:
        from causalab_core import api
        from causalab_core.results.folder import write_folder
        from causalab_core.plugins.registry import registry
        from causalab_core.plugins.provenance import run_record
        from causalab_core.results.score import output_files, score

        t0 = time.perf_counter()
        plan = api.plan(doc)
        t1 = time.perf_counter()
        outputs = self.engine.execute(plan)
        t2 = time.perf_counter()
        results = score(plan, outputs, registry())
        record = run_record(registry(), engine=self.engine.name, remote=self.engine.name == "ndif",
                            batch_size=None, plan=plan)
        write_folder(out, output_files(plan, results, record, outputs), force=True)
        t3 = time.perf_counter()
        self.split = {"compile": t1 - t0, "execute": t2 - t1, "write": t3 - t2}
        grid = [[None] * length for _ in range(layers)]
        for r in results:
            values = [v for v in r.content["values"] if v is not None]
            grid[r.content["point"]["layer"]][r.content["point"]["pos"] + length] = sum(values) / len(values)
        return grid


class Peak:
    """Peak resident memory (of this process, or of ``pid``) above the baseline taken at start, in MiB."""

    def __init__(self, pid: int | None = None):
        import psutil

        self.process = psutil.Process(pid)
        self.peak, self.done = 0, threading.Event()

    def __enter__(self):
        self.baseline = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while not self.done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.mib = max(0, self.peak - self.baseline) / 2**20


def worker(spec: dict) -> dict:
    """One contender, one timed heatmap, in this (fresh) process."""
    import torch

    name, folder, layers, length = spec["contender"], Path(spec["model_dir"]), spec["layers"], spec["length"]
    scratch = Path(spec["scratch"])
    rows = [json.loads(line) for line in Path(spec["rows"]).read_text().splitlines()]
    result: dict = {"contender": name, "threads": torch.get_num_threads()}
    if name in ("floor", "pyvene"):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(folder).eval().requires_grad_(False)
        run = floor if name == "floor" else pyvene
        run(model, tensors(folder, rows[:1]), 1)  # warm-up: first forwards
        problem = tensors(folder, rows)
        with Peak() as peak:
            start = time.perf_counter()
            grid, forwards = run(model, problem, layers)
            result["seconds"] = time.perf_counter() - start
        result.update(grid=grid, forwards=forwards, peak_mib=peak.mib)
        if name == "floor":  # how far two attention kernels of transformers itself already differ on this model
            eager = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
            with torch.inference_mode():
                a = model(input_ids=problem[0], use_cache=False).logits
                b = eager(input_ids=problem[0], use_cache=False).logits
            result["eager_vs_sdpa_logits"] = (a - b).abs().max().item()
            result["logit_scale"] = a.abs().max().item()
        return result
    engine, options = ENGINES[name]
    run = Causalab(engine, options)
    warm = write_problem(scratch, folder, rows[:1], 1, 1, f"warm-{os.getpid()}")
    run(warm, scratch / f"out-warm-{os.getpid()}", 1, 1)  # loads the weights (remote: the server's first request)
    before = completed_jobs(Path(spec["ray_dir"])) if engine == "ndif" else None
    actor = actor_pid(Path(spec["ray_dir"]), spec["model_dir"]) if engine == "ndif" else None
    with Peak(actor) as peak:
        start = time.perf_counter()
        grid = run(Path(spec["doc"]), scratch / f"out-{os.getpid()}", layers, length)
        result["seconds"] = time.perf_counter() - start
    result.update(grid=grid, split=run.split, peak_mib=peak.mib,
                  position_reuse=run.engine.details.get("position_reuse", {}).get("used"))
    if engine == "ndif":
        time.sleep(2)  # the actor's log line follows its response
        jobs = [ms for job, ms in completed_jobs(Path(spec["ray_dir"])).items() if job not in before]
        result.update(server_s=sum(jobs) / 1000, jobs=len(jobs), peak_of="the server's model actor")
    return result


# ---------------------------------------------------------------- the NDIF server's own log

COMPLETED = re.compile(r"request_id=(\w+) .*stage=completed prev_stage=running prev_stage_ms=([\d.]+)")


def completed_jobs(ray_dir: Path) -> dict[str, float]:
    """Every job the model actors report completed: request id -> milliseconds it ran on the server."""
    jobs = {}
    for log in (ray_dir / "session_latest/logs").glob("worker-*.out"):
        for found in COMPLETED.finditer(log.read_text(errors="replace")):
            jobs[found[1]] = float(found[2])
    return jobs


def actor_pid(ray_dir: Path, checkpoint: str) -> int | None:
    """The pid of the model actor that loaded ``checkpoint`` (its log file is named by it)."""
    for log in (ray_dir / "session_latest/logs").glob("worker-*.out"):
        if f'"repo_id": "{checkpoint}"' in log.read_text(errors="replace") and "Loaded" in log.read_text(errors="replace"):
            return int(log.stem.rsplit("-", 1)[1])
    return None


# ---------------------------------------------------------------- the driver

# glibc raises its mmap threshold each time a large mmapped block is freed, after which freed activations
# stay in the heap: resident memory then grows with how a contender happens to order its allocations (up
# to +100 MiB over a 4-row heatmap whose live tensors stay under 7 MiB), not with what it keeps. A fixed
# threshold, the same for every contender, makes the peak follow what each keeps alive.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def spawn(spec: dict, server=None) -> dict:
    """Run one contender in a fresh process; its last stdout line is the result."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1", **ALLOCATOR}
    if spec["contender"] == "transformerlens":
        rows = [json.loads(line) for line in Path(spec["rows"]).read_text().splitlines()]
        argv = [str(TL_PYTHON), str(HERE / "tl_heatmap.py"),
                json.dumps({"model_dir": spec["model_dir"], "rows": rows, "warmup_rows": 1})]
    else:
        argv = [sys.executable, __file__, "--worker", json.dumps(spec)]
    done = server.run(argv, env=env) if server is not None else subprocess.run(
        argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"contender": spec["contender"], "error": (done.stderr or done.stdout)[-1500:]}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["contender"] = spec["contender"]
    return out


def max_diff(a, b) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def bench(rows: int, repeats: int, contenders: list[str], layers: int = 12, ndif: bool = False,
          filler: int = 0, label: str = "") -> dict:
    folder = model_dir()
    scratch = Path(tempfile.mkdtemp(prefix="heatmap-"))
    data = heatmap_rows(rows, filler=filler)
    length = token_length(folder, data)
    doc = write_problem(scratch, folder, data, layers, length, "heatmap")
    spec = {"model_dir": str(folder), "rows": str(scratch / "heatmap.jsonl"), "doc": str(doc),
            "scratch": str(scratch), "layers": layers, "length": length}
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    server = None
    if ndif:
        server = start_server(folder, scratch)
        runs["causalab ndif"] = []
    try:
        for repeat in range(repeats):
            for name in runs:
                target = server if name == "causalab ndif" else None
                extra = {"ray_dir": str(server.ray_dir)} if target is not None else {}
                got = spawn({**spec, **extra, "contender": name}, target)
                runs[name].append(got)
                print(f"  [{repeat + 1}/{repeats}] {name:<18} "
                      + (f"{got['seconds']:8.2f} s  peak {got['peak_mib']:7.1f} MiB"
                         + (f"  server {got['server_s']:.2f} s in {got['jobs']} job(s)" if "server_s" in got else "")
                         if "seconds" in got else f"FAILED: {got['error'][-600:]}"), flush=True)
    finally:
        if server is not None:
            server.stop()
    shutil.rmtree(scratch, ignore_errors=True)
    return summarize(label or f"synthetic gpt2 (12L, d768): {layers * length} points x {rows} rows",
                     layers * length, rows, length, runs)


def summarize(label, points, rows, length, runs) -> dict:
    ok = {n: [r for r in rs if "seconds" in r] for n, rs in runs.items()}
    medians = {n: statistics.median(r["seconds"] for r in rs) for n, rs in ok.items() if rs}
    floor_grid = ok["floor"][0]["grid"] if ok.get("floor") else None
    table = {}
    for name, rs in ok.items():
        if not rs:
            table[name] = {"error": runs[name][-1].get("error")}
            continue
        entry = {"median_s": medians[name], "all_s": [r["seconds"] for r in rs],
                 "peak_mib": statistics.median(r["peak_mib"] for r in rs)}
        if "floor" in medians:
            entry["x_floor"] = medians[name] / medians["floor"]
        if floor_grid is not None:
            entry["grid_max_abs_diff_vs_floor"] = max(max_diff(r["grid"], floor_grid) for r in rs)
        if rs[0].get("split"):
            entry["split_s"] = {k: statistics.median(r["split"][k] for r in rs) for k in rs[0]["split"]}
        if "server_s" in rs[0]:
            entry["server_s"] = statistics.median(r["server_s"] for r in rs)
            entry["jobs"] = rs[0]["jobs"]
        for key in ("forwards", "versions", "threads", "position_reuse"):
            if key in rs[0]:
                entry[key] = rs[0][key]
        table[name] = entry
    grids = {n: rs[0]["grid"] for n, rs in ok.items() if rs}
    agreement = {}
    if "transformerlens" in grids:
        for name in ("causalab hooks", "causalab nnterp", "causalab ndif", "floor"):
            if name in grids:
                agreement[f"transformerlens vs {name}"] = max_diff(grids["transformerlens"], grids[name])
    noise = ok["floor"][0].get("eager_vs_sdpa_logits") if ok.get("floor") else None
    if noise is not None:
        agreement["transformers' eager vs sdpa attention (base logits, no patch)"] = noise
    return {"model": label, "points": points, "rows": rows, "tokens": length, "repeats": max(map(len, runs.values())),
            "contenders": table, "agreement": agreement, "grid_floor": floor_grid}


def print_table(r: dict) -> None:
    print(f"\n{r['model']} ({r['tokens']} tokens a row), median of {r['repeats']}", flush=True)
    print(f"  {'contender':<18} {'median s':>9} {'x floor':>8} {'peak MiB':>9} {'max |grid - floor|':>19}   "
          "compile / execute / write (medians)")
    for name, e in r["contenders"].items():
        if "error" in e:
            print(f"  {name:<18} failed: {str(e['error']).splitlines()[-1][:200]}")
            continue
        split = e.get("split_s")
        parts = " / ".join(f"{split[k]:.2f}" for k in ("compile", "execute", "write")) if split else ""
        if e.get("position_reuse"):
            parts += "  position reuse"
        if "server_s" in e:
            parts += f"   server-side {e['server_s']:.2f} s ({e['jobs']} job(s)), peak is the server actor's"
        ratio = f"{e['x_floor']:>7.2f}x" if "x_floor" in e else f"{'':>8}"
        diff = f"{e['grid_max_abs_diff_vs_floor']:>19.2e}" if "grid_max_abs_diff_vs_floor" in e else f"{'':>19}"
        print(f"  {name:<18} {e['median_s']:>9.2f} {ratio} {e['peak_mib']:>9.1f} {diff}   {parts}", flush=True)
    for pair, diff in r["agreement"].items():
        print(f"  max abs difference, {pair}: {diff:.2e}")


def start_server(folder: Path, scratch: Path):
    """The NDIF test server (as benchmarks/remote.py starts it), also serving the synthetic GPT-2 by its path."""
    from causalab_nnterp import served_key
    from causalab_testing.ndif_server.stack import Deployment, TestServer

    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    server = TestServer(scratch / "ndif-server", extra_env=ALLOCATOR)  # its model actor's peak is measured too
    t = time.perf_counter()
    server.start([Deployment(str(folder), served_key(str(folder), None), size)])
    print(f"  NDIF test server up in {time.perf_counter() - t:.0f} s", flush=True)
    return server


def machine() -> str:
    import platform

    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    load = Path("/proc/loadavg").read_text().split()[:3]
    return (f"nproc {os.cpu_count()}, {cpu}, torch {torch.__version__} with {torch.get_num_threads()} threads, "
            f"load average {' '.join(load)}")


def tree() -> str:
    """The commit measured, and which engine files differ from it (the working tree is shared)."""
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.rstrip()  # noqa: E731
    dirty = git("status", "--porcelain", "--", "causalab_core", "plugins").splitlines()
    return f"commit {git('rev-parse', '--short', 'HEAD')}" + (f", uncommitted: {', '.join(l[3:] for l in dirty)}" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--layers", type=int, default=12, help="Sweep only the first LAYERS blocks (smoke tests).")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    parser.add_argument("--ndif", action="store_true", help="Also the ndif engine on the NDIF test server (~1 min to start).")
    parser.add_argument("--scaling", action="store_true", help="Also floor and hooks at growing rows and points.")
    parser.add_argument("--only-scaling", action="store_true", help="Only the scaling runs.")
    parser.add_argument("--scaling-rows", type=int, nargs="*", default=[10, 30, 100],
                        help="Row counts of the rows scaling (1000 is the issue's; hours on 2 cores).")
    parser.add_argument("--scaling-rows-layers", type=int, default=1,
                        help="Layers swept (x every position of the 22-token rows) in the rows scaling.")
    parser.add_argument("--scaling-layers", type=int, nargs="+", default=[1, 4, 12],
                        help="Layers swept (x every position) in the points scaling: with the default filler, "
                             "87, 348 and 1044 points.")
    parser.add_argument("--scaling-points-rows", type=int, default=1, help="Rows of the points scaling.")
    parser.add_argument("--scaling-filler", type=int, default=13,
                        help="Longer prompts for the points scaling: this many 5-token sentences prepended "
                             "(13: 87-token rows, so 12 layers x every position is 1044 points).")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if "transformerlens" in args.contenders and not args.only_scaling and not TL_PYTHON.exists():
        sys.exit(f"{TL_PYTHON} is missing: run bash benchmarks/setup-transformerlens.sh (or leave out transformerlens)")
    print(f"machine: {machine()}\nsource: {tree()}", flush=True)
    results = []
    if not args.only_scaling:
        results.append(bench(args.rows, args.repeats, args.contenders, layers=args.layers, ndif=args.ndif))
        print_table(results[-1])
    if args.scaling or args.only_scaling:
        both = ["floor", "causalab hooks"]
        for rows in args.scaling_rows:
            results.append(bench(rows, 1, both, layers=args.scaling_rows_layers,
                                 label=f"rows scaling: {args.scaling_rows_layers} layer(s) x every position, {rows} rows"))
            print_table(results[-1])
        for layers in args.scaling_layers:
            results.append(bench(args.scaling_points_rows, 1, both, layers=layers, filler=args.scaling_filler,
                                 label=f"points scaling: {layers} layer(s) x every position, "
                                       f"{args.scaling_points_rows} rows"))
            print_table(results[-1])
        print_slopes(results)
    print(f"machine at the end: {machine()}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "source": tree(), "results": results}, indent=1) + "\n")


def print_slopes(results: list[dict]) -> None:
    """Least-squares seconds per row and per point of each scaling series."""
    for axis, key in (("rows scaling", "rows"), ("points scaling", "points")):
        series = [r for r in results if r["model"].startswith(axis)]
        if len(series) < 2:
            continue
        for name in ("floor", "causalab hooks"):
            xs = [r[key] for r in series if "median_s" in r["contenders"].get(name, {})]
            ys = [r["contenders"][name]["median_s"] for r in series if "median_s" in r["contenders"].get(name, {})]
            ms = [r["contenders"][name]["peak_mib"] for r in series if "median_s" in r["contenders"].get(name, {})]
            if len(xs) < 2:
                continue
            slope, icpt = fit(xs, ys)
            mslope, micpt = fit(xs, ms)
            print(f"  {axis}, {name}: {slope:.4f} s per {key[:-1]} + {icpt:.2f} s;"
                  f" peak {mslope:.3f} MiB per {key[:-1]} + {micpt:.1f} MiB"
                  f"  (at {xs}: {[round(y, 2) for y in ys]} s, {[round(m, 1) for m in ms]} MiB)", flush=True)


def fit(xs, ys):
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return slope, my - slope * mx


if __name__ == "__main__":
    main()
