"""How a run shows itself in a notebook: a few lines of text, HTML, a figure, a progress bar.

The HTML and the figure are the report plugin's where it is installed."""

from __future__ import annotations

import html as markup
import math
from collections.abc import Callable
from typing import Any

from causalab_core.errors import PluginError

LoadedRun = Any  # a results.table.LoadedRun (not imported: table imports this module)


def _where(run: LoadedRun) -> str:
    return "in memory" if run.folder is None else str(run.folder)


def _mean(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def metric_lines(run: LoadedRun) -> list[tuple[str, str]]:
    """(metric, what its summaries say): the range of the points' means and the point of the highest."""
    lines = []
    for metric in dict.fromkeys(s["metric"] for s in run.records["summaries"]):
        means = [(s["point"], _mean(s.get("mean"))) for s in run.records["summaries"] if s["metric"] == metric]
        defined = [(p, m) for p, m in means if m is not None]
        if not defined:
            lines.append((metric, "no point has a defined mean"))
            continue
        point, top = max(defined, key=lambda pm: pm[1])
        low = min(m for _, m in defined)
        where = f" at {point}" if point else ""
        spread = (f"mean {top:.3g}" if len(defined) == 1 else f"mean {top:.3g} at every point" if low == top
                  else f"means {low:.3g} to {top:.3g}; highest{where}")
        lines.append((metric, spread))
    return lines


def text(run: LoadedRun) -> str:
    """A run in a few lines: its name and folder, its points and rows, each metric's range, the tables."""
    points = len(dict.fromkeys(s["point"] for s in run.records["summaries"]))
    rows = max((s.get("rows", 0) for s in run.records["summaries"]), default=0)
    axes = f" over {' x '.join(run.axes)}" if run.axes else ""
    name = run.document.get("name")
    lines = [f"<causalab run{' ' + repr(name) if name else ''} ({_where(run)})>",
             f"  {points} point{'s' if points != 1 else ''}{axes}; {rows} rows; engine {run.run.get('engine')}"]
    said = metric_lines(run)
    width = max((len(m) for m, _ in said), default=0)
    lines += [f"  {m.ljust(width)}  {what}" for m, what in said]
    lines.append(f"  tables: .summaries ({len(run.records['summaries'])} rows), .rows ({len(run.records['rows']):,}), "
                 f".featurizers ({len(run.records['featurizers'])}); .plot(), .save(out)")
    return "\n".join(lines)


def html(run: LoadedRun) -> str:
    """The report plugin's inline view where one is installed; else the summaries as a table."""
    from causalab_core.plugins.registry import registry

    shown = registry().pm.hook.causalab_run_html(run=run)
    if isinstance(shown, str):
        return shown
    e = markup.escape
    columns = [c for c in ("point", "metric", "mean", "mean_low", "mean_high", "eligible", "rows")
               if any(c in s for s in run.records["summaries"])]
    body = "".join("<tr>" + "".join(f"<td>{e(str(s.get(c, '')))}</td>" for c in columns) + "</tr>"
                   for s in run.records["summaries"])
    return (f"<pre>{e(text(run))}</pre><table><tr>{''.join(f'<th>{e(c)}</th>' for c in columns)}</tr>{body}</table>"
            "<p>(install causalab-report for heatmaps and rows)</p>")


def figure(run: LoadedRun, metric: str | None) -> Any:
    """The report plugin's figure of ``metric``; one line where no plugin draws one."""
    from causalab_core.plugins.registry import registry

    drawn = registry().pm.hook.causalab_run_figure(run=run, metric=metric)
    if drawn is None:
        raise PluginError("plot: no installed plugin draws figures (pip install causalab-report)")
    return drawn


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell with a kernel: a display to draw on)."""
    import sys

    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def notebook_progress() -> Callable[[Any], Callable[[str], None]] | None:
    """``run``'s default ``progress`` in a Jupyter kernel: a bar of the plan's steps (tqdm.auto: a widget where
    ipywidgets is installed, text otherwise); None anywhere else, so a script or a test prints nothing."""
    if not in_notebook():
        return None
    from tqdm.auto import tqdm

    def start(plan: Any) -> Callable[[str], None]:
        bar = tqdm(total=len(plan.steps()), desc="causalab", unit="step")

        def step(path: str) -> None:
            bar.set_postfix_str(path, refresh=False)
            bar.update(1)
            if bar.n >= bar.total:
                bar.close()

        return step

    return start
