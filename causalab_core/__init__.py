"""causalab core: documents, the plan IR, the compiler, plugin hooks, provenance, results.

Importing this package does not import torch; the compiler and engines do,
when they run.
"""

from causalab_core.errors import CausalabError, DocumentError, EngineError, PlanError, PluginError
from causalab_core.plugins import hookimpl, hookspec


def __getattr__(name: str):
    # The API pulls in the compiler; keep `import causalab_core` light for plugins.
    if name in ("run", "plan", "validate"):
        from causalab_core import api

        return getattr(api, name)
    raise AttributeError(name)


__all__ = [
    "CausalabError", "DocumentError", "EngineError", "PlanError", "PluginError",
    "hookimpl", "hookspec", "plan", "run", "validate",
]
