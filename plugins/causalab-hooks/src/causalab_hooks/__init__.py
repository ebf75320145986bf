"""causalab-hooks: the engine that runs plans with PyTorch forward hooks, in this process."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_hooks.engine import HooksEngine


@hookimpl
def causalab_engines():
    return [HooksEngine]
