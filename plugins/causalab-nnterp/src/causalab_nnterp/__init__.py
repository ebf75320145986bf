"""causalab-nnterp: engine ``nnterp`` (nnsight session + nnterp's standardized module names), and its public API.

What a remote engine (``causalab-ndif``) or a third party builds on, and nothing else:

- ``NnterpEngine``: subclass it and override ``model(plan)`` (the object the
  session is built on) and ``run(plan, remote, batch_size, classes)`` (the session);
- ``ServedTransformer`` and ``served_key``: nnterp's model under a remote
  identity an NDIF server can rebuild, and the key it deploys for a document's model;
- ``run_plan``: the block a session runs, locally, as a server's installed copy, or shipped by value;
- ``by_module_path``: the block's site addressing by the compiler's module paths, for a plain
  nnsight model (the default, ``by_nnterp_name``, needs nnterp's wrapper).

The model and block are imported on first use: loading the plugin stays light.
"""

from __future__ import annotations

from causalab_core import hookimpl
from causalab_nnterp.engine import NnterpEngine

__all__ = ["NnterpEngine", "ServedTransformer", "by_module_path", "run_plan", "served_key"]


def __getattr__(name: str):
    if name in ("ServedTransformer", "served_key"):
        from causalab_nnterp import model

        return getattr(model, name)
    if name == "by_module_path":
        from causalab_nnterp.sites import by_module_path

        return by_module_path
    if name == "run_plan":
        from causalab_nnterp.block import run_plan

        return run_plan
    raise AttributeError(name)


@hookimpl
def causalab_engines():
    return [NnterpEngine]
