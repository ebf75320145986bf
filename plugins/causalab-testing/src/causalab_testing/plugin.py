"""Model keys ``causalab-testing/<name>`` for the tiny test models (loaded where causalab-testing is installed)."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_testing import models

PREFIX = "causalab-testing/"


@hookimpl
def causalab_model_source(key: str, revision: str | None):
    if not key.startswith(PREFIX) or key.removeprefix(PREFIX) not in models.BUILDERS:
        return None
    return models.ensure(key.removeprefix(PREFIX))
