"""Sweep expansion: the product of the axes, and each point's concrete document."""

from __future__ import annotations

import itertools
import json
from typing import Any

from causalab_core.document.schema import Document


def axis_label(value: Any) -> str:
    """How a sweep value appears in a folder name.

    Integers as themselves; anchored positions compactly (``entity[-1]``,
    ``user[1][-1]``, ``entity@user[1][0]``, ``entity``); other objects as
    their keys and values.
    """
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, dict):
        scope = value.get("scope", value)
        if isinstance(scope, dict) and scope and set(scope) <= {"variable", "segment"}:
            name = "@".join(str(scope[k]) for k in ("variable", "segment") if k in scope)
            if set(value) == {"index", "scope"}:
                return f"{name}[{value['index']}]"
            if set(value) <= {"variable", "segment"}:
                return name
        if set(value) == {"index"}:
            return str(value["index"])
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    for old, new in (('"', ""), ("{", ""), ("}", ""), (":", "="), (",", ";"), ("/", "_")):
        text = text.replace(old, new)
    return text


def points(document: Document) -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    """(folder name, ((axis, value), ...)) for each point, in axis order."""
    if not document.sweep:
        return [("", ())]
    axes = list(document.sweep)
    out = []
    for combo in itertools.product(*(document.sweep[a] for a in axes)):
        values = tuple(zip(axes, combo))
        out.append((",".join(f"{a}={axis_label(v)}" for a, v in values), values))
    return out


def substitute(document: Document, values: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The document as JSON with every ``{"sweep": axis}`` replaced by this point's value."""
    chosen = dict(values)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"sweep"} and node["sweep"] in chosen:
                return chosen[node["sweep"]]
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    data = document.model_dump(mode="json")
    sweep = data.pop("sweep")
    data = {k: (walk(v) if k in ("reads", "writes", "featurizers") else v) for k, v in data.items()}
    data["sweep"] = {} if values else sweep
    return data
