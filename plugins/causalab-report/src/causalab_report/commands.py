"""``causalab report`` and ``causalab plot``: the commands this plugin adds to the causalab command line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer

Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show the full traceback of an error.")]


def report(
    folder: Annotated[Path, typer.Argument(help="A run's output folder.", show_default=False)],
    compare: Annotated[Optional[Path], typer.Option(
        "--compare", help="Another run's output folder: the two side by side, and what differs.")] = None,
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="The data file (JSONL) of a run whose rows came from a path (checked against run.json).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o", help="Write the page to this new file instead of into FOLDER (an existing file is refused).")] = None,
    tolerance: Annotated[float, typer.Option(
        help="With --compare: row values that differ by at most this much count as equal (the page says so).",
        min=0.0)] = 1e-6,
    verbose: Verbose = False,
) -> None:
    """Write FOLDER/report.html: one self-contained page (no network) with what was done, each metric over the
    sweep, each point's rows with their prompts' tokens, windows and predicted tokens, and the run's provenance.
    With --compare B: FOLDER/compare-B.html, the two runs side by side and what differs."""
    from causalab_core.cli import err, reported
    from causalab_core.errors import OutputError

    from causalab_report.page import write_report

    with reported(verbose):
        if tolerance != 1e-6 and compare is None:
            raise OutputError("--tolerance applies to --compare: name the run to compare with")
        if not math.isfinite(tolerance):
            raise OutputError(f"--tolerance must be a finite number, got {tolerance}")
        path, notes = write_report(folder, compare, data, out, tolerance)
    print(path)
    for note in notes:
        err.print(f"causalab: {note}", markup=False)


def plot(
    folder: Annotated[Path, typer.Argument(help="A run's output folder (with a sweep).", show_default=False)],
    metric: Annotated[Optional[list[str]], typer.Option(help="Metric to plot (repeatable; default: every metric).")] = None,
    verbose: Verbose = False,
) -> None:
    """Draw each metric's summary over the sweep (heatmap for two axes) as FOLDER/<metric>.png."""
    from causalab_core.cli import err, reported
    from causalab_core.results.table import load

    with reported(verbose):
        from causalab_report.plot import _document, plot_metric

        run = load(folder)  # read once, every file checked against the manifest
        document, notes = _document(run), []
        for name in metric or list(document["metrics"]):
            print(plot_metric(folder, name, document, notes, run))
        for note in notes:
            err.print(f"causalab: {note}", markup=False)


COMMANDS = {"report": report, "plot": plot}
"""What the ``causalab_commands`` hook adds, by name."""


def commands() -> typer.Typer:
    """This plugin's commands as a Typer app of their own (for a test's ``CliRunner``, or another program)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    for name, command in COMMANDS.items():
        app.command(name)(command)
    return app
