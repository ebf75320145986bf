"""``causalab report``: the command this plugin adds to the causalab command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def report(
    folder: Annotated[Path, typer.Argument(help="A run's output folder.", show_default=False)],
    compare: Annotated[Optional[Path], typer.Option(
        "--compare", help="Another run's output folder: the two side by side, and what differs.")] = None,
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="The data file (JSONL) of a run whose rows came from a path (checked against run.json).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the full traceback of an error.")] = False,
) -> None:
    """Write FOLDER/report.html: one self-contained page (no network) with each metric over the sweep,
    each point's rows with their prompts' tokens and windows, and the run's provenance."""
    from causalab_core.cli import err, reported

    from causalab_report.page import write_report

    with reported(verbose):
        path, notes = write_report(folder, compare, data)
    print(path)
    for note in notes:
        err.print(f"causalab: {note}", markup=False)
