"""Edge scores and a circuit's faithfulness through TransformerLens 4.x, run by benchmarks/circuits.py --peers.

    benchmarks/.venv-tl/bin/python benchmarks/tl_circuits.py SPEC_FILE

Runs in TransformerLens' own environment (benchmarks/setup-transformerlens.sh) and imports nothing of causalab.
SPEC_FILE (JSON) names the local checkpoint folder, the rows (``clean`` and ``corrupt`` prompts of one token
length, the ``target`` answer and, for a logit difference, the ``other``), the metric (``logit_diff`` or
``logprob`` of the last position) and ``top``. The checkpoint is booted into a ``TransformerBridge`` without
weight processing (the checkpoint's own computation), and, unmodified:

- ``attribution_patch(..., EdgeAttributionConfig(granularity="edge"))`` scores every edge of its per-position
  graph, gradient on the corrupt run (the denoising form); scores are summed over positions into causalab's
  graph (a node's output read by a node's input at every position), named as causalab names them;
- the ``top`` edges by magnitude, taken at every position, are kept and ``faithfulness()`` ablates every other
  edge with the corrupt run's contribution, one row at a time; the share is the rows' mean recovered effect
  over their mean clean-to-corrupt gap (causalab's share of means).

Prints one JSON line: the scores, the circuit, the share, seconds for each part, versions. Nothing reaches the
network (HF offline variables are set before any import).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import json
import sys
import time
from collections import defaultdict

from tl_heatmap import _dist_version  # the script beside it, run by the same venv


def name(node) -> str:
    """causalab's node or receiver name for a TransformerLens graph node."""
    kind = node.kind
    if kind == "embed":
        return "input"
    if kind == "attn_head_out":
        return f"a{node.layer}.h{node.head}"
    if kind in ("q_input", "k_input", "v_input"):
        return f"a{node.layer}.h{node.head}<{kind[0]}>"
    if kind in ("mlp_out", "mlp_in"):
        return f"m{node.layer}"
    return "logits"


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    import torch
    import transformers
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.tools.analysis.attribution_patching import (
        EdgeAttributionConfig,
        attribution_patch,
        faithfulness,
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    started = time.perf_counter()
    folder = spec["model_dir"]
    hf = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    bridge = TransformerBridge.boot_transformers(folder, hf_model=hf, tokenizer=tokenizer)
    bridge.enable_compatibility_mode(disable_warnings=True, no_processing=True)
    bridge.eval()  # parameters keep requires_grad: its gradients flow through them (never into .grad)
    load_s = time.perf_counter() - started

    rows = spec["rows"]

    def ids(text: str) -> torch.Tensor:
        return torch.tensor([tokenizer(text)["input_ids"]])

    def token(text: str) -> int:
        return tokenizer(text, add_special_tokens=False)["input_ids"][0]

    def metric_for(row: dict):
        target = token(row["target"])
        other = token(row["other"]) if spec["metric"] == "logit_diff" else None

        def metric(logits: torch.Tensor) -> torch.Tensor:
            last = logits[0, -1]
            if other is None:
                return torch.log_softmax(last, -1)[target]
            return last[target] - last[other]
        return metric

    started = time.perf_counter()
    totals: dict[str, float] = defaultdict(float)
    graphs = {}  # prompt length -> TransformerLens's edges (per position), as its sweep enumerated them
    for row in rows:
        clean = ids(row["clean"])
        found = attribution_patch(bridge, clean, ids(row["corrupt"]), metric_for(row),
                                  EdgeAttributionConfig(granularity="edge"))
        graphs[clean.shape[1]] = list(found.edge_scores)
        for (writer, reader), score in found.edge_scores.items():
            totals[f"{name(writer)}->{name(reader)}"] += score / len(rows)
    scores_s = time.perf_counter() - started

    circuit = sorted(totals, key=lambda edge: -abs(totals[edge]))[:spec["top"]]
    kept = set(circuit)
    started = time.perf_counter()
    recovered, gaps = [], []
    for row in rows:
        clean, corrupt = ids(row["clean"]), ids(row["corrupt"])
        edges = [(w, r) for w, r in graphs[clean.shape[1]] if f"{name(w)}->{name(r)}" in kept]
        result = faithfulness(bridge, clean, corrupt, metric_for(row), edges)
        gap = result.full_metric - result.corrupt_metric
        recovered.append(result.recovered * gap)
        gaps.append(gap)
    faithfulness_s = time.perf_counter() - started
    print(json.dumps({
        "scores": totals, "circuit": circuit, "share": sum(recovered) / sum(gaps),
        "load_s": load_s, "scores_s": scores_s, "faithfulness_s": faithfulness_s,
        "versions": {"transformer_lens": _dist_version("transformer-lens"), "transformers": transformers.__version__,
                     "torch": torch.__version__, "threads": torch.get_num_threads()},
    }))


if __name__ == "__main__":
    main()
