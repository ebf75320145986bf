"""Attribution patching against full patching: speed, memory and agreement, per model and site, in one run.

    .venv/bin/python benchmarks/attribution.py [--rows 100] [--cases weekdays entity induction ioi gpt2]
        [--steps 1 5 10 20] [--json out.json]

Each case is estimated at each ``--steps`` (integrated gradients; 1 is the plain estimate at the clean run).

Cases (every layer x every position of the site, ``rows`` rows each; the swap of the counterfactual's value,
scored by the logit difference of the counterfactual's answer over the base's):

- ``weekdays`` (the toy model, 8 layers, width 64, 4 heads): block_input, block_output, attn_output,
  mlp_output, and head (every layer x head x position); rows from its causal model (count and day
  changed, held-out split);
- ``entity`` (4 layers): the same four sites and head; rows from its causal model (line and place changed);
- ``induction`` and ``ioi``: the circuits' trained models (causalab-toy; 2 layers x 4 heads, width 64, and 4
  layers x 8 heads, width 256), the same sites; rows from ``causalab_toy.circuits`` (held-out split), the
  counterfactual's tokens swapped in, scored by the base answer's logit over the other's (induction: the
  counterfactual's answer; IOI: the subject);
- ``gpt2``: the synthetic GPT-2-small-sized model of ``heatmap.py`` (12 layers, width 768), block_input:
  the heatmap itself.

Each side is the document end to end (compile, execute on ``hooks``, score, write the output folder) in a
fresh process, the weights loaded and a one-point run done before the clock starts; peak resident memory
is sampled above the baseline taken then (``heatmap.Peak``). Patching and attribution of a case run one
after the other, so their ratio is measured side by side.

Agreement, per case, over the points: the effect of a point is its mean logit difference minus the clean
run's (the attribution file's ``clean_mean``, the same clean run patching starts from); ``spearman`` ranks
the estimated effects against the patched ones; ``top10_recall`` is the share of the 10 points patching
moves most (in size) among the 10 the estimate moves most; ``worst`` names the layer whose points the
estimate misses most (mean absolute error of the effect) and that error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import heatmap  # noqa: E402  (the GPT-2-sized model, its rows and document, the memory sampler)

SITES = ("block_input", "block_output", "attn_output", "mlp_output", "head")
CIRCUITS = {"induction": "cf_answer", "ioi": "subject"}  # the model's study name -> the metric's other answer
TOYS = {
    "weekdays": ("weekdays_layer_sweep.json", ["count", "day"], "label_answer"),
    "entity": ("entity_layer_sweep.json", ["line", "place"], "cf_answer"),
}


# ---------------------------------------------------------------- documents

def toy_document(case: str, site: str, rows: int) -> dict:
    """Every layer x every position (x every head) of ``site`` on a toy model, swapped from the counterfactual."""
    from causalab_core import api

    source, intervene, target = TOYS[case]
    base = json.loads((ROOT / "documents/real" / source).read_text())
    spec = base["data"]["causal_model"]
    doc = {
        "version": "2", "model": base["model"],
        "data": {"causal_model": {"kind": spec["kind"], "intervene": intervene, "rows": rows, "split": "test",
                                  "seed": 0}},
        "reads": {}, "writes": {},
        "metrics": {"ld": {"kind": "logit_diff", "target": target, "other": "base_answer"}},
        "sweep": {"layer": [0]},
    }
    layers, heads = shape(doc)
    at = {"layer": {"sweep": "layer"}, "site": site, "position": {"sweep": "pos"}}
    if site == "head":
        at["head"] = {"sweep": "head"}
    doc["reads"] = {"cf": {"input": "counterfactual", **at}}
    doc["writes"] = {"patch": {"input": "base", "source": "cf", **at}}
    doc["sweep"] = {"layer": list(range(layers)), "pos": list(range(-shortest(doc), 0)),
                    **({"head": list(range(heads))} if site == "head" else {})}
    return doc


def circuit_document(case: str, site: str, rows: int) -> dict:
    """Every layer x every position (x every head) of ``site`` on a circuits model, swapped from the
    counterfactual, scored by the base answer's logit over the other's."""
    from causalab_toy import circuits

    model = json.loads((ROOT / "documents/real" / f"{case}_circuit.json").read_text())["model"]
    doc = {"version": "2", "model": model, "data": {"rows": circuits.rows(case, rows, "test", seed=4)},
           "metrics": {"ld": {"kind": "logit_diff", "target": "base_answer", "other": CIRCUITS[case]}}}
    layers, heads = shape(doc)
    at = {"layer": {"sweep": "layer"}, "site": site, "position": {"sweep": "pos"},
          **({"head": {"sweep": "head"}} if site == "head" else {})}
    doc["reads"] = {"cf": {"input": "counterfactual", **at}}
    doc["writes"] = {"patch": {"input": "base", "source": "cf", **at}}
    doc["sweep"] = {"layer": list(range(layers)), "pos": list(range(-shortest(doc), 0)),
                    **({"head": list(range(heads))} if site == "head" else {})}
    return doc


def shape(doc: dict) -> tuple[int, int]:
    from causalab_core.compiler.shell import load_shell, resolve_source
    from causalab_core.plugins.registry import registry

    shell = load_shell(resolve_source(doc["model"]["key"], doc["model"].get("revision"), registry(), ROOT))
    return shell.config.num_hidden_layers, shell.config.num_attention_heads


def shortest(doc: dict) -> int:
    """The fewest tokens of any row's base or counterfactual prompt: every position counted from the end."""
    from causalab_core import api

    with tempfile.TemporaryDirectory() as scratch:
        probe = {**doc, "reads": {"r": {"input": "base", "layer": 0, "position": -1}}, "writes": {}, "sweep": {},
                 "metrics": {}}
        path = Path(scratch) / "probe.json"
        path.write_text(json.dumps(probe))
        plan = api.plan(path)
    return min(len(p) for name in ("base", "counterfactual") for p in plan.prompts[name])


def cases(rows: int, chosen: list[str], scratch: Path) -> list[tuple[str, str, Path]]:
    """(case, site, patching document) for each case asked for."""
    found = []
    for case in chosen:
        if case == "gpt2":
            folder = heatmap.model_dir()
            data = heatmap.heatmap_rows(rows)
            length = heatmap.token_length(folder, data)
            found.append((case, "block_input", heatmap.write_problem(scratch, folder, data, 12, length, "gpt2")))
            continue
        for site in SITES:
            path = scratch / f"{case}-{site}.json"
            path.write_text(json.dumps((circuit_document if case in CIRCUITS else toy_document)(case, site, rows)))
            found.append((case, site, path))
    return found


def estimated(path: Path, steps: int) -> Path:
    doc = json.loads(path.read_text())
    doc["estimate"] = {"method": "attribution", "steps": steps}
    out = path.with_name(path.stem + f"-attribution-{steps}.json")
    out.write_text(json.dumps(doc))
    return out


# ---------------------------------------------------------------- one side, in a fresh process

def worker(spec: dict) -> dict:
    import torch

    from causalab_core import api
    from causalab_core.results.folder import write_folder
    from causalab_core.plugins.registry import registry
    from causalab_core.plugins.provenance import run_record
    from causalab_core.results.score import output_files, score

    cls = registry().get("engine", "hooks")
    engine = cls(options=cls.Options())
    doc = Path(spec["doc"])
    warm = json.loads(doc.read_text())
    warm["sweep"] = {axis: values[:1] for axis, values in warm["sweep"].items()}
    warm_path = doc.with_name(f"warm-{os.getpid()}.json")
    warm_path.write_text(json.dumps(warm))
    engine.execute(api.plan(warm_path))  # weights loaded, first forwards done
    with heatmap.Peak() as peak:
        start = time.perf_counter()
        plan = api.plan(doc)
        outputs = engine.execute(plan)
        results = score(plan, outputs, registry())
        record = run_record(registry(), engine="hooks", remote=False, batch_size=None, plan=plan)
        write_folder(Path(spec["out"]), output_files(plan, results, record, outputs), force=True)
        seconds = time.perf_counter() - start
    points = {r.point.name: {"values": dict(r.content["point"]), "mean": r.content["summary"]["mean"],
                             "clean_mean": (r.content.get("estimate") or {}).get("clean_mean")} for r in results}
    return {"seconds": seconds, "peak_mib": peak.mib, "points": points, "rows": plan.rows,
            "threads": torch.get_num_threads()}


def spawn(doc: Path, out: Path) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **heatmap.ALLOCATOR}
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps({"doc": str(doc), "out": str(out)})],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{doc.name}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- agreement

def agreement(patched: dict, estimate: dict) -> dict:
    from causalab_core.results.confirm import spearman

    names = [n for n in estimate["points"] if estimate["points"][n]["mean"] is not None]
    clean = {n: estimate["points"][n]["clean_mean"] for n in names}
    est = {n: estimate["points"][n]["mean"] - clean[n] for n in names}
    real = {n: patched["points"][n]["mean"] - clean[n] for n in names}
    top = lambda effects: set(sorted(effects, key=lambda n: -abs(effects[n]))[:10])  # noqa: E731
    errors: dict = {}
    for n in names:
        errors.setdefault(estimate["points"][n]["values"]["layer"], []).append(abs(est[n] - real[n]))
    by_layer = {layer: sum(e) / len(e) for layer, e in errors.items()}
    worst = max(by_layer, key=by_layer.get)
    return {"spearman": spearman([est[n] for n in names], [real[n] for n in names]),
            "top10_recall": len(top(est) & top(real)) / min(10, len(names)),
            "worst_layer": worst, "worst_layer_mae": by_layer[worst],
            "mae": sum(abs(est[n] - real[n]) for n in names) / len(names),
            "effect_scale": sum(abs(real[n]) for n in names) / len(names)}


def _num(value) -> str:
    """A figure, or '-' where there is none (a site whose every effect is zero: an MLP of width 0)."""
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--cases", nargs="+", default=["weekdays", "entity", *CIRCUITS, "gpt2"],
                        choices=[*TOYS, *CIRCUITS, "gpt2"])
    parser.add_argument("--steps", nargs="+", type=int, default=[1, 5, 10, 20])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--worker")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    import torch

    print(f"hooks engine, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, {args.rows} rows")
    print(f"{'model':<9} {'site':<13} {'steps':>5} {'points':>6} {'patching s':>10} {'attrib. s':>9} {'speedup':>8} "
          f"{'peak MiB p/a':>13} {'spearman':>8} {'top10':>6} {'mae/|effect|':>13} {'worst layer':>12}")
    table = []
    with tempfile.TemporaryDirectory() as scratch:
        for case, site, doc in cases(args.rows, args.cases, Path(scratch)):
            patched = spawn(doc, Path(scratch) / f"{doc.stem}-out")
            for steps in args.steps:
                estimate = spawn(estimated(doc, steps), Path(scratch) / f"{doc.stem}-attribution-{steps}-out")
                row = {"model": case, "site": site, "steps": steps, "points": len(patched["points"]),
                       "rows": patched["rows"], "patching_s": patched["seconds"], "attribution_s": estimate["seconds"],
                       "speedup": patched["seconds"] / estimate["seconds"],
                       "patching_peak_mib": patched["peak_mib"], "attribution_peak_mib": estimate["peak_mib"],
                       **agreement(patched, estimate)}
                table.append(row)
                print(f"{case:<9} {site:<13} {steps:>5} {row['points']:>6} {row['patching_s']:>10.2f} "
                      f"{row['attribution_s']:>9.2f} {row['speedup']:>7.1f}x "
                      f"{row['patching_peak_mib']:>6.0f}/{row['attribution_peak_mib']:<6.0f} "
                      f"{_num(row['spearman']):>8} {row['top10_recall']:>6.1f} "
                      f"{row['mae'] / max(row['effect_scale'], 1e-9):>13.2f} "
                      f"{row['worst_layer']:>5} ({row['worst_layer_mae']:.2f})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
