"""A sparse autoencoder as a featurizer, read from the files SAELens writes.

The files are ``cfg.json`` and ``sae_weights.safetensors``; the standard (ReLU), TopK and JumpReLU
architectures are read.

``featurize(x)`` is the SAE's code ``a = act((x - b_in) W_enc + b_enc)`` (``b_in`` is ``b_dec`` where the
config applies it to the input), or the chosen ``features`` of it; ``inverse`` decodes and adds back what
the SAE does not reconstruct (Marks et al. 2024), as ``x + (decode(a') - decode(a))``: an untouched input comes
back exactly, bit for bit, and a changed feature moves ``x`` by the decoder's change alone. The files are
read on the client when the plan is made (``read_files``) and travel in the plan as tensors; no path does.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from causalab_core.plugins.contracts import Featurizer

ARCHITECTURES = ("standard", "topk", "jumprelu")
REQUIRED = ("architecture", "d_in", "d_sae", "dtype", "apply_b_dec_to_input", "normalize_activations")


class SAEParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str | None = Field(None, description="The folder SAELens saved the SAE in (`cfg.json`, "
                             "`sae_weights.safetensors`), relative to the document's data folder.")
    features: list[int] | None = Field(None, min_length=1, description="The SAE features a write changes (distinct); "
                                       "all of them when omitted.")


class SAE(Featurizer):
    """Encode, intervene on features, decode, with the reconstruction error put back."""

    name = "sae"
    Params = SAEParams
    paths = ("path",)

    @classmethod
    def has_units(cls, params: SAEParams) -> bool:
        return True

    @classmethod
    def read_files(cls, params: SAEParams, width: int) -> dict[str, torch.Tensor]:
        from safetensors.torch import load_file

        folder = Path(params.path)
        try:
            cfg = json.loads((folder / "cfg.json").read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{folder / 'cfg.json'} is not JSON: {exc}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"{folder / 'cfg.json'} holds {type(cfg).__name__}, not SAELens's config object")
        missing = [key for key in REQUIRED if key not in cfg]
        if missing:
            raise ValueError(f"{folder / 'cfg.json'} lacks {', '.join(missing)}")
        if cfg["architecture"] not in ARCHITECTURES:
            raise ValueError(f"architecture {cfg['architecture']!r} is not supported (supported: "
                             f"{', '.join(ARCHITECTURES)})")
        if cfg["normalize_activations"] not in ("none", None):
            raise ValueError(f"normalize_activations {cfg['normalize_activations']!r} is not supported (only 'none')")
        for key, plain in (("reshape_activations", "none"), ("rescale_acts_by_decoder_norm", False)):
            if cfg.get(key, plain) != plain:
                raise ValueError(f"{key} {cfg[key]!r} is not supported (only {plain!r})")
        for key in ("d_in", "d_sae"):
            if not _count(cfg[key]):
                raise ValueError(f"{folder / 'cfg.json'}: {key} {cfg[key]!r} is not a positive integer")
        if not isinstance(cfg["apply_b_dec_to_input"], bool):
            raise ValueError(f"{folder / 'cfg.json'}: apply_b_dec_to_input {cfg['apply_b_dec_to_input']!r} is not "
                             "true or false")
        if cfg["d_in"] != width:
            raise ValueError(f"the SAE reads {cfg['d_in']}-wide activations (d_in), the activations it would see "
                             f"are {width} wide")
        if cfg["architecture"] == "topk" and not (_count(cfg.get("k")) and cfg["k"] <= cfg["d_sae"]):
            raise ValueError(f"{folder / 'cfg.json'}: a topk SAE's k {cfg.get('k')!r} is not an integer from 1 to "
                             f"d_sae ({cfg['d_sae']})")
        try:
            weights = load_file(folder / "sae_weights.safetensors")
        except OSError:
            raise
        except Exception as exc:  # safetensors' own error for a file that is not one
            raise ValueError(f"{folder / 'sae_weights.safetensors'} is not a safetensors file: {exc}") from None
        d_in, d_sae = cfg["d_in"], cfg["d_sae"]
        shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,)}
        if cfg["architecture"] == "jumprelu":
            shapes["threshold"] = (d_sae,)
        for key, shape in shapes.items():
            if key not in weights or tuple(weights[key].shape) != shape:
                found = tuple(weights[key].shape) if key in weights else "nothing"
                raise ValueError(f"sae_weights.safetensors: {key} should be {shape} for d_in {d_in}, d_sae {d_sae}; "
                                 f"it is {found}")
        out = {key: weights[key].float() for key in shapes}
        out["b_in"] = out["b_dec"].clone() if cfg["apply_b_dec_to_input"] else torch.zeros(d_in)
        if cfg["architecture"] == "topk":
            out["k"] = torch.tensor([cfg["k"]])
        bad = [f for f in params.features or () if not 0 <= f < d_sae]
        if bad:
            raise ValueError(f"`features` {bad} are not features of this SAE (0 to {d_sae - 1})")
        if params.features and len(set(params.features)) < len(params.features):
            raise ValueError(f"`features` {params.features} names a feature twice")
        return out

    def __init__(self, params: SAEParams, width: int):
        Featurizer.__init__(self, params, width)  # no zero-argument super(): the class may travel by value
        self.weights: dict[str, torch.Tensor] = {}

    def load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        self.weights = {key: tensor.float() if key != "k" else tensor for key, tensor in tensors.items()}

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        w = {key: t.to(x.device) for key, t in self.weights.items()}
        pre = (x - w["b_in"]) @ w["W_enc"] + w["b_enc"]
        if "k" in w:  # TopK: the k largest pre-activations, through a ReLU; the rest zero
            top = pre.topk(int(w["k"][0]), dim=-1)
            return torch.zeros_like(pre).scatter(-1, top.indices, top.values.relu())
        if "threshold" in w:  # JumpReLU: a unit is on above its threshold
            return pre.relu() * (pre > w["threshold"])
        return pre.relu()

    def decode(self, a: torch.Tensor) -> torch.Tensor:
        return a @ self.weights["W_dec"].to(a.device) + self.weights["b_dec"].to(a.device)

    def featurize(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        x = x.float()
        code = self.encode(x)
        chosen = code if self.params.features is None else code[..., self.params.features]
        return chosen, (x, code, self.decode(code))

    def inverse(self, f: torch.Tensor, err: tuple) -> torch.Tensor:
        x, code, reconstruction = err
        if self.params.features is None:
            changed = f
        else:
            changed = code.clone()
            changed[..., self.params.features] = f
        return x + (self.decode(changed) - reconstruction)

    def state(self) -> dict[str, torch.Tensor]:
        return dict(self.weights)


def _count(value) -> bool:
    """A positive integer, as JSON gives one (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
