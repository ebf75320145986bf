"""A layer x position interchange sweep, timed side by side: causalab's engines, pyvene, and the floor.

    .venv/bin/python benchmarks/sweep.py [--repeats 3] [--json out.json] [--memory] [--scaling]

The floor is the least work the sweep needs, hand-written in torch: one
counterfactual forward that captures every needed activation, then one patched
forward per sweep point, all rows in one batch. pyvene does the same
interchanges the way its users write them (one IntervenableModel per point).
causalab runs from the document, end to end (compile, execute, write), with
weights already loaded, so every contender pays only for the sweep. Repeats
are interleaved and the table shows medians; read the ratios, not the seconds.

``--memory`` adds each contender's peak memory above its loaded weights: one
run in a fresh process per contender after one untimed run of the same sweep,
resident memory sampled every millisecond (a fresh process, because an
allocator keeps what it freed; glibc's mmap threshold fixed, so what a run
frees goes back to the system).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from causalab_core import api
from causalab_core.compiler import load_shell
from causalab_core.plugins.registry import registry
from causalab_core.results.folder import write_folder
from causalab_core.results.score import output_files, score
from causalab_core.plugins.provenance import run_record
from causalab_testing import models
from causalab_testing.data import weekday_rows

# The same allocator setting for every contender's memory run (why: benchmarks/heatmap.py's ALLOCATOR).
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "65536"}

ROOT = Path(__file__).parent.parent


def sweep_doc(key: str, layers: int, positions: list[int], rows_path: Path) -> dict:
    site = {"layer": {"sweep": "layers"}, "site": "block_input", "position": {"sweep": "pos"}}
    return {
        "version": "2", "model": {"key": key}, "data": {"path": str(rows_path)},
        "reads": {"cf": {"input": "counterfactual", **site}},
        "writes": {"patch": {"input": "base", "source": "cf", **site}},
        "metrics": {"iia": {"kind": "iia", "choices": ["base_answer", "cf_answer"], "label": "cf_answer"}},
        "sweep": {"layers": list(range(layers)), "pos": positions},
    }


class Causalab:
    """End to end from the document through one engine instance (weights loaded once)."""

    def __init__(self, engine: str, **options):
        cls = registry().get("engine", engine)
        self.engine = cls(options=cls.Options(**options))
        self.split = {}

    def __call__(self, doc_path: Path, out: Path) -> int:
        t0 = time.perf_counter()
        plan = api.plan(doc_path)
        t1 = time.perf_counter()
        outputs = self.engine.execute(plan)
        t2 = time.perf_counter()
        record = run_record(registry(), engine=self.engine.name, remote=False, batch_size=None, plan=plan)
        write_folder(out, output_files(plan, score(plan, outputs, registry()), record, outputs), force=True)
        t3 = time.perf_counter()
        self.split = {"compile": t1 - t0, "execute": t2 - t1, "write": t3 - t2}
        return len(plan.points)


def tensors(model_dir: Path, rows: list[dict]):
    tok = load_shell(model_dir).tokenizer
    base = torch.tensor(tok([r["base"] for r in rows])["input_ids"])
    cf = torch.tensor(tok([r["counterfactual"] for r in rows])["input_ids"])
    return base, cf


def floor(model, base, cf, layers: int, positions: list[int]) -> int:
    """One counterfactual forward capturing every block input, then one patched forward per point."""
    blocks = model.get_submodule(load_layers_path(model))
    captured = {}
    handles = [b.register_forward_pre_hook(lambda m, a, i=i: captured.__setitem__(i, a[0].clone()))
               for i, b in enumerate(blocks)]
    with torch.inference_mode():
        model(input_ids=cf, use_cache=False, logits_to_keep=1)
        for h in handles:
            h.remove()
        forwards = 1
        for layer in range(layers):
            for pos in positions:
                def patch(m, a, layer=layer, pos=pos):
                    h = a[0].clone()
                    h[:, pos] = captured[layer][:, pos]
                    return (h, *a[1:])
                handle = blocks[layer].register_forward_pre_hook(patch)
                model(input_ids=base, use_cache=False, logits_to_keep=1).logits[:, -1].float()
                handle.remove()
                forwards += 1
    return forwards


def load_layers_path(model) -> str:
    return "model.layers" if hasattr(model, "model") else "transformer.h"


def pyvene(model, base, cf, layers: int, positions: list[int]) -> int:
    import pyvene as pv

    forwards = 0
    with torch.inference_mode():
        for layer in range(layers):
            config = pv.IntervenableConfig([{"layer": layer, "component": "block_input",
                                             "intervention_type": pv.VanillaIntervention}])
            intervenable = pv.IntervenableModel(config, model)
            for pos in positions:
                where = [[[pos % base.shape[1]]] * base.shape[0]]
                _, out = intervenable({"input_ids": base}, [{"input_ids": cf}], {"sources->base": (where, where)})
                out.logits[:, -1].float()
                forwards += 2
    return forwards


def setup(model_dir: Path, key: str, rows: int, positions: list[int], layers: int | None):
    """The document, its rows as tensors, the loaded model, and every contender."""
    from transformers import AutoModelForCausalLM

    layers = layers or json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    data = weekday_rows(rows, seed=11)
    scratch = Path(tempfile.mkdtemp())
    (scratch / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    doc = scratch / "doc.json"
    doc.write_text(json.dumps(sweep_doc(key, layers, positions, scratch / "rows.jsonl")))
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval().requires_grad_(False)
    base, cf = tensors(model_dir, data)
    contenders = {
        "floor": lambda: floor(model, base, cf, layers, positions),
        "causalab hooks": Causalab("hooks"),
        "hooks, positions": Causalab("hooks", positions=True),
        "hooks, no positions": Causalab("hooks", positions=False),
        "hooks, no reuse": Causalab("hooks", optimize=False, positions=False),
        "causalab nnterp": Causalab("nnterp"),
        "nnterp, positions": Causalab("nnterp", positions=True),
        "nnterp, no reuse": Causalab("nnterp", optimize=False, positions=False),
        "pyvene": lambda: pyvene(model, base, cf, layers, positions),
    }
    return layers, scratch, doc, contenders


def peak_memory(name: str, model_dir: Path, key: str, rows: int, positions: list[int], layers: int | None) -> float:
    """MiB of resident memory above the loaded weights while ``name`` runs the sweep once (this process)."""
    import psutil

    layers, scratch, doc, contenders = setup(model_dir, key, rows, positions, layers)
    run = contenders[name]
    if isinstance(run, Causalab):  # load the engine's own weights before the baseline
        plan = api.plan(doc)
        run.engine.load(plan) if hasattr(run.engine, "load") else run.engine.model(plan)
    once = lambda: run(doc, scratch / "warm-up") if isinstance(run, Causalab) else run()  # noqa: E731
    once()  # first-use costs (imports, lazily built kernels) are not the sweep's: as heatmap.py's warm-up
    process, peak, done = psutil.Process(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.001)

    baseline = process.memory_info().rss
    sampler = threading.Thread(target=sample)
    sampler.start()
    run(doc, scratch / "out") if isinstance(run, Causalab) else run()
    done.set()
    sampler.join()
    return max(0, peak[0] - baseline) / 2**20


def measure_memory(names, model_dir: Path, key: str, rows: int, positions: list[int], layers: int | None) -> dict:
    """Each contender's peak, each in a fresh process."""
    found = {}
    for name in names:
        spec = json.dumps([name, str(model_dir), key, rows, positions, layers])
        done = subprocess.run([sys.executable, __file__, "--peak-of", spec], capture_output=True, text=True,
                              env={**os.environ, **ALLOCATOR})
        found[name] = float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    return found


def bench(label: str, model_dir: Path, key: str, rows: int, positions: list[int], repeats: int,
          layers: int | None = None, only: tuple[str, ...] | None = None, memory: bool = False) -> dict:
    """Time every contender (or ``only`` some) on the first ``layers`` blocks x ``positions``."""
    asked_layers = layers
    layers, scratch, doc, contenders = setup(model_dir, key, rows, positions, layers)
    if only:
        contenders = {name: run for name, run in contenders.items() if name in only}
    # Reuse: one shared counterfactual forward, one clean base forward, one (shortened) forward per point.
    forwards = {name: 2 * len(positions) * layers if "no reuse" in name else 2 + len(positions) * layers
                for name in contenders if name not in ("floor", "pyvene")}
    times = {name: [] for name in contenders}
    splits: dict[str, list[dict]] = {}
    for repeat in range(repeats + 1):  # the first round warms up (loads weights), untimed
        for name, run in contenders.items():
            t = time.perf_counter()
            got = run(doc, scratch / "out") if isinstance(run, Causalab) else run()
            if repeat:
                times[name].append(time.perf_counter() - t)
            forwards.setdefault(name, got)
            if repeat and isinstance(run, Causalab):
                splits.setdefault(name, []).append(run.split)
    medians = {n: statistics.median(t) for n, t in times.items()}
    splits = {n: {part: statistics.median(r[part] for r in runs) for part in runs[0]} for n, runs in splits.items()}
    peaks = measure_memory(contenders, model_dir, key, rows, positions, asked_layers) if memory else {}
    return {"model": label, "points": layers * len(positions), "rows": rows, "median_s": medians,
            "ratio_to_floor": {n: medians[n] / medians["floor"] for n in medians}, "forwards": forwards,
            "split_s": splits, "peak_mib": peaks}


def print_table(results: list[dict]) -> None:
    for r in results:
        print(f"\n{r['model']}: {r['points']} points x {r['rows']} rows", flush=True)
        peaks = r.get("peak_mib") or {}
        memory = f" {'peak MiB':>9}" if peaks else ""
        print(f"  {'contender':<18} {'median s':>9} {'x floor':>8} {'forwards':>9}{memory}   "
              "compile / execute / write (medians; execute x floor)")
        for name, seconds in r["median_s"].items():
            split = r["split_s"].get(name)
            parts = " / ".join(f"{split[k]:.3f}" for k in ("compile", "execute", "write")) if split else ""
            if split:
                parts += f"  ({split['execute'] / r['median_s']['floor']:.2f}x)"
            peak = "" if not peaks else f" {peaks[name]:>9.1f}" if peaks.get(name) is not None else f" {'?':>9}"
            print(f"  {name:<18} {seconds:>9.3f} {r['ratio_to_floor'][name]:>7.2f}x {r['forwards'][name]:>9}{peak}   "
                  f"{parts}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--scaling", action="store_true", help="Also 8, 32 and 128 points x 40 and 400 rows on a 32-layer model.")
    parser.add_argument("--only-scaling", action="store_true", help="Only the scaling runs (implies --scaling).")
    parser.add_argument("--memory", action="store_true", help="Add each contender's peak memory (a fresh process each).")
    parser.add_argument("--scaling-rows", type=int, nargs="+", default=[40, 400], help="Row counts of the scaling runs.")
    parser.add_argument("--peak-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peak_of:
        name, model_dir, key, rows, positions, layers = json.loads(args.peak_of)
        print(peak_memory(name, Path(model_dir), key, rows, positions, layers))
        return
    from causalab_toy.models import install

    weekdays = install("weekdays")
    wide = models.build(Path(tempfile.mkdtemp()) / "wide", arch="llama", layers=8, width=256, heads=8)
    # Weights load once per contender before timing; the first round of repeats is an untimed warm-up.
    results = []

    def report(result: dict) -> None:  # print as each finishes: a scaling run takes many minutes
        results.append(result)
        print_table([result])

    if not args.only_scaling:
        report(bench("toy weekdays (8L, d64)", weekdays, "causalab-toy/weekdays", 60, [-4, -1], args.repeats,
                     memory=args.memory))
        report(bench("synthetic llama (8L, d256)", wide, str(wide), 40, [-4, -1], args.repeats, memory=args.memory))
    if args.scaling or args.only_scaling:
        deep = models.build(Path(tempfile.mkdtemp()) / "deep", arch="llama", layers=32, width=256, heads=8)
        for rows in args.scaling_rows:
            for layers, positions in ((4, [-4, -1]), (16, [-4, -1]), (32, [-7, -6, -4, -1])):
                # pyvene's 400-row runs alone take tens of minutes: floor and hooks only there.
                only = ("floor", "causalab hooks", "pyvene") if rows <= 40 else ("floor", "causalab hooks")
                report(bench("synthetic llama (32L, d256)", deep, str(deep), rows, positions, 1,
                             layers=layers, only=only, memory=args.memory))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
