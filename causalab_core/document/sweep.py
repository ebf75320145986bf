"""Sweep expansion: the product of the axes, and each point's concrete document."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections import Counter
from typing import Any

from causalab_core.document.schema import Document, is_sweep_ref
from causalab_core.errors import PlanError, echo


def _one_edge(value: Any) -> tuple[str, str] | None:
    """The (sender, receiver) of a list holding one edge (a point of ``edges: "each"``), else None."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list) and len(value[0]) == 2 \
            and all(isinstance(n, str) for n in value[0]):
        return value[0][0], value[0][1]
    return None


def _compact(value: Any) -> str | None:
    """The short form of a number, a string, an anchored position or one edge, else None."""
    if isinstance(value, (int, str)):
        return str(value)
    if (edge := _one_edge(value)) is not None:
        return f"{edge[0]}->{edge[1]}"
    if isinstance(value, float):  # Python's shortest round-trip form: 0.5, 1e-05 (a document holds no NaN)
        return repr(value)
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
    return None


def axis_label(value: Any) -> str:
    """How a sweep value is shown in tables and plots.

    Integers as themselves; anchored positions compactly (``entity[-1]``,
    ``user[1][-1]``, ``entity@user[1][0]``, ``entity``); other objects as
    their keys and values.
    """
    compact = _compact(value)
    if compact is not None:
        return compact
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    for old, new in (('"', ""), ("{", ""), ("}", ""), (":", "="), (",", ";"), ("/", "_")):
        text = text.replace(old, new)
    return text


# A label used as is in a folder name: no separators, no leading dot or dash, nothing a shell expands.
_PLAIN = re.compile(r"-?[A-Za-z0-9_][A-Za-z0-9_.+@\[\]-]*")
_LABEL_LIMIT = 40
_NAME_LIMIT = 200


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def _hashed(value: Any) -> str:
    """A readable short form of an odd or long value, and a stable hash that tells values apart."""
    readable = re.sub(r"[^A-Za-z0-9_.+@=-]+", "_", axis_label(value)).strip("._-")[:24]
    return f"{readable}-{_hash(value)}" if readable else _hash(value)


def folder_labels(values: list[Any]) -> list[str]:
    """One axis's values as folder-name parts: safe, and distinct even on a case-blind filesystem."""
    labels = []
    for value in values:
        if (edge := _one_edge(value)) is not None:  # a0.h1->a1.h2<k> as a0.h1+a1.h2.k
            value = f"{edge[0]}+{edge[1].replace('<', '.').rstrip('>')}"
        compact = _compact(value)
        plain = compact is not None and _PLAIN.fullmatch(compact) and len(compact) <= _LABEL_LIMIT
        labels.append(compact if plain else _hashed(value))
    seen = Counter(label.lower() for label in labels)
    return [_hashed(v) if seen[label.lower()] > 1 else label for v, label in zip(values, labels)]


def points(document: Document) -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    """(folder name, ((axis, value), ...)) for each point, in axis order."""
    if not document.sweep:
        return [("", ())]
    axes = list(document.sweep)
    labels = {a: folder_labels(document.sweep[a]) for a in axes}
    out, taken = [], {}
    for combo in itertools.product(*(range(len(document.sweep[a])) for a in axes)):
        values = tuple((a, document.sweep[a][i]) for a, i in zip(axes, combo))
        name = ",".join(f"{a}={labels[a][i]}" for a, i in zip(axes, combo))
        if len(name) > _NAME_LIMIT:
            name = f"{name[:_NAME_LIMIT - 9]}-{_hash(values)}"
        if name.lower() in taken:
            raise PlanError(f"sweep points {echo(taken[name.lower()])} and {echo(dict(values))} "
                            f"would share the folder {echo(name)}")
        taken[name.lower()] = dict(values)
        out.append((name, values))
    return out


def substitute(data: dict[str, Any], values: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The document's JSON (``data``) with every ``{"sweep": axis}`` replaced by this point's value.
    What holds no sweep reference is ``data``'s own, shared by all the points rather than copied a
    thousand times over in a large sweep (only reads, writes, edges and featurizers may hold references)."""
    chosen = dict(values)

    def walk(node: Any) -> Any:
        """``node`` itself where nothing under it is replaced."""
        if isinstance(node, dict):
            if is_sweep_ref(node) and node["sweep"] in chosen:
                return chosen[node["sweep"]]
            new = {k: walk(v) for k, v in node.items()}
            return node if all(new[k] is v for k, v in node.items()) else new
        if isinstance(node, list):
            new = [walk(v) for v in node]
            return node if all(a is b for a, b in zip(new, node)) else new
        return node

    out = {k: (walk(v) if k in ("reads", "writes", "featurizers", "edges") else v) for k, v in data.items() if k != "sweep"}
    out["sweep"] = {} if values else data["sweep"]
    return out
