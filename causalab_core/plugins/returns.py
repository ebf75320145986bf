"""What plugin code returns, held to its contract where core receives it.

A malformed answer is one `PluginError` line naming the component (or hook) and its distribution, never a
traceback from core and never the user's document.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from causalab_core.errors import PluginError, echo
from causalab_core.plugins.contracts import COMBINES, NEEDS, RUNS, VIEWS, Recipe, Resolved


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _optional_name(value: Any) -> bool:
    return value is None or isinstance(value, str) and bool(value)


def recipe(value: Any, who: str) -> Recipe:
    """``Intervention.recipe``'s answer: a ``Recipe`` of a known need and combination, with fields of their types."""
    if not isinstance(value, Recipe):
        raise PluginError(f"{who}: recipe returned {echo(value)}, not a contracts.Recipe")
    if value.needs not in NEEDS or value.combine not in COMBINES:
        raise PluginError(f"{who}: recipe returned needs={echo(value.needs)}, combine={echo(value.combine)}; "
                          f"needs is one of {', '.join(NEEDS)} and combine one of {', '.join(COMBINES)}")
    problems = [
        f"alpha={echo(value.alpha)} (a finite number)" * (not _is_number(value.alpha)),
        f"seed={echo(value.seed)} (an int or None)" * (not (value.seed is None or isinstance(value.seed, int)
                                                          and not isinstance(value.seed, bool))),
        *(f"{key}={echo(getattr(value, key))} (a name or None)" for key in ("minus", "tensor", "std_of")
          if not _optional_name(getattr(value, key))),
    ]
    problems = [p for p in problems if p]
    if problems:
        raise PluginError(f"{who}: recipe returned a Recipe with {problems[0]}")
    if value.needs == "tensor" and value.tensor is None:
        raise PluginError(f"{who}: recipe needs a tensor and names no file (Recipe.tensor)")
    return value


def resolved(value: Any, who: str, length: int) -> Resolved:
    """``PositionResolver.resolve``'s answer for a prompt of ``length`` tokens: a ``Resolved`` of distinct
    token indices in range, or no positions and a reason."""
    if not isinstance(value, Resolved):
        raise PluginError(f"{who}: resolve returned {echo(value)}, not a contracts.Resolved")
    positions = value.positions
    if not isinstance(positions, tuple) or not all(isinstance(p, int) and not isinstance(p, bool) for p in positions):
        raise PluginError(f"{who}: resolve returned positions {echo(positions)}, not a tuple of token indices")
    if any(not 0 <= p < length for p in positions) or len(set(positions)) != len(positions):
        raise PluginError(f"{who}: resolve returned positions {echo(positions)} for a prompt of {length} tokens "
                          "(each index once, from 0)")
    if not positions and not (isinstance(value.reason, str) and value.reason):
        raise PluginError(f"{who}: resolve returned no positions and no reason")
    return value


def needs(value: Any, who: str) -> dict[str, tuple[str, ...]]:
    """``Metric.needs``' answer: a mapping of runs (``RUNS``) to views (``VIEWS``)."""
    if not isinstance(value, Mapping):
        raise PluginError(f"{who}: needs returned {echo(value)}, not a mapping of runs to views")
    found = {}
    for role, views in value.items():
        if role not in RUNS:
            raise PluginError(f"{who}: needs names the run {echo(role)}; runs are {', '.join(RUNS)}")
        if isinstance(views, str) or not isinstance(views, (tuple, list)):
            raise PluginError(f"{who}: needs gives the run {role!r} {echo(views)}, not a tuple of views")
        bad = [v for v in views if v not in VIEWS]
        if bad:
            raise PluginError(f"{who}: needs asks for the view {echo(bad[0])}; views are {', '.join(VIEWS)}")
        found[role] = tuple(views)
    return found


def linear(value: Any, who: str, columns: tuple[str, ...]) -> Mapping[str, float] | None:
    """``Metric.linear``'s answer: None, or finite coefficients of its own columns and ``logsumexp``."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not value:
        raise PluginError(f"{who}: linear returned {echo(value)}, not None or a mapping of columns to coefficients")
    for key, coefficient in value.items():
        if key not in (*columns, "logsumexp"):
            raise PluginError(f"{who}: linear names {echo(key)}, which is neither one of its columns "
                              f"({', '.join(columns)}) nor 'logsumexp'")
        if not _is_number(coefficient):
            raise PluginError(f"{who}: linear gives {key!r} the coefficient {echo(coefficient)}, not a finite number")
    return value


def model_source(value: Any, who: str, key: str) -> str | os.PathLike | None:
    """``causalab_model_source``'s answer: a checkpoint folder's path, or None for a key it does not know."""
    if value is None or isinstance(value, (str, os.PathLike)) and str(value):
        return value
    raise PluginError(f"{who}: causalab_model_source returned {echo(value)} for the key {echo(key)}, not a path "
                      "or None")


def provenance(value: Any, who: str) -> dict[str, Any] | None:
    """``causalab_provenance``'s answer: None, or a dict of JSON-plain entries for run.json."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise PluginError(f"{who}: causalab_provenance returned {echo(value)}, not a dict of run.json entries")
    return value


def chunk_runner(value: Any, who: str) -> Any:
    """``causalab_chunk_runner``'s answer: None, or an object with ``chunk_size``, ``start``, ``run`` and ``close``."""
    missing = [m for m in ("chunk_size", "start", "run", "close") if not callable(getattr(value, m, None))]
    if value is not None and missing:
        raise PluginError(f"{who}: causalab_chunk_runner returned {echo(value)}, which has no {missing[0]}()")
    return value


def outputs(value: Any, who: str, paths: list[str]) -> dict[str, dict[str, Any]]:
    """``Engine.execute``'s answer: ``{step path: {name: tensor}}`` for every step of the plan."""
    import torch

    if not isinstance(value, Mapping):
        raise PluginError(f"{who}: execute returned {echo(value)}, not a mapping of step paths to results")
    for path in paths:
        step = value.get(path)
        if not isinstance(step, Mapping):
            raise PluginError(f"{who}: execute returned no results for the step {echo(path)}"
                              if step is None else f"{who}: execute returned {echo(step)} for the step {echo(path)}")
        bad = next((k for k, t in step.items() if not isinstance(t, torch.Tensor)), None)
        if bad is not None:
            raise PluginError(f"{who}: execute returned {echo(step[bad])} as {bad!r} of the step {echo(path)}, "
                              "not a tensor")
    return dict(value)


def values_problem(values: Any, eligible: Sequence[bool]) -> str | None:
    """What breaks the contract in a metric's ``compute`` result for these rows, or None: a ``MetricValues``
    with one float (or None) per row, None where a row is not eligible, and a summary of plain numbers, each
    finite or NaN (or None)."""

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    rows, summary = getattr(values, "rows", None), getattr(values, "summary", None)
    if not isinstance(rows, (list, tuple)) or not isinstance(summary, dict):
        return f"compute returned {echo(values)}, not a MetricValues(rows, summary)"
    if len(rows) != len(eligible):
        return f"compute returned {len(rows)} row values for {len(eligible)} rows"
    for i, (v, ok) in enumerate(zip(rows, eligible)):
        if v is not None and not number(v):
            return f"compute returned {echo(v)} for row {i}, not a float or None"
        if v is not None and not ok:
            return f"compute returned {v!r} for row {i}, which is not eligible (its value must be None)"
    for k, v in summary.items():
        if not isinstance(k, str) or not (v is None or number(v)):
            return f"compute returned the summary entry {echo(k)}: {echo(v)}, not a name and a number or None"
        if isinstance(v, float) and math.isinf(v):
            return f"compute returned the summary entry {echo(k)}: {v!r}, not a finite number or NaN"
    return None
