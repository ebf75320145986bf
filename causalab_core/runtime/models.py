"""The model a local engine runs: the checkpoint's weights, or its architecture with seeded random weights.

``ModelRef.init_seed`` asks for the random ones: the baseline a finding on trained weights must beat."""

from __future__ import annotations

import torch


def local_model(ref, dtype: torch.dtype, device_map=None):
    """``transformers``' causal LM for ``ref``: ``from_pretrained``, or ``from_config`` under a CPU generator
    seeded by ``init_seed`` (the global one is put back after), so every local engine builds the same weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if ref.init_seed is None:
        return AutoModelForCausalLM.from_pretrained(ref.source, dtype=dtype, device_map=device_map,
                                                    local_files_only=True)
    config = AutoConfig.from_pretrained(ref.source, local_files_only=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ref.init_seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model = model.to(dtype)
    return model if device_map in (None, "cpu") else model.to(device_map)
