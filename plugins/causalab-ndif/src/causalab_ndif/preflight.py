"""Before any work is sent: does the server have what this client would run there?

Two checks, both from the server's own answers. ``/env``: the watched packages
and the causalab distributions the plan's block imports (core, causalab-nnterp,
the providers of the plan's featurizers: ``engine.block_distributions``) must be
installed there at the same versions; client-only plugins are not compared.
``/status``: the document's model must be deployed (HOT). The source digests
of the same distributions are compared again inside the block, where the
server computes its own (``causalab_core.plugins.installed_causalab``).
"""

from __future__ import annotations

from typing import Any

from causalab_ndif.environment import installed_version
from causalab_core.errors import EngineError, PlanError


def version_skew(client: dict[str, str | None], packages: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """``{package: (client version, server version)}`` for every package whose versions differ."""
    skew = {}
    for name, mine in client.items():
        theirs = installed_version(packages, name)
        if mine != theirs:
            skew[name] = (mine, theirs)
    return skew


def describe_skew(skew: dict[str, tuple[Any, Any]], host: str) -> str:
    parts = [f"{name} (client {mine or 'not installed'}, server {theirs or 'not installed'})"
             for name, (mine, theirs) in sorted(skew.items())]
    return (f"the NDIF server at {host} does not have what this client would run there: {'; '.join(parts)}. "
            "Install the same versions on both sides, or pass --option allow_skew=true to run anyway (recorded in run.json)")


def refuse_unserved(model_key: str, served: dict[str, dict[str, Any]], host: str, shown: str) -> None:
    """A PlanError listing what the server serves, unless ``model_key`` is among it."""
    if model_key in served:
        return
    listing = ", ".join(sorted(_readable(k) for k in served)) or "nothing"
    raise PlanError(f"model {shown} is not served by the NDIF server at {host}; it serves: {listing}")


def _readable(model_key: str) -> str:
    """``repo_id@revision`` from a remote model key (``import.path:{json}``), else the key itself."""
    import json

    try:
        data = json.loads(model_key.split(":", 1)[1])
    except (IndexError, ValueError):
        return model_key
    revision = data.get("revision")
    return f"{data.get('repo_id')}@{revision}" if revision else str(data.get("repo_id"))


def check(host: str, client: dict[str, str | None], packages: dict[str, str], allow_skew: bool):
    """The version skew between client and server; raises unless ``allow_skew``."""
    skew = version_skew(client, packages)
    if skew and not allow_skew:
        raise EngineError(describe_skew(skew, host))
    return skew
