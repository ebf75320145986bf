"""A model's computation graph (``ir.graph``) from its config: no weights, no meta model."""

from __future__ import annotations

from causalab_core.compiler.shell import resolve_source
from causalab_core.errors import PlanError, echo, shorten
from causalab_core.ir.graph import Graph, graph
from causalab_core.plugins.registry import Registry


def computation_graph(key: str, revision: str | None, registry: Registry) -> Graph:
    """The graph of the checkpoint a model key names; a family the graph does not cover is one line."""
    from transformers import AutoConfig

    source = resolve_source(key, revision, registry)
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise PlanError(f"$.model.key: {echo(str(source))} is not a checkpoint transformers can read: "
                        f"{shorten(' '.join(str(exc).split()))}") from None
    try:
        return graph(config)
    except ValueError as exc:
        raise PlanError(f"$.model.key: {echo(key)}: {exc}") from None
