"""causalab core: documents, the plan IR, the compiler, plugin hooks, provenance, results.

Importing this package does not import torch; the compiler and engines do,
when they run.
"""

from causalab_core.document.load import to_json
from causalab_core.document.schema import (
    CausalModelSpec, ConfirmSpec, DataSpec, DirectionSpec, Document, EstimateSpec, FeaturizerSpec, InterventionSpec,
    MetricSpec, ModelSpec, ReadSpec, SweepRef, TrainSpec, WriteSpec,
)
from causalab_core.errors import CausalabError, DocumentError, EngineError, OutputError, PlanError, PluginError
from causalab_core.plugins.hookspecs import hookimpl, hookspec
from causalab_core.results.table import LoadedRun


# The API pulls in the compiler; keep `import causalab_core` light for plugins.
def run(*args, **kwargs):
    """Compile, execute and score a document (see :func:`causalab_core.api.run`)."""
    from causalab_core import api

    return api.run(*args, **kwargs)


def plan(*args, **kwargs):
    """Compile a document into a plan without loading weights (see :func:`causalab_core.api.plan`)."""
    from causalab_core import api

    return api.plan(*args, **kwargs)


def validate(*args, **kwargs):
    """Check a document and its data (see :func:`causalab_core.api.validate`)."""
    from causalab_core import api

    return api.validate(*args, **kwargs)


def load(out):
    """A finished run's output folder as tidy tables (see :func:`causalab_core.results.table.load`)."""
    from causalab_core.results.table import load

    return load(out)


__all__ = [
    "CausalModelSpec", "CausalabError", "ConfirmSpec", "DataSpec", "DirectionSpec", "Document", "DocumentError",
    "EngineError", "EstimateSpec", "FeaturizerSpec", "InterventionSpec", "LoadedRun", "MetricSpec", "ModelSpec",
    "OutputError", "PlanError", "PluginError", "ReadSpec", "SweepRef", "TrainSpec", "WriteSpec",
    "hookimpl", "hookspec", "load", "plan", "run", "to_json", "validate",
]
