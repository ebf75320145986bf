"""A failure on the server, told the way the same failure is told locally.

nnsight raises a server-side exception as one ``RemoteError`` whose text is the
server's traceback. A causalab error (its last line names the class) becomes
that same class with the same message, so the CLI prints the same one line and
exits with the same code; anything else is an EngineError naming the host. The
server's traceback rides along as ``server_traceback`` for ``--verbose``.
"""

from __future__ import annotations

import importlib
import re

from causalab_core.errors import CausalabError, EngineError

LAST_LINE = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*): (?P<message>.*)$")


def _causalab_class(qualified: str) -> type[CausalabError] | None:
    module, _, name = qualified.rpartition(".")
    if not module.startswith("causalab"):
        return None
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return cls if isinstance(cls, type) and issubclass(cls, CausalabError) else None


def local_error(exc: BaseException, host: str) -> CausalabError:
    """The causalab error to raise on the client for ``exc`` from a remote session."""
    if isinstance(exc, CausalabError):
        return exc
    text = str(exc).strip()
    if type(exc).__name__ != "RemoteError":
        error = EngineError(f"the request to the NDIF server at {host} failed: {type(exc).__name__}: {text}")
        error.server_traceback = None
        return error
    lines = [line for line in text.splitlines() if line.strip()]
    last = LAST_LINE.match(lines[-1]) if lines else None
    cls = _causalab_class(last["cls"]) if last else None
    if cls is not None:
        error = cls(last["message"])
    else:
        error = EngineError(f"the NDIF server at {host} failed running the plan: {lines[-1] if lines else 'no reason given'}")
    error.server_traceback = text
    return error
