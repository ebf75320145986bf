"""A write's intervention, checked against the installed plugins and the document (no model needed)."""

from __future__ import annotations

from typing import Any

from causalab_core.plugins import returns
from causalab_core.plugins.contracts import Intervention, Recipe
from causalab_core.errors import DocumentError, PluginError, clip, echo

# What each need reads from the write's `source`.
WITH_SOURCE = frozenset({"source", "resample", "mean"})


def recipe_for(cls: type, params: Any, where: str, who: str) -> Recipe:
    """The kind's recipe for validated ``params``: a contradiction between parameters is one DocumentError at
    the write's ``intervention``; a recipe outside the contract is the plugin's (``who``: its kind and
    distribution)."""
    try:
        recipe = returns.recipe(cls().recipe(params), who)
    except ValueError as exc:
        raise DocumentError(f"{where}: {clip(str(exc))}") from None
    if recipe.combine == "custom" and cls.apply is Intervention.apply:
        raise PluginError(f"{who}: its recipe combines `custom`, and the class has no `apply`")
    return recipe


def check_source(document: Any, name: str, write: Any, recipe: Recipe | None, kind: str) -> None:
    """The reads an intervention takes exist, on another input than the one written, and a kind that reads
    no source is given none (it would be silently unused)."""
    where = f"$.writes.{name}"
    needs = "source" if recipe is None else recipe.needs
    said = "a write without an intervention (a swap)" if recipe is None else f"intervention {echo(kind)}"
    if needs in WITH_SOURCE and write.source is None:
        raise DocumentError(f"{where}.source: {said} takes its value from a read: name one under $.reads")
    if needs not in WITH_SOURCE and write.source is not None:
        raise DocumentError(f"{where}.source: intervention {echo(kind)} reads no source; remove `source`")
    for key, read in (("source", write.source), ("intervention.minus", recipe and recipe.minus),
                      ("intervention.std_of", recipe and recipe.std_of)):
        if read is None:
            continue
        if read not in document.reads:
            raise DocumentError(f"{where}.{key}: no read named {echo(read)}")
        if document.reads[read].input == write.input:
            raise DocumentError(f"{where}.{key}: read {echo(read)} is taken from {echo(write.input)}, the input "
                                "this write changes")


def check_interventions(document: Any, registry: Any, variants, check_params) -> None:
    """Every write's intervention: an installed kind, valid parameters at every sweep point (``variants``
    and ``check_params`` are ``document.check``'s), a recipe that holds together, its reads present."""
    for name, write in document.writes.items():
        if write.intervention is None:
            check_source(document, name, write, None, "swap")
            continue
        where = f"$.writes.{name}.intervention"
        cls = registry.get("intervention", write.intervention.kind, f"{where}.kind")
        for values, swept in variants(document, write.intervention):
            params = check_params(cls, values, where, {"kind"}, swept)
            recipe = recipe_for(cls, params, where, registry.who("intervention", write.intervention.kind))
            check_source(document, name, write, recipe, write.intervention.kind)
