"""Featurizer instances for a step's writes, built from the classes the caller hands over (no global registry)."""

from __future__ import annotations

from collections.abc import Mapping

from causalab_core.errors import EngineError


def featurizer_for(write, classes: Mapping[str, type]):
    """The featurizer instance a write goes through (None for a plain swap)."""
    if write.featurizer is None:
        return None
    return built(write.featurizer, write.site.width, write.name, classes)


def built(ref, width: int, where: str, classes: Mapping[str, type]):
    """A featurizer from its plan reference: its class, parameters and any state that travelled with it;
    over another (``ref.over``), the two composed, this one as wide as the other's features."""
    if ref.kind not in classes:
        raise EngineError(f"write {where!r} needs featurizer kind {ref.kind!r}, which the engine was not given")
    inner = built(ref.over, width, where, classes) if ref.over is not None else None
    if inner is not None:
        import torch

        with torch.no_grad():
            width = inner.featurize(torch.zeros(1, width))[0].shape[-1]
    cls = classes[ref.kind]
    featurizer = cls(cls.Params.model_validate(ref.params), width)
    if ref.state is not None:
        featurizer.load_state(loaded_state(ref))
    return featurizer if inner is None else Over(featurizer, inner)


class Over:
    """``outer`` on the features of ``inner`` (a mask over an SAE's features). Training and state are the
    outer one's; the inner one is used as it is."""

    def __init__(self, outer, inner):
        self.outer, self.inner = outer, inner
        self.fits = getattr(outer, "fits", "interchange")

    def featurize(self, x):
        f, err = self.inner.featurize(x)
        g, rest = self.outer.featurize(f)
        return g, (rest, err)

    def inverse(self, g, err):
        rest, inner_err = err
        return self.inner.inverse(self.outer.inverse(g, rest), inner_err)

    def eval(self):
        self.outer.eval()
        return self

    def __getattr__(self, name):  # parameters(), state(), anneal(), penalty(), ...: the outer one's
        if name in ("outer", "inner"):  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.outer, name)


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
