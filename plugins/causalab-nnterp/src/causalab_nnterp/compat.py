"""Let nnterp 1.3.0 import under nnsight 0.8.

nnterp 1.3.0 was written against nnsight 0.7. nnsight 0.8 moved three names
it uses; this module puts them back where nnterp looks, and only when the
installed nnsight lacks them:

- the module ``nnsight.intervention.tracing`` (now ``nnsight.tracing``) and its
  ``globals`` submodule, from which nnterp imports ``Object``;
- ``Object`` itself, which now lives in ``nnsight.tracing.hint``;
- ``Envoy._model`` (renamed ``Envoy._module``).

``tests/test_compat.py`` fails the day the shim is no longer needed (nnterp or
nnsight fixed it) and the day it is no longer enough (nnterp still fails).
"""

from __future__ import annotations

import importlib.util
import sys
import types

APPLIED: list[str] = []
"""Which of the three fixes this process needed."""


def needed() -> list[str]:
    """The fixes the installed nnsight needs, without importing nnterp."""
    import nnsight.intervention.envoy as envoy

    missing = []
    if importlib.util.find_spec("nnsight.intervention.tracing") is None:
        missing.append("nnsight.intervention.tracing")
    if not hasattr(envoy.Envoy, "_model"):
        missing.append("Envoy._model")
    return missing


def apply() -> None:
    """Install the aliases (idempotent)."""
    import nnsight.tracing
    import nnsight.tracing.globals
    from nnsight.intervention.envoy import Envoy
    from nnsight.tracing.hint import Object

    for fix in needed():
        if fix == "nnsight.intervention.tracing":
            globals_alias = types.ModuleType("nnsight.intervention.tracing.globals")
            globals_alias.__dict__.update(vars(nnsight.tracing.globals))
            globals_alias.Object = Object
            sys.modules["nnsight.intervention.tracing"] = nnsight.tracing
            sys.modules["nnsight.intervention.tracing.globals"] = globals_alias
        elif fix == "Envoy._model":
            Envoy._model = property(lambda self: self._module)
        APPLIED.append(fix)


def import_nnterp():
    """nnterp, importable on this nnsight."""
    apply()
    import nnterp

    return nnterp
