"""Edge scores by attribution (EAP) against patching each edge for real, end to end, on a model's whole graph.

    .venv/bin/python benchmarks/circuits.py [--cases ioi gpt2] [--rows 20] [--top 32] [--json out.json]

- ``ioi``: causalab-toy/ioi (GPT-2-style, 4 layers x 8 heads, width 256: 1,519 edges), its held-out rows: every
  edge estimated by EAP (one clean forward and a backward per score for all of them), every edge patched alone,
  and the agreement (Spearman of the effects, overlap of the top edges).
- ``gpt2``: the synthetic GPT-2-small-sized model of ``heatmap.py`` (12 layers x 12 heads, width 768: 32,491
  edges): every edge estimated by EAP, and the ``--top`` edges it ranks first patched for real (``confirm``).

Prints a table; ``--json FILE`` writes the figures. Timings are wall time on this machine, run side by side in
one process; the peers (TransformerLens's ``attribution_patch``, auto-circuit) are the circuits issue's next step.
"""

from __future__ import annotations

import argparse
import json
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
    from causalab_core import api
    from causalab_toy import circuits

    data = circuits.rows("ioi", rows, "test", seed=4)
    eap, eap_s = timed(document("causalab-toy/ioi", data, "base_answer", "subject", estimate={"method": "attribution"}))
    real, real_s = timed(document("causalab-toy/ioi", data, "base_answer", "subject"))
    clean = api.run({**document("causalab-toy/ioi", data, "base_answer", "subject"),
                     "edges": {"each": {"input": "base", "source": "counterfactual", "edges": []}}}).summaries
    base = float(clean["mean"].iloc[0])
    estimated, patched = effects(eap), {k: v - base for k, v in effects(real).items()}
    names = list(patched)
    by = lambda d: sorted(names, key=lambda n: -abs(d[n]))[:top]  # noqa: E731
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["ioi", "gpt2"], choices=["ioi", "gpt2"])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--top", type=int, default=32)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = []
    with tempfile.TemporaryDirectory():
        for case in args.cases:
            found.append({"ioi": ioi, "gpt2": gpt2}[case](args.rows, args.top))
            print(json.dumps(found[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
