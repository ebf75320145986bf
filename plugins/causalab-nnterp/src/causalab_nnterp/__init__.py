"""causalab-nnterp: engine ``nnterp`` (nnsight session + nnterp's standardized module names)."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_nnterp.engine import NnterpEngine


@hookimpl
def causalab_engines():
    return [NnterpEngine]
