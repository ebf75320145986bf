"""causalab-toy: small trained checkpoints (weekday arithmetic, entity binding) as model keys ``causalab-toy/<name>``."""

from __future__ import annotations

import warnings

from causalab_core import PlanError, hookimpl
from causalab_toy import models
from causalab_toy.tasks import entity_split, weekday_split

__all__ = ["entity_split", "weekday_split"]

# The attention-only induction model's MLPs have no units: building one tells torch to initialize tensors of
# zero elements, and torch says so on every load.
warnings.filterwarnings("ignore", message="Initializing zero-element tensors is a no-op")


@hookimpl
def causalab_causal_models():
    from causalab_toy.causal import Entity, Weekdays

    return [Weekdays, Entity]


@hookimpl
def causalab_model_source(key: str, revision: str | None):
    if not key.startswith(models.PREFIX):
        return None
    name = key.removeprefix(models.PREFIX)
    if name not in models.names():
        raise PlanError(f"$.model.key: causalab-toy has no model {name!r}; it has {', '.join(models.names())}")
    actual = models.revision(name)
    if revision is not None and revision != actual:
        raise PlanError(f"$.model.revision: {key} is at revision {actual}, the document pins {revision}")
    return models.install(name)
