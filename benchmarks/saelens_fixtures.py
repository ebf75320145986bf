"""Write the SAE files causalab's `sae` featurizer is tested against, with SAELens itself.

Run with the environment benchmarks/setup-saelens.sh makes (SAELens 6.54 needs transformer-lens<4, which
clashes with causalab's pins):

    bash benchmarks/setup-saelens.sh
    benchmarks/.venv-saelens/bin/python benchmarks/saelens_fixtures.py plugins/causalab-featurizers/tests/saelens

For each architecture causalab reads (standard, topk, jumprelu) it builds an SAE with SAELens's own classes
and seeded weights (32 wide, as the tiny test Llama's residual stream, 64 features), saves it with
`save_model` (cfg.json, sae_weights.safetensors), and writes `reference.safetensors`: inputs `x` and what
SAELens's `encode` and `decode` give for them. It also writes one SAELens does not read as these
(`gated`), for the refusal. With --check FOLDER... it loads SAE folders causalab's recipe
(`python -m causalab_featurizers.sae_recipe`) wrote with SAELens's `load_from_disk`, and prints how far
SAELens's encoding is from the recipe's formula.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from sae_lens import (
    GatedSAE, GatedSAEConfig, JumpReLUSAE, JumpReLUSAEConfig, SAE, StandardSAE, StandardSAEConfig, TopKSAE,
    TopKSAEConfig,
)

D_IN, D_SAE = 32, 64


def build(architecture: str, seed: int):
    torch.manual_seed(seed)
    common = {"d_in": D_IN, "d_sae": D_SAE, "apply_b_dec_to_input": architecture != "topk"}
    sae = {
        "standard": lambda: StandardSAE(StandardSAEConfig(**common)),
        "topk": lambda: TopKSAE(TopKSAEConfig(k=6, **common)),
        "jumprelu": lambda: JumpReLUSAE(JumpReLUSAEConfig(**common)),
        "gated": lambda: GatedSAE(GatedSAEConfig(**common)),
    }[architecture]()
    sae.cfg.metadata.hook_name = "blocks.1.hook_resid_post"
    with torch.no_grad():
        for name, tensor in sae.named_parameters():  # seeded and not all zero (SAELens zeroes some biases)
            tensor.copy_(torch.randn_like(tensor) * (0.3 if name.startswith("W") else 0.1))
        if architecture == "jumprelu":
            sae.threshold.copy_(torch.rand(D_SAE) * 0.5)
    return sae


def write(out: Path) -> None:
    for seed, architecture in enumerate(("standard", "topk", "jumprelu", "gated")):
        sae = build(architecture, seed)
        sae.save_model(out / architecture)
        x = torch.randn(2, 5, D_IN, generator=torch.Generator().manual_seed(100 + seed))
        with torch.no_grad():
            code = sae.encode(x)
            save_file({"x": x, "code": code.contiguous(), "reconstruction": sae.decode(code).contiguous()},
                      out / architecture / "reference.safetensors")
        print(architecture, "->", out / architecture, "active features per input:",
              round(float((code != 0).float().sum(-1).mean()), 1))


def check(folders: list[Path]) -> None:
    """SAE folders causalab's recipe wrote, loaded by SAELens: its encoding against the recipe's formula."""
    for folder in folders:
        sae = SAE.load_from_disk(str(folder))
        weights = load_file(folder / "sae_weights.safetensors")
        x = torch.randn(16, sae.cfg.d_in, generator=torch.Generator().manual_seed(0)) + weights["b_dec"]
        pre = (x - weights["b_dec"]) @ weights["W_enc"] + weights["b_enc"]
        top = pre.topk(sae.cfg.k, dim=-1)
        code = torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        with torch.no_grad():
            got = sae.encode(x)
        print(folder, type(sae).__name__, f"d_in {sae.cfg.d_in} d_sae {sae.cfg.d_sae} k {sae.cfg.k}",
              "max |SAELens - recipe|:", float((got - code).abs().max()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--check", type=Path, nargs="+", default=[])
    args = parser.parse_args()
    if args.out is not None:
        write(args.out)
    if args.check:
        check(args.check)
    if args.out is None and not args.check:
        sys.exit("give an output folder, or --check FOLDER...")
