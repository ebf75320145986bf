"""Edge scores and a circuit's faithfulness through auto-circuit 1.0.1, run by benchmarks/circuits.py --peers.

    benchmarks/.venv-ac/bin/python benchmarks/ac_circuits.py SPEC_FILE

Runs in auto-circuit's own environment (benchmarks/setup-autocircuit.sh: TransformerLens 3.9) and imports
nothing of causalab. SPEC_FILE is tl_circuits.py's. The checkpoint is loaded into a ``HookedTransformer`` from
its local folder (TransformerLens's own config and weight conversion) without weight processing, made patchable with every position at once (``seq_len=None``:
causalab's graph) and separate q/k/v inputs, and, unmodified:

- ``mask_gradient_prune_scores(grad_function="logit" or "logprob", mask_val=0)`` is EAP (auto-circuit checks
  it equals its ``edge_attribution_patching_prune_scores``): the gradient on the clean run of each edge's mask,
  which moves the edge's sender from its clean to its corrupt value, of minus the metric; so causalab's
  noising estimate (gradient on the clean run, corrupt patched in) is minus this score;
- with ``integrated_grad_samples=N`` instead: EAP-IG over the masks (every edge at once from clean toward
  corrupt, N + 1 points, summed), divided by N + 1 here to be a mean;
- ``run_circuits(PatchType.TREE_PATCH)`` keeps the ``top`` edges by magnitude and replaces every other edge's
  sender by its corrupt value; the share is the mean recovered effect over the mean clean-to-corrupt gap.

Prints one JSON line: the scores (causalab's sign and names), the circuit, the share, seconds, versions.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import json
import re
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path


def name(node: str) -> str:
    """causalab's name for an auto-circuit node (``A1.2``, ``A1.2.K``, ``MLP 0``, ``Resid Start``/``End``)."""
    if node == "Resid Start":
        return "input"
    if node == "Resid End":
        return "logits"
    if node.startswith("MLP "):
        return f"m{node[4:]}"
    head = re.fullmatch(r"A(\d+)\.(\d+)(?:\.([QKV]))?", node)
    return f"a{head[1]}.h{head[2]}" + (f"<{head[3].lower()}>" if head[3] else "")


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    import torch
    from auto_circuit.data import PromptDataLoader, PromptDataset
    from auto_circuit.prune import run_circuits
    from auto_circuit.prune_algos.mask_gradient import mask_gradient_prune_scores
    from auto_circuit.types import PatchType
    from auto_circuit.utils.graph_utils import patchable_model
    from transformer_lens import HookedTransformer
    from transformer_lens import loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    folder, rows = spec["model_dir"], spec["rows"]
    hf = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    # from_pretrained takes official names only; its loaders take a local folder. TransformerLens 3.9 reads a
    # GPT-2 config's n_ctx, which transformers 5 no longer writes: a copy of the folder's config gains it.
    config = json.loads((Path(folder) / "config.json").read_text())
    config.setdefault("n_ctx", config.get("n_positions", config.get("max_position_embeddings")))
    copy = Path(tempfile.mkdtemp())
    for item in Path(folder).iterdir():
        (copy / item.name).symlink_to(item.resolve())
    (copy / "config.json").unlink()
    (copy / "config.json").write_text(json.dumps(config))
    folder = str(copy)
    cfg = loading.get_pretrained_model_config(folder, fold_ln=False, device="cpu")
    model = HookedTransformer(cfg, tokenizer=tokenizer)
    model.load_and_process_state_dict(loading.get_pretrained_state_dict(folder, cfg, hf_model=hf), fold_ln=False,
                                      center_writing_weights=False, center_unembed=False,
                                      fold_value_biases=False, refactor_factored_attn_matrices=False)
    model.set_use_attn_result(True)  # what auto-circuit's examples set: heads' outputs and q/k/v inputs apart
    model.set_use_split_qkv_input(True)
    if not cfg.attn_only:
        model.set_use_hook_mlp_in(True)
    model.eval()
    model = patchable_model(model, factorized=True, slice_output="last_seq", seq_len=None, separate_qkv=True,
                            device=torch.device("cpu"))

    def ids(text: str) -> torch.Tensor:
        return torch.tensor(tokenizer(text)["input_ids"])

    def token(text: str) -> torch.Tensor:
        return torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"][0]])

    logit_diff = spec["metric"] == "logit_diff"
    dataset = PromptDataset([ids(r["clean"]) for r in rows], [ids(r["corrupt"]) for r in rows],
                            [token(r["target"]) for r in rows],
                            [token(r["other"] if logit_diff else r["target"]) for r in rows])
    loader = PromptDataLoader(dataset, seq_len=None, diverge_idx=0, batch_size=len(rows), shuffle=False)

    def scored(samples: int | None) -> tuple[dict[str, float], float, dict]:
        started = time.perf_counter()
        found = mask_gradient_prune_scores(
            model, loader, None, grad_function="logit" if logit_diff else "logprob",
            answer_function="avg_diff" if logit_diff else "avg_val",
            mask_val=None if samples else 0.0, integrated_grad_samples=samples)
        seconds = time.perf_counter() - started
        points = (samples + 1) if samples else 1
        return {f"{name(e.src.name)}->{name(e.dest.name)}": -float(found[e.dest.module_name][e.patch_idx]) / points
                for e in model.edges}, seconds, found

    eap, eap_s, prune_scores = scored(None)
    eap_ig, eap_ig_s, _ = scored(spec.get("ig_steps", 5))

    def metric(logits: torch.Tensor) -> torch.Tensor:
        """Per row, on last-position logits: the logit difference, or the answer's log-probability."""
        target = torch.tensor([tokenizer(r["target"], add_special_tokens=False)["input_ids"][0] for r in rows])
        if not logit_diff:
            return torch.log_softmax(logits, -1).gather(1, target[:, None])[:, 0]
        other = torch.tensor([tokenizer(r["other"], add_special_tokens=False)["input_ids"][0] for r in rows])
        return logits.gather(1, target[:, None])[:, 0] - logits.gather(1, other[:, None])[:, 0]

    started = time.perf_counter()
    edges = len(model.edges)
    outs = run_circuits(model, loader, [edges, spec["top"], 0], prune_scores, patch_type=PatchType.TREE_PATCH)
    faithfulness_s = time.perf_counter() - started
    (batch,) = list(loader)
    by_kept = {kept: metric(out[batch.key]).mean().item() for kept, out in outs.items()}
    clean, corrupt = by_kept[edges], by_kept[0]
    circuit = sorted(eap, key=lambda e: -abs(eap[e]))[:spec["top"]]
    print(json.dumps({
        "scores": eap, "scores_ig": eap_ig, "ig_samples": spec.get("ig_steps", 5) + 1, "circuit": circuit,
        "share": (by_kept[spec["top"]] - corrupt) / (clean - corrupt),
        "scores_s": eap_s, "scores_ig_s": eap_ig_s, "faithfulness_s": faithfulness_s,
        "versions": {"auto_circuit": version("auto-circuit"), "transformer_lens": version("transformer-lens"),
                     "torch": torch.__version__, "threads": torch.get_num_threads()},
    }))


if __name__ == "__main__":
    main()
