"""Before any work is sent: does the server have what this client would run there?

Two checks, both from the server's own answers. ``/env``: the watched packages
and the causalab distributions the plan's block imports (core, causalab-nnterp,
the providers of the plan's featurizers: :func:`block_distributions`) must be
installed there at the same versions; client-only plugins are not compared.
``/status``: the document's model must be deployed (HOT). The source digests
of the same distributions are compared again inside the block, where the
server computes its own (``causalab_core.plugins.installed_causalab``).
"""

from __future__ import annotations

from typing import Any

from causalab_ndif.environment import installed_version
from causalab_core.errors import EngineError, PlanError


# What a shipped block needs the server to have, at this client's versions: it
# runs on them directly (nnterp, and every causalab distribution, are not needed).
SERVER_PACKAGES = ("torch", "transformers", "nnsight", "pydantic")


def public(version: str | None) -> str | None:
    """A version without its local label: ``2.13.0`` for ``2.13.0+cpu``. A CPU client and a CUDA server
    run the same release of torch; the build they run it on is not a version difference."""
    return None if version is None else version.split("+", 1)[0]


def version_skew(client: dict[str, str | None], packages: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """``{package: (client version, server version)}`` for every package whose (public) versions differ."""
    skew = {}
    for name, mine in client.items():
        theirs = installed_version(packages, name)
        if public(mine) != public(theirs):
            skew[name] = (mine, theirs)
    return skew


def describe_skew(skew: dict[str, tuple[Any, Any]], host: str) -> str:
    parts = [f"{name} (client {mine or 'not installed'}, server {theirs or 'not installed'})"
             for name, (mine, theirs) in sorted(skew.items())]
    # Nothing the shipped code runs on differs: shipping this client's code with the request would do.
    ship = ", or --option code=shipped to send this client's causalab code with the request" if not (
        set(skew) & set(SERVER_PACKAGES)) else ""
    return (f"the NDIF server at {host} does not have what this client would run there: {'; '.join(parts)}. "
            "Install the same versions on both sides, or pass --option allow_skew=true to run anyway "
            f"(recorded in run.json){ship}")


def refuse_unserved(model_key: str, served: dict[str, dict[str, Any]], host: str, shown: str,
                    revision: str | None = None) -> None:
    """A PlanError listing what the server serves, unless ``model_key`` is among it. Where it serves the
    document's model at other revisions (the document pinned none, or another), the line names them."""
    if model_key in served:
        return
    listing = ", ".join(sorted(_readable(k) for k in served)) or "nothing"
    repo, kind = _fields(model_key).get("repo_id"), model_key.split(":", 1)[0]
    others = sorted({str(_fields(k).get("revision")) for k in served  # the same model class, the same repo
                     if repo is not None and k.split(":", 1)[0] == kind and _fields(k).get("repo_id") == repo
                     and _fields(k).get("revision") not in (None, revision)})
    pin = ""
    if others:
        asked = f"at revision {revision}" if revision else "with no model.revision"
        pin = (f" (the document asks for it {asked}; the server has it at revision {' or '.join(others)}: "
               f"pin one in the document, \"model\": {{\"revision\": \"{others[0]}\"}})")
    raise PlanError(f"model {shown} is not served by the NDIF server at {host}{pin}; it serves: {listing}")


def _fields(model_key: str) -> dict[str, Any]:
    """The JSON part of a remote model key (``import.path:{json}``), or nothing."""
    import json

    try:
        data = json.loads(model_key.split(":", 1)[1])
    except (IndexError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _readable(model_key: str) -> str:
    """``repo_id@revision`` from a remote model key (``import.path:{json}``), else the key itself."""
    data = _fields(model_key)
    if not data:
        return model_key
    revision = data.get("revision")
    return f"{data.get('repo_id')}@{revision}" if revision else str(data.get("repo_id"))


def check(host: str, client: dict[str, str | None], packages: dict[str, str], allow_skew: bool):
    """The version skew between client and server; raises unless ``allow_skew``."""
    skew = version_skew(client, packages)
    if skew and not allow_skew:
        raise EngineError(describe_skew(skew, host))
    return skew


def block_distributions(installed, classes) -> set[str]:
    """The causalab distributions the block imports on the server, and so the only ones compared with it:
    core (the plan, the runtime), the distribution of the block's code (causalab-nnterp), and the
    installed distributions of the featurizer classes the engine was handed (whichever registry chose
    them; a class from no installed plugin has no server copy to compare). Client-only plugins (metrics,
    positions, engines) never run there."""
    import causalab_nnterp

    owners = {p.module.__name__.split(".")[0]: p.distribution for p in installed.plugins}
    modules = [causalab_nnterp.__name__, *(cls.__module__ for cls in classes.values())]
    return {"causalab-core"} | {owners[m.split(".")[0]] for m in modules if m.split(".")[0] in owners}


def server_requirements(installed, classes) -> dict[str, str | None]:
    """``{package: version}`` a server needs to run a block handed ``classes``: the watched packages and
    the causalab distributions it imports, at this client's versions. What the preflight compares, and
    what ``causalab ndif server-requirements`` prints."""
    from causalab_core.plugins.provenance import causalab_digests, watched_versions

    versions = {name: d["version"] for name, d in causalab_digests(installed)["distributions"].items()}
    wanted = {**watched_versions(), **{name: versions[name] for name in sorted(block_distributions(installed, classes))}}
    return {name: public(version) for name, version in wanted.items()}
