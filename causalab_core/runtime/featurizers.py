"""Featurizer instances for a step's writes, built from the classes the caller hands over (no global registry)."""

from __future__ import annotations

from collections.abc import Mapping

from causalab_core.errors import EngineError


def featurizer_for(write, classes: Mapping[str, type]):
    """The featurizer instance a write goes through (None for a plain swap)."""
    if write.featurizer is None:
        return None
    kind = write.featurizer.kind
    if kind not in classes:
        raise EngineError(f"write {write.name!r} needs featurizer kind {kind!r}, which the engine was not given")
    cls = classes[kind]
    featurizer = cls(cls.Params.model_validate(write.featurizer.params), write.site.width)
    if write.featurizer.state is not None:
        featurizer.load_state(loaded_state(write.featurizer))
    return featurizer


def loaded_state(ref) -> dict:
    """The tensors of a trained featurizer that travelled in the plan, after checking their digest."""
    import hashlib

    from safetensors.torch import load

    if hashlib.sha256(ref.state).hexdigest() != ref.state_digest:
        raise EngineError(f"featurizer {ref.name!r}: its trained state does not match the digest the client recorded")
    return load(ref.state)


def featurizers_for(step, fitted: dict, classes: Mapping[str, type]) -> dict:
    """Each write's featurizer: the one trained earlier in the point, else a fresh one (None for a plain swap);
    and under ``apply/<write>``, the instance of an intervention that combines by its own ``apply``."""
    tools = {w.name: (fitted.get(w.featurizer.name) or untrained(w, classes)) if w.featurizer else None
             for w in step.writes}
    for w in step.writes:
        if w.intervention is not None and w.intervention.combine == "custom":
            tools[applier(w)] = classes[f"intervention/{w.intervention.kind}"]() \
                if f"intervention/{w.intervention.kind}" in classes else None
    return tools


def applier(write) -> str:
    """The key ``featurizers_for`` hands a write's custom intervention under (no write name holds a ``/``)."""
    return f"apply/{write.name}"


def untrained(write, classes: Mapping[str, type]):
    """A featurizer no step trained, built from a fixed seed: one that draws its initial state from
    torch's global generator (a DAS rotation with no ``seed``) is then the same in every engine and run."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return featurizer_for(write, classes)
