"""Train a TopK sparse autoencoder on a model's residual stream and save it as SAELens does.

    python -m causalab_featurizers.sae_recipe causalab-toy/weekdays --layer 5 --out documents/real/saes/weekdays-5

The activations are the residual stream entering block ``layer`` (causalab's ``block_input``; layer 0 is the
token embeddings) at every position of the prompts a causal model of the registry generates (both inputs of
its rows, the train split). The SAE is SAELens's TopK architecture (``apply_b_dec_to_input``), trained on the
reconstruction's mean squared error with Adam, its decoder rows kept at unit norm, from a seed; it is saved as
SAELens's ``save_model`` writes one (``cfg.json``, ``sae_weights.safetensors``), so SAELens loads it too
(``benchmarks/saelens_fixtures.py --check``), and the `sae` featurizer reads it. ``--steps 5`` is the check CI
runs; the shipped SAEs were trained with the defaults.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from causalab_core.compiler.shell import resolve_source
from causalab_core.document.load import load_rows
from causalab_core.document.schema import DataSpec
from causalab_core.plugins.registry import registry

INTERVENE = {"weekdays": ["count", "day"], "entity": ["line"]}


def activations(key: str, layer: int, causal_model: str, rows: int, seed: int) -> torch.Tensor:
    """``[vectors, width]``: the residual stream entering block ``layer`` at every token of the prompts."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = {"kind": causal_model, "intervene": INTERVENE[causal_model], "rows": rows, "split": "train", "seed": seed}
    data = load_rows(DataSpec.model_validate({"causal_model": spec}), Path("."), "sae_recipe", "$.data", registry())
    prompts = sorted({row[name] for row in data for name in ("base", "counterfactual")})
    folder = resolve_source(key, None, registry())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(prompts), 64):
            batch = tokenizer(prompts[start:start + 64], return_tensors="pt", padding=True)
            states = model(**batch, output_hidden_states=True).hidden_states[layer]
            out.append(states[batch.attention_mask.bool()])
    return torch.cat(out)


def train(x: torch.Tensor, d_sae: int, k: int, steps: int, seed: int, lr: float = 1e-3, batch: int = 256) -> dict:
    """A TopK SAE's weights (SAELens's names), trained on ``x``."""
    generator = torch.Generator().manual_seed(seed)
    d_in = x.shape[1]
    w_dec = torch.randn(d_sae, d_in, generator=generator)
    w_dec /= w_dec.norm(dim=1, keepdim=True)
    weights = {"W_enc": w_dec.T.clone(), "W_dec": w_dec, "b_enc": torch.zeros(d_sae), "b_dec": x.mean(0)}
    params = {name: torch.nn.Parameter(t.clone()) for name, t in weights.items()}
    optimizer = torch.optim.Adam(params.values(), lr=lr)
    for _ in range(steps):
        sample = x[torch.randint(len(x), (batch,), generator=generator)]
        pre = (sample - params["b_dec"]) @ params["W_enc"] + params["b_enc"]
        top = pre.topk(k, dim=-1)
        code = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        loss = ((code @ params["W_dec"] + params["b_dec"] - sample) ** 2).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            params["W_dec"] /= params["W_dec"].norm(dim=1, keepdim=True)
    return {name: p.detach().contiguous() for name, p in params.items()}


def explained(weights: dict, x: torch.Tensor, k: int) -> float:
    """The share of the activations' variance the SAE reconstructs."""
    with torch.no_grad():
        pre = (x - weights["b_dec"]) @ weights["W_enc"] + weights["b_enc"]
        top = pre.topk(k, dim=-1)
        code = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        residual = code @ weights["W_dec"] + weights["b_dec"] - x
    return float(1 - residual.pow(2).sum() / (x - x.mean(0)).pow(2).sum())


def save(weights: dict, out: Path, *, k: int, layer: int, key: str, facts: dict) -> None:
    """As SAELens's ``save_model`` writes a TopK SAE: ``cfg.json`` and ``sae_weights.safetensors``."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    d_sae, d_in = weights["W_dec"].shape
    cfg = {"d_in": d_in, "d_sae": d_sae, "dtype": "float32", "device": "cpu", "apply_b_dec_to_input": True,
           "normalize_activations": "none", "reshape_activations": "none", "k": k,
           "rescale_acts_by_decoder_norm": False, "architecture": "topk",
           "metadata": {"model_name": key, "hook_name": f"blocks.{layer}.hook_resid_pre", "causalab": facts}}
    save_file(weights, out / "sae_weights.safetensors")
    (out / "cfg.json").write_text(json.dumps(cfg, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m causalab_featurizers.sae_recipe", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a model key, e.g. causalab-toy/weekdays")
    parser.add_argument("--layer", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--causal-model", default=None, help="whose prompts (default: the key's last part)")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--d-sae", type=int, default=256)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    causal_model = args.causal_model or args.model.split("/")[-1].split("-")[0]
    x = activations(args.model, args.layer, causal_model, args.rows, args.seed)
    weights = train(x, args.d_sae, args.k, args.steps, args.seed)
    facts = {"vectors": len(x), "steps": args.steps, "seed": args.seed, "rows": args.rows,
             "explained_variance": round(explained(weights, x, args.k), 4)}
    save(weights, args.out, k=args.k, layer=args.layer, key=args.model, facts=facts)
    print(json.dumps({"out": str(args.out), **facts}))


if __name__ == "__main__":
    main()
