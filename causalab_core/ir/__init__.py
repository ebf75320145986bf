"""The plan IR (plain data) and the error for documents that cannot be planned."""

from causalab_core.errors import PlanError
from causalab_core.ir.nodes import (
    FeaturizerRef,
    Fit,
    InterventionRef,
    MetricPlan,
    ModelRef,
    Plan,
    Point,
    PositionRecord,
    Read,
    Run,
    Scoring,
    Site,
    Write,
)

__all__ = [
    "FeaturizerRef", "Fit", "InterventionRef", "MetricPlan", "ModelRef", "Plan", "PlanError", "Point",
    "PositionRecord", "Read", "Run", "Scoring", "Site", "Write",
]
