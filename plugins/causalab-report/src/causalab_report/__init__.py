"""causalab plugin: presentation, ``causalab report`` (a run as one self-contained HTML page) and ``causalab plot``."""

from __future__ import annotations

from typing import Any

from causalab_core import hookimpl


@hookimpl
def causalab_commands(app: Any) -> None:
    from causalab_report.commands import COMMANDS

    for name, command in COMMANDS.items():
        app.command(name)(command)


@hookimpl
def causalab_run_html(run: Any) -> str:
    from causalab_report.page import inline

    return inline(run)


@hookimpl
def causalab_run_figure(run: Any, metric: str | None) -> Any:
    from causalab_report.plot import figure

    return figure(run, metric)
