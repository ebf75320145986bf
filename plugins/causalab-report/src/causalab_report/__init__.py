"""causalab plugin: presentation commands, ``causalab report`` (a run as one self-contained HTML page)."""

from __future__ import annotations

from typing import Any

from causalab_core import hookimpl


@hookimpl
def causalab_commands(app: Any) -> None:
    from causalab_report.commands import report

    app.command("report")(report)
