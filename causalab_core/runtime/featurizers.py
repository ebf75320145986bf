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
    return cls(cls.Params.model_validate(write.featurizer.params), write.site.width)


def featurizers_for(step, fitted: dict, classes: Mapping[str, type]) -> dict:
    """Each write's featurizer: the one trained earlier in the point, else a fresh one (None for a plain swap)."""
    return {w.name: (fitted.get(w.featurizer.name) if w.featurizer else None) or featurizer_for(w, classes)
            for w in step.writes}
