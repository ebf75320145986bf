"""``causalab env --host URL``: this client and an NDIF server, side by side."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from causalab_core.errors import CausalabError

from causalab_ndif.server import get_json, served_models


def describe(host: str) -> dict[str, Any]:
    """The server's Python, packages, served models (with dtypes), and its causalab digests where one can be asked."""
    env = get_json(host, "/env")
    served = served_models(host)
    return {
        "host": host,
        "python": str(env.get("python_version", "")).split()[0],
        "packages": env.get("packages", {}),
        "served": served,
        "causalab": server_causalab(host, served),
    }


def server_causalab(host: str, served: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The server's own digests of its installed causalab, computed in a session on a model it serves.

    A session needs a weightless shell of a served model on this client; None
    when no served model's checkpoint is here.
    """
    from causalab_core.compiler.shell import resolve_source
    from causalab_core.plugins import registry
    from causalab_nnterp.model import ServedTransformer, served_key

    for model_key in sorted(served):
        data = json.loads(model_key.split(":", 1)[1])
        if model_key != served_key(data["repo_id"], data["revision"]):
            continue
        try:
            source = resolve_source(data["repo_id"], data["revision"], registry())
        except CausalabError:
            continue
        return ask_digests(ServedTransformer(source, key=data["repo_id"], revision=data["revision"]), host)
    return None


def ask_digests(model, host: str) -> dict[str, Any]:
    import nnsight

    from causalab_core.plugins import installed_causalab

    with contextlib.redirect_stdout(sys.stderr), model.session(remote=host):
        installed = nnsight.save(installed_causalab())
    return installed
