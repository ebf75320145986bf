"""Weekday-arithmetic rows for tests and examples: base/counterfactual pairs with answers."""

from __future__ import annotations

import random

from causalab_testing.models import COUNTS, DAYS

PROMPT = "Q: what day is {} days after {}? A:"


def weekday_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` rows differing only in the start day; answers carry the leading space."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randrange(len(COUNTS))
        day, cf_day = rng.sample(range(7), 2)
        out.append({
            "base": PROMPT.format(COUNTS[k], DAYS[day]),
            "counterfactual": PROMPT.format(COUNTS[k], DAYS[cf_day]),
            "base_answer": " " + DAYS[(day + k + 1) % 7],
            "cf_answer": " " + DAYS[(cf_day + k + 1) % 7],
            "day": DAYS[day],
            "cf_day": DAYS[cf_day],
            "count": COUNTS[k],
        })
    return out


def sweep_document(key: str, layers=(0, 1, 2, 3), positions=(-4, -1), data: dict | None = None) -> dict:
    """A complete interchange document: swap block outputs, score iia, logit_diff, p_answer."""
    site = {"layer": {"sweep": "layers"}, "site": "block_output", "position": {"sweep": "pos"}}
    return {
        "version": "2",
        "model": {"key": key, "dtype": "float32"},
        "data": data or {"path": "rows.jsonl"},
        "reads": {"cf_resid": {"input": "counterfactual", **site}},
        "writes": {"patch": {"input": "base", "source": "cf_resid", **site}},
        "metrics": {
            "iia": {"kind": "iia", "choices": ["base_answer", "cf_answer"], "label": "cf_answer"},
            "logit_diff": {"kind": "logit_diff", "target": "cf_answer", "other": "base_answer"},
            "p_answer": {"kind": "p_answer", "answer": "cf_answer"},
        },
        "sweep": {"layers": list(layers), "pos": list(positions)},
    }


def site_sweep_document(model_key: str, site: str) -> dict:
    """Layers 0, 1, 3 x positions 0, -4, -2, -1 at one site (head 1 for ``head``); at ``block_input`` also
    an MLP-output write at block 2, so a point writes at two blocks."""
    doc = sweep_document(model_key, layers=[0, 1, 3], positions=[0, -4, -2, -1])
    for spec in (doc["reads"]["cf_resid"], doc["writes"]["patch"]):
        spec["site"] = site
        if site == "head":
            spec["head"] = 1
    if site == "block_input":
        doc["reads"]["cf_mlp"] = {**doc["reads"]["cf_resid"], "site": "mlp_output", "layer": 2}
        doc["writes"]["patch_mlp"] = {**doc["writes"]["patch"], "source": "cf_mlp", "site": "mlp_output", "layer": 2}
    return doc
