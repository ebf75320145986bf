"""``causalab plot``: one PNG per metric of a finished sweep, the summary mean at each point.

What is drawn is read through ``causalab_core.load``: only files the run's manifest lists, each checked
against it, so a metric file changed since the run is refused, never drawn."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

from causalab_core.document.sweep import axis_label
from causalab_core.errors import OutputError, echo, shorten
from causalab_core.results.added import add_file
from causalab_core.results.table import FIELDS, LoadedRun, load, position_axes

LITERAL = {"parse_math": False}
"""Every text a user wrote (names, sweep values) is drawn as written: a ``$`` is a dollar, never mathtext."""
TOKEN_CHARS = 16
"""A position's token in a tick label is cut to about this many characters."""


def _where(run: LoadedRun) -> Path:
    return run.folder if run.folder is not None else Path("(in memory)")


def run_document(folder: Path) -> dict[str, Any]:
    """The validated document a finished run wrote, as JSON (checked against the run's manifest)."""
    return _document(load(folder))


def _document(run: LoadedRun) -> dict[str, Any]:
    path, document = _where(run) / "document.json", run.document
    if not isinstance(document, dict) or not isinstance(document.get("metrics"), dict):
        raise OutputError(f"{path}: not a document causalab wrote (no metrics)")
    for axis, values in (document.get("sweep") or {}).items():
        if not values:
            raise OutputError(f"{path}: $.sweep.{shorten(axis)}: not a document causalab wrote "
                              f"(an axis is a list of values, got {echo(values)})")
    return document


def _mean(value: Any) -> float | None:
    """A summary mean as a number, None where it is not defined (no eligible row, NaN)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def sweep_table(run: LoadedRun, metric: str, document: dict[str, Any]) -> tuple[list[str], dict[tuple, float | None]]:
    """The sweep's axes and each point's summary mean (None where undefined), keyed by axis labels."""
    folder = _where(run)
    if metric not in document["metrics"]:
        raise OutputError(f"{folder}: the run has no metric {echo(metric)} "
                          f"(it has {shorten(', '.join(map(str, document['metrics'])))})")
    axes = list(document.get("sweep", {}))
    if not axes:
        raise OutputError(f"{folder}: the run has no sweep to plot")
    means = {}
    for rel, content in _metric_contents(run, metric):
        try:
            means[tuple(axis_label(content["point"][a]) for a in axes)] = _mean(content["summary"].get("mean"))
        except (KeyError, TypeError, AttributeError, ValueError):
            raise OutputError(f"{folder / rel}: not a metric file causalab wrote (no point, or no numeric summary)") from None
    if not means:
        raise OutputError(f"{folder}: no {metric}.json in any sweep point")
    return axes, means


def intervals(run: LoadedRun, metric: str, axes: list[str]) -> dict[tuple, tuple[float, float]]:
    """Each point's ``(mean_low, mean_high)``, keyed as ``sweep_table`` keys means (NaN where undefined);
    empty for a run whose metric files carry no interval (written before they did)."""
    found = {}
    for _, content in _metric_contents(run, metric):
        summary = content.get("summary") or {}
        if "mean_low" in summary:
            key = tuple(axis_label(content["point"][a]) for a in axes)
            bounds = (_mean(summary.get(k)) for k in ("mean_low", "mean_high"))
            found[key] = tuple(math.nan if b is None else b for b in bounds)
    return found


def _metric_contents(run: LoadedRun, metric: str) -> list[tuple[str, dict[str, Any]]]:
    return [(rel, json.loads(run.files[rel])) for rel in sorted(run.files)
            if rel.count("/") == 1 and rel.endswith(f"/{metric}.json")]


def _token(record: dict[str, Any]) -> str | None:
    """The text at a position, as its record shows it: one row's, or ``varies: <first row's>, …``."""
    texts = ["".join(map(str, row.get("tokens") or [])) for row in record.get("rows", [])
             if isinstance(row, dict) and row.get("tokens")]
    if not texts:
        return None
    shown = [text.strip() or repr(text) for text in texts]
    shown = [text if len(text) <= TOKEN_CHARS else text[:TOKEN_CHARS - 1] + "…" for text in shown]
    return shown[0] if len(set(texts)) == 1 else f"varies: {shown[0]}, …"


def token_labels(run: LoadedRun, metric: str, document: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Per position axis, each value's label with the token it lands on (``-4 (Monday)``), read off the
    positions record of the metric files; the write that patches there first, else a read."""
    named = position_axes(document)
    labels: dict[str, dict[str, str]] = {}
    for _, content in _metric_contents(run, metric):
        records = content.get("positions") or {}
        for axis, names in named.items():
            value = (content.get("point") or {}).get(axis)
            label = axis_label(value)
            if label in labels.get(axis, {}):
                continue
            token = next((t for t in (_token(records[n]) for n in names if isinstance(records.get(n), dict)) if t), None)
            if token is not None:
                labels.setdefault(axis, {})[label] = f"{label} ({token})"
    return labels


def plot_metric(folder: Path, metric: str, document: dict[str, Any] | None = None,
                notes: list[str] | None = None, run: LoadedRun | None = None) -> Path:
    """Write ``<folder>/<metric>.png``: ``figure``'s drawing of ``metric``."""
    fig = figure(run or load(folder), metric, document, notes)
    png = io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": None})
    return add_file(folder, f"{metric}.png", png.getvalue())


def signed_centre(means: dict[tuple, float | None], run: LoadedRun, metric: str) -> float | None:
    """Where a signed metric's diverging scale is centred: the clean run's mean where the run estimated one,
    else zero; None for a metric with no value below zero (drawn on viridis, low to high)."""
    values = [v for v in means.values() if v is not None]
    if not values or min(values) >= 0:
        return None
    clean = next((s.get("clean_mean") for s in run.records["summaries"]
                  if s["metric"] == metric and isinstance(s.get("clean_mean"), (int, float))), None)
    return float(clean) if clean is not None else 0.0


def figure(run: LoadedRun, metric: str | None = None, document: dict[str, Any] | None = None,
           notes: list[str] | None = None) -> Any:
    """``metric`` (default: the first) over the sweep as a matplotlib ``Figure``: a heatmap over two axes (a
    signed metric on a diverging scale centred on the clean value, or zero), a line over one.

    A point whose mean is undefined is drawn as ``n/a``; where no point has one the figure says so, and
    so does a line added to ``notes``. The figure belongs to no pyplot state: nothing is shown or kept open."""
    from matplotlib.colors import CenteredNorm
    from matplotlib.figure import Figure

    document = document or _document(run)
    metric = metric if metric is not None else next(iter(document["metrics"]))
    folder = _where(run)
    axes, means = sweep_table(run, metric, document)
    tokens = token_labels(run, metric, document)
    values = {a: prompt_ordered(run, a, [axis_label(v) for v in document["sweep"][a]]) for a in axes}
    ticks = {a: [tokens.get(a, {}).get(v, v) for v in values[a]] for a in axes}
    undefined = sum(1 for v in means.values() if v is None)
    fig = Figure(figsize=(7, 4), dpi=120)
    ax = fig.subplots()
    if len(axes) == 1:
        xs = values[axes[0]]
        ys = [means.get((x,)) for x in xs]
        ax.plot(range(len(xs)), [float("nan") if y is None else y for y in ys], marker="o")
        bands = intervals(run, metric, axes)
        if bands:  # the 95% bootstrap interval over rows, where the metric files have one
            low, high = ([bands.get((x,), (math.nan, math.nan))[i] for x in xs] for i in (0, 1))
            ax.fill_between(range(len(xs)), low, high, alpha=0.25, linewidth=0, label="95% interval over rows")
            ax.legend(fontsize=7, loc="best")
        for i, y in enumerate(ys):
            if y is None and undefined < len(means):
                ax.annotate("n/a", (i, 0), xycoords=("data", "axes fraction"), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(xs)), ticks[axes[0]], **LITERAL, **_slanted(axes[0], tokens))
        ax.set_xlabel(axes[0], **LITERAL)
        ax.set_ylabel(metric, **LITERAL)
    else:
        rows, cols = values[axes[1]], values[axes[0]]
        grid = [[means.get(_key(axes, {axes[0]: c, axes[1]: r}, values)) for c in cols] for r in rows]
        grid = [[float("nan") if v is None else v for v in row] for row in grid]
        centre = signed_centre(means, run, metric)
        image = ax.imshow(grid, aspect="auto", origin="lower", **(
            {"cmap": "viridis"} if centre is None else {"cmap": "RdBu_r", "norm": CenteredNorm(vcenter=centre)}))
        ax.set_xticks(range(len(cols)), ticks[axes[0]], **LITERAL, **_slanted(axes[0], tokens))
        ax.set_yticks(range(len(rows)), ticks[axes[1]], **LITERAL)
        ax.set_xlabel(axes[0], **LITERAL)
        ax.set_ylabel(axes[1], **LITERAL)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                shade = image.norm(v) if v == v else 0.5  # a diverging scale is dark at both ends
                light = shade < 0.5 if centre is None else abs(shade - 0.5) > 0.3
                shown = f"{v:.2f}" if v == v else "n/a"
                if v == v or undefined < len(means):
                    ax.text(j, i, shown, ha="center", va="center", fontsize=7, color="w" if light else "k")
        fig.colorbar(image, ax=ax).set_label(metric, **LITERAL)
    if undefined == len(means):
        ax.text(0.5, 0.5, f"no point has a defined {metric}:\nno eligible row, or the metric is undefined on every row",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, wrap=True, **LITERAL)
        if len(axes) == 1:
            ax.set_yticks([])  # no value to read off a scale
        if notes is not None:
            notes.append(f"{metric}: no point has a defined value (no eligible row, or the metric is undefined "
                         "on every row); the plot says so")
    elif undefined and notes is not None:
        notes.append(f"{metric}: {undefined} of {len(means)} points have no defined value (drawn as n/a)")
    fixed = ", ".join(f"{a} = {values[a][0]}" for a in axes[2:])  # the axes a figure cannot show: their first value
    estimate = run.run.get("estimate") if isinstance(run.run, dict) else None
    guess = "" if not isinstance(estimate, dict) else (  # the values are estimates, not patched runs: the title says so
        f" — ESTIMATED by {estimate.get('method')}" + (f", {estimate['steps']} steps" if estimate.get("steps") else ""))
    ax.set_title(f"{document.get('name') or folder.name}: {metric}" + (f" (at {fixed})" if fixed else "") + guess,
                 **LITERAL)
    fig.tight_layout()
    return fig


def _slanted(axis: str, tokens: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Tick labels that carry tokens are long: slanted on the x axis, so neighbours do not overlap."""
    return {"rotation": 30, "ha": "right"} if tokens.get(axis) else {}


def prompt_ordered(run: LoadedRun, axis: str, labels: list[str]) -> list[str]:
    """A position axis's labels in prompt order, as the tables sort it (``LoadedRun.orders``); any other axis's
    as the sweep gives them."""
    order = run.orders.get(f"sweep_{axis}" if axis in FIELDS else axis)
    if not order:
        return labels
    ranked = [axis_label(v) for v in order]
    return sorted(labels, key=lambda label: ranked.index(label) if label in ranked else len(ranked))


def _key(axes, chosen, values):
    # Axes beyond the first two are fixed at their first value.
    return tuple(chosen.get(a, values[a][0]) for a in axes)
