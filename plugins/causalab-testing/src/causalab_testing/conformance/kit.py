"""The kit's own intervention kinds, registered as an extra plugin (never installed), and their document."""

from __future__ import annotations

import types
from typing import ClassVar

import torch
from pydantic import BaseModel, ConfigDict

from causalab_core import hookimpl
from causalab_core.plugins.contracts import Intervention, Recipe



class _ProbeParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tag: str
    at: int


class Probe(Intervention):
    """The kit's instrument: records the site's value where it is written, ``seen[(tag, at)]`` (one tensor per
    call, ``[rows, window, width]``), and writes it back unchanged. What it records is the value after every
    write at a lower site of the run: a probe at block ``L + 1``'s input sees block ``L``'s written output."""

    name = "kit_conformance_probe"
    Params = _ProbeParams
    seen: ClassVar[dict[tuple[str, int], list[torch.Tensor]]] = {}

    def recipe(self, params):
        return Recipe("nothing", "custom")

    def apply(self, x, v, params):
        Probe.seen.setdefault((params.tag, params.at), []).append(x.detach().clone())
        return x


class NormMatchedSwap(Intervention):
    """A custom kind for the engine suite: the source's value rescaled to the site's norm, position by position."""

    name = "kit_norm_matched_swap"

    def recipe(self, params):
        return Recipe("source", "custom")

    def apply(self, x, v, params):
        return v * (x.norm(dim=-1, keepdim=True) / v.norm(dim=-1, keepdim=True))


def plugin_module(name: str, *kinds: type) -> types.ModuleType:
    """A plugin object offering intervention ``kinds``, for ``build_registry(extra=...)``."""
    module = types.ModuleType(name)
    module.DISTRIBUTION = name
    module.causalab_interventions = hookimpl(lambda: list(kinds))
    return module


def kit_registry(*extra):
    """The installed plugins, the kit's kinds (``Probe``, ``NormMatchedSwap``) and ``extra`` plugin objects."""
    from causalab_core.plugins.registry import build_registry

    return build_registry(extra=(plugin_module("causalab_testing_kinds", Probe, NormMatchedSwap), *extra))


def model_width(model_dir) -> int:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_dir, local_files_only=True).hidden_size


def intervention_document(model_key: str) -> dict:
    """One point with a few kinds on ragged weekday rows (``ragged_rows``; a vector file ``steer.safetensors``
    beside it, one tensor of the model's width): a ``noised`` input (the base prompt run again) gets noise at the
    day's tokens in units of the spread of the counterfactual's embeddings there; the base run gets a zero
    ablation, a mean ablation, a difference of means and a vector added, the noised run's MLP output swapped in
    (a read of a written run), the noised run's value at the noise's own site swapped in (read before the noise
    is written there: the base's own value, a swap that changes nothing) and the kit's custom
    ``kit_norm_matched_swap``. Scores both written runs."""
    cf = {"input": "counterfactual"}
    return {
        "version": "2",
        "model": {"key": model_key, "dtype": "float32"},
        "data": {"path": "rows.jsonl"},
        "inputs": ["base", "counterfactual", "noised"],
        "columns": {"noised": "base"},
        "variables": {"counterfactual": {"day": "cf_day"}},
        "reads": {
            "emb": {**cf, "layer": 0, "site": "block_input", "position": {"variable": "day"}},
            "cf_last": {**cf, "layer": 1, "site": "block_output", "position": -1},
            "cf_early": {**cf, "layer": 1, "site": "block_output", "position": -4},
            "cf_attn": {**cf, "layer": 3, "site": "attn_output", "position": -1},
            "noised_mlp": {"input": "noised", "layer": 2, "site": "mlp_output", "position": -1},
            "noised_day": {"input": "noised", "layer": 0, "site": "block_input", "position": {"variable": "day"}},
        },
        "writes": {
            "corrupt": {"input": "noised", "layer": 0, "site": "block_input", "position": {"variable": "day"},
                        "intervention": {"kind": "noise", "scale": 3, "seed": 1, "std_of": "emb"}},
            "ablate": {"input": "base", "layer": 0, "site": "mlp_output", "position": -2,
                       "intervention": {"kind": "zero"}},
            "mean": {"input": "base", "source": "cf_last", "layer": 1, "site": "block_output", "position": -1,
                     "intervention": {"kind": "mean"}},
            "diff": {"input": "base", "source": "cf_last", "layer": 2, "site": "attn_output", "position": -1,
                     "intervention": {"kind": "add", "alpha": 2, "minus": "cf_early"}},
            "steer": {"input": "base", "layer": 1, "site": "mlp_output", "position": -3,
                      "intervention": {"kind": "add", "alpha": 0.5, "vector": "steer.safetensors"}},
            "restore": {"input": "base", "source": "noised_mlp", "layer": 2, "site": "mlp_output", "position": -1},
            "unnoised": {"input": "base", "source": "noised_day", "layer": 0, "site": "block_input",
                         "position": {"variable": "day"}},
            "custom": {"input": "base", "source": "cf_attn", "layer": 3, "site": "attn_output", "position": -1,
                       "intervention": {"kind": "kit_norm_matched_swap"}},
        },
        "metrics": {
            "logit_diff": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer", "input": "base"},
            "p_noised": {"kind": "p_answer", "answer": "base_answer", "input": "noised"},
        },
    }
