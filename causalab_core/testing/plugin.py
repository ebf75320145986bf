"""Core's default plugin: model keys ``causalab-testing/<name>`` for the tiny test models."""

from __future__ import annotations

from causalab_core.plugins import hookimpl
from causalab_core.testing import models

PREFIX = "causalab-testing/"


@hookimpl
def causalab_model_source(key: str, revision: str | None):
    if not key.startswith(PREFIX) or key.removeprefix(PREFIX) not in models.BUILDERS:
        return None
    return models.ensure(key.removeprefix(PREFIX))
