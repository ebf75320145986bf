"""causalab-positions: position resolvers (plain token indices)."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_positions.index import IndexResolver


@hookimpl
def causalab_position_resolvers():
    return [IndexResolver]
