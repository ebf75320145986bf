"""Plots of a finished sweep: one PNG per metric, the summary mean at each point."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from causalab_core.compiler.sweep import axis_label
from causalab_core.errors import OutputError, echo, shorten
from causalab_core.output import add_file


LITERAL = {"parse_math": False}
"""Every text a user wrote (names, sweep values) is drawn as written: a ``$`` is a dollar, never mathtext."""


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OutputError(f"{path}: no such file (not a causalab output folder?)") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise OutputError(f"{path}: cannot be read as JSON: {shorten(str(exc))}") from None


def run_document(folder: Path) -> dict[str, Any]:
    """The validated document a finished run wrote, as JSON."""
    path = folder / "document.json"
    document = _read(path)
    if not isinstance(document, dict) or not isinstance(document.get("metrics"), dict):
        raise OutputError(f"{path}: not a document causalab wrote (no metrics)")
    sweep = document.get("sweep", {})
    if not isinstance(sweep, dict):
        raise OutputError(f"{path}: $.sweep: not a document causalab wrote (the sweep is not an object)")
    for axis, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise OutputError(f"{path}: $.sweep.{shorten(axis)}: not a document causalab wrote "
                              f"(an axis is a list of values, got {echo(values)})")
    return document


def sweep_table(folder: Path, metric: str, document: dict[str, Any]) -> tuple[list[str], dict[tuple, float | None]]:
    """The sweep's axes and each point's summary mean, read from a run's output folder."""
    if metric not in document["metrics"]:
        raise OutputError(f"{folder}: the run has no metric {echo(metric)} "
                          f"(it has {shorten(', '.join(map(str, document['metrics'])))})")
    axes = list(document.get("sweep", {}))
    if not axes:
        raise OutputError(f"{folder}: the run has no sweep to plot")
    means = {}
    for path in sorted(folder.glob(f"*/{metric}.json")):
        content = _read(path)
        try:
            mean = content["summary"].get("mean")
            means[tuple(axis_label(content["point"][a]) for a in axes)] = None if mean is None else float(mean)
        except (KeyError, TypeError, AttributeError, ValueError):
            raise OutputError(f"{path}: not a metric file causalab wrote (no point, or no numeric summary)") from None
    if not means:
        raise OutputError(f"{folder}: no {metric}.json in any sweep point")
    return axes, means


def plot_metric(folder: Path, metric: str, document: dict[str, Any] | None = None) -> Path:
    """Write ``<folder>/<metric>.png``: a heatmap over two axes, a line over one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    document = document or run_document(folder)
    axes, means = sweep_table(folder, metric, document)
    values = {a: [axis_label(v) for v in document["sweep"][a]] for a in axes}
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    if len(axes) == 1:
        xs = values[axes[0]]
        ax.plot(range(len(xs)), [means.get((x,)) for x in xs], marker="o")
        ax.set_xticks(range(len(xs)), xs, **LITERAL)
        ax.set_xlabel(axes[0], **LITERAL)
        ax.set_ylabel(metric, **LITERAL)
    else:
        rows, cols = values[axes[1]], values[axes[0]]
        grid = [[means.get(_key(axes, {axes[0]: c, axes[1]: r}, values)) for c in cols] for r in rows]
        grid = [[float("nan") if v is None else v for v in row] for row in grid]
        image = ax.imshow(grid, aspect="auto", cmap="viridis", origin="lower")
        ax.set_xticks(range(len(cols)), cols, **LITERAL)
        ax.set_yticks(range(len(rows)), rows, **LITERAL)
        ax.set_xlabel(axes[0], **LITERAL)
        ax.set_ylabel(axes[1], **LITERAL)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if v == v:  # not NaN
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="w" if image.norm(v) < 0.5 else "k")
        fig.colorbar(image, ax=ax).set_label(metric, **LITERAL)
    ax.set_title(f"{document.get('name') or folder.name}: {metric}", **LITERAL)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": None})
    plt.close(fig)
    return add_file(folder, f"{metric}.png", png.getvalue())


def _key(axes, chosen, values):
    # Axes beyond the first two are fixed at their first value.
    return tuple(chosen.get(a, values[a][0]) for a in axes)
