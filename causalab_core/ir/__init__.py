"""The plan IR (plain data) and the error for documents that cannot be planned."""

from causalab_core.errors import PlanError
from causalab_core.ir.nodes import (
    EdgePatch,
    FeaturizerRef,
    Fit,
    InterventionRef,
    MetricPlan,
    ModelRef,
    Plan,
    Point,
    PositionRecord,
    Read,
    Receiver,
    Run,
    Scoring,
    Sender,
    Site,
    Write,
)

__all__ = [
    "EdgePatch", "FeaturizerRef", "Fit", "InterventionRef", "MetricPlan", "ModelRef", "Plan", "PlanError", "Point",
    "PositionRecord", "Read", "Receiver", "Run", "Scoring", "Sender", "Site", "Write",
]
