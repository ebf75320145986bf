"""causalab-metrics: iia, logit_diff and p_answer."""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_metrics.answers import IIA, LogitDiff, PAnswer


@hookimpl
def causalab_metrics():
    return [IIA, LogitDiff, PAnswer]
