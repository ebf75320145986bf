"""causalab-positions: position resolvers: token indices, variable anchors, chat turns."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_positions.anchors import ScopedIndexResolver, VariableResolver
from causalab_positions.index import IndexResolver


@hookimpl
def causalab_position_resolvers():
    return [IndexResolver, ScopedIndexResolver, VariableResolver]
