"""Edge scores by attribution (EAP) against patching each edge for real, end to end, on a model's whole graph.

    .venv/bin/python benchmarks/circuits.py [--cases ioi gpt2] [--rows 20] [--top 32] [--json out.json]

- ``ioi``: causalab-toy/ioi (GPT-2-style, 4 layers x 8 heads, width 256: 1,519 edges), its held-out rows: every
  edge estimated by EAP (one clean forward and a backward per score for all of them), every edge patched alone,
  and the agreement (Spearman of the effects, overlap of the top edges).
- ``gpt2``: the synthetic GPT-2-small-sized model of ``heatmap.py`` (12 layers x 12 heads, width 768: 32,491
  edges): every edge estimated by EAP, and the ``--top`` edges it ranks first patched for real (``confirm``).

With ``--peers``, each case is also scored by TransformerLens 4.x (``benchmarks/tl_circuits.py`` in the venv
``benchmarks/setup-transformerlens.sh`` makes): ``attribution_patch(granularity="edge")`` and ``faithfulness()`` of
its top edges. TransformerLens takes the gradient on the corrupted run and patches toward the clean one (the
denoising form); causalab's EAP takes it on the run it patches, so the comparison runs causalab's document in
TransformerLens's convention (``direction: denoising``, clean = the base prompt, corrupted = the other) rather
than converting numbers: the same estimate, two implementations. TransformerLens's graph is per position; its
scores are summed over positions into causalab's graph (``tl_circuits.py``). Faithfulness: both keep the top
edges and replace every other edge's sender by its corrupted-run value, share = mean recovered / mean gap.

Prints a table; ``--json FILE`` writes the figures. Timings are wall time on this machine, run side by side in
one process (the peer in a subprocess, its model load and imports not counted).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))


def document(key: str, rows: list[dict], target: str, other: str, **extra) -> dict:
    return {"version": "2", "model": {"key": key}, "data": {"rows": rows},
            "edges": {"each": {"input": "base", "source": "counterfactual", "edges": "each"}},
            "metrics": {"ld": {"kind": "logit_diff", "target": target, "other": other}}, **extra}


def effects(run) -> dict[str, float]:
    """Each edge's effect: its point's mean less the clean mean (estimated), or less ``clean`` (patched)."""
    out = {}
    for s in run.records["summaries"]:
        out[s["edge"]] = s["mean"] - s.get("clean_mean", 0.0)
    return out


def spearman(a: list[float], b: list[float]) -> float:
    from causalab_core.results.confirm import spearman as rho

    return rho(a, b)


def timed(doc: dict) -> tuple[object, float]:
    from causalab_core import api

    started = time.perf_counter()
    run = api.run(doc, progress=None, points_done=lambda done, total: None)
    return run, time.perf_counter() - started


def ioi(rows: int, top: int) -> dict:
    from causalab_toy import circuits

    from causalab_core import api

    data = circuits.rows("ioi", rows, "test", seed=4)
    eap, eap_s = timed(document("causalab-toy/ioi", data, "base_answer", "subject", estimate={"method": "attribution"}))
    real, real_s = timed(document("causalab-toy/ioi", data, "base_answer", "subject"))
    clean = api.run({**document("causalab-toy/ioi", data, "base_answer", "subject"),
                     "edges": {"each": {"input": "base", "source": "counterfactual", "edges": []}}}).summaries
    base = float(clean["mean"].iloc[0])
    estimated, patched = effects(eap), {k: v - base for k, v in effects(real).items()}
    names = list(patched)
    by = lambda d: sorted(names, key=lambda n: -abs(d[n]))[:top]
    return {"case": "ioi", "edges": len(names), "rows": rows, "eap_s": round(eap_s, 1), "patch_all_s": round(real_s, 1),
            "spearman": round(spearman([estimated[n] for n in names], [patched[n] for n in names]), 3),
            f"top{top}_overlap": len(set(by(estimated)) & set(by(patched))) / top}


def gpt2(rows: int, top: int) -> dict:
    import heatmap

    folder = heatmap.model_dir()
    data = heatmap.heatmap_rows(rows)
    doc = document(str(folder), data, "cf_answer", "base_answer",
                   estimate={"method": "attribution", "confirm": {"top": top}})
    run, seconds = timed(doc)
    confirmed = run.run["estimate"]["confirmed"]
    return {"case": "gpt2", "edges": len(run.records["summaries"]), "rows": rows,
            "eap_and_confirm_s": round(seconds, 1), f"top{top}_spearman": confirmed.get("spearman"),
            f"top{top}_same_sign": confirmed.get("same_sign")}


HERE = Path(__file__).parent
PEERS = {  # name -> (its python, its script, causalab's direction in the peer's gradient convention)
    "TransformerLens": (HERE / ".venv-tl" / "bin" / "python", HERE / "tl_circuits.py", "denoising",
                        "bash benchmarks/setup-transformerlens.sh"),
    "auto-circuit": (HERE / ".venv-ac" / "bin" / "python", HERE / "ac_circuits.py", "noising",
                     "bash benchmarks/setup-autocircuit.sh"),
}


def peer_case(case: str, rows: int) -> tuple[str, list[dict], str, dict]:
    """The model folder, rows, corrupted column and metric of a peer comparison."""
    from causalab_toy import circuits, models

    if case == "gpt2":
        import heatmap

        return str(heatmap.model_dir()), heatmap.heatmap_rows(rows), "counterfactual", \
            {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"}
    data = circuits.rows(case, rows, "test", seed=4)
    if case == "induction":
        return str(models.CHECKPOINTS / "induction"), data, "fresh", {"kind": "logprob", "answer": "base_answer"}
    return str(models.CHECKPOINTS / "ioi"), data, "counterfactual", \
        {"kind": "logit_diff", "target": "base_answer", "other": "subject"}


def against(peer: str, case: str, rows: int, top: int) -> dict:
    """causalab's EAP and its top edges' faithfulness against a peer's, causalab run in the peer's convention:
    TransformerLens takes the gradient on the corrupted run (denoising), auto-circuit on the clean one
    (noising)."""
    python, script, direction, _ = PEERS[peer]
    folder, data, corrupted, metric = peer_case(case, rows)
    doc = {"version": "2", "model": {"key": folder}, "data": {"rows": data}, "inputs": ["base", corrupted],
           "direction": {"patch": direction, "clean": "base", "corrupted": corrupted},
           "edges": {"each": {"input": "recipient", "source": "donor", "edges": "each"}},
           "metrics": {"m": metric}, "estimate": {"method": "attribution"},
           "circuit": {"patch": "each", "select": {"top": top}}}
    timed({**doc, "data": {"rows": data[:1]}})  # untimed: the model's load and first passes
    scored, seconds = timed({k: v for k, v in doc.items() if k != "circuit"})
    run, with_circuit = timed(doc)
    ours = effects(scored)
    answer = metric.get("target", metric.get("answer"))
    spec = {"model_dir": folder, "metric": metric["kind"], "top": top, "ig_steps": IG_STEPS - 1, "rows": [
        {"clean": r["base"], "corrupt": r[corrupted], "target": r[answer], "other": r.get(metric.get("other"), "")}
        for r in data]}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(spec, f)
        f.flush()
        done = subprocess.run([str(python), str(script), f.name], capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{peer} ({case}) failed:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    names, theirs = list(ours), found["scores"]
    assert set(names) == set(theirs), f"{peer}'s graph names other edges than causalab's"
    by = lambda d: set(sorted(names, key=lambda n: -abs(d[n]))[:top])  # noqa: E731
    scale = max(abs(v) for v in theirs.values())
    return {"case": f"{case} vs {peer}", "direction": direction, "edges": len(names), "rows": rows,
            "spearman": round(spearman([ours[n] for n in names], [theirs[n] for n in names]), 4),
            "max_diff_over_max_score": float(f"{max(abs(ours[n] - theirs[n]) for n in names) / scale:.1e}"),
            f"top{top}_overlap": len(by(ours) & by(theirs)) / top,
            "causalab_share": round(run.circuit["faithfulness"]["share"], 3), "peer_share": round(found["share"], 3),
            "causalab_scores_s": round(seconds, 1), "causalab_with_curve_s": round(with_circuit, 1),
            "peer_scores_s": round(found["scores_s"], 1), "peer_faithfulness_s": round(found["faithfulness_s"], 1),
            "peer": found["versions"], **(integrated(doc, found, names) if "scores_ig" in found else {})}


IG_STEPS = 5
"""causalab's steps against auto-circuit's ``integrated_grad_samples = IG_STEPS - 1`` (``--ig-steps``): both
average IG_STEPS gradients by the edges' weights along the path, causalab's at k / IG_STEPS (k = 0 ..
IG_STEPS - 1, a left Riemann sum), auto-circuit's at k / (IG_STEPS - 1) (both ends): the same integral on
two grids, which agree as the steps grow (on the induction model: 1.1 of the largest score apart at 5, 0.016
at 64)."""


def integrated(doc: dict, found: dict, names: list[str]) -> dict:
    """causalab's EAP-IG (every edge moved together) beside auto-circuit's (its masks moved together)."""
    run, seconds = timed({**{k: v for k, v in doc.items() if k != "circuit"},
                          "estimate": {"method": "attribution", "steps": IG_STEPS}})
    ours, theirs = effects(run), found["scores_ig"]
    return {"ig_steps": IG_STEPS, "ig_spearman": round(spearman([ours[n] for n in names], [theirs[n] for n in names]), 4),
            "ig_max_diff_over_max_score": float(f"{max(abs(ours[n] - theirs[n]) for n in names) / max(abs(v) for v in theirs.values()):.1e}"),
            "causalab_ig_s": round(seconds, 1), "peer_ig_s": round(found["scores_ig_s"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["ioi", "gpt2"], choices=["ioi", "induction", "gpt2"])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--top", type=int, default=32)
    parser.add_argument("--peers", nargs="*", choices=list(PEERS), help="also these peers (each in its own venv)")
    parser.add_argument("--ig-steps", type=int, default=IG_STEPS, help="integrated gradients' steps against auto-circuit")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    globals()["IG_STEPS"] = args.ig_steps
    peers = list(PEERS) if args.peers == [] else args.peers or []
    for peer in peers:
        if not PEERS[peer][0].exists():
            raise SystemExit(f"--peers {peer} needs its venv: run {PEERS[peer][3]}")
    found = []
    with tempfile.TemporaryDirectory():
        for case in args.cases:
            if case != "induction":
                found.append({"ioi": ioi, "gpt2": gpt2}[case](args.rows, args.top))
                print(json.dumps(found[-1]), flush=True)
            for peer in peers:
                found.append(against(peer, case, args.rows, args.top))
                print(json.dumps(found[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
