"""``causalab ndif env``: this client and an NDIF server, side by side."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

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
    from causalab_core.plugins.registry import registry
    from causalab_nnterp import ServedTransformer, served_key

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

    from causalab_core.plugins.registry import installed_causalab

    with contextlib.redirect_stdout(sys.stderr), model.session(remote=host):
        installed = nnsight.save(installed_causalab())
    return installed


def installed_version(packages: dict[str, str], distribution: str) -> str | None:
    """A distribution's version in a server's ``/env`` listing, which keys packages by import name where it knows one."""
    for name in (distribution, distribution.replace("-", "_")):
        if name in packages:
            return packages[name]
    return None


def auto_code(packages: dict[str, str]) -> tuple[str, str]:
    """What ``code=auto`` picks against a server whose ``/env`` lists ``packages``, and why."""
    core = installed_version(packages, "causalab-core")
    if core is None:
        return "shipped", "the server's /env lists no causalab-core, so the block's code travels by value"
    return "installed", f"the server's /env lists causalab-core {core}, so the block runs the server's own copy"


def _cell(version: str | None, digest: str | None = None) -> str:
    if version is None:
        return "not installed"
    return f"{version} {digest[:12]}" if digest else version


def side_by_side(client: dict[str, Any], server: dict[str, Any], needed: dict[str, str] | None = None) -> Group:
    """Packages (watched and causalab, with digests), the server's served models, and the mode ``code=auto``
    picks. ``needed``: the causalab distributions the installed mode needs on the server, with when."""
    needed = needed or {}
    packages = Table(title=f"this client and {server['host']}")
    for column in ("package", "client", "server", ""):
        packages.add_column(column)
    packages.add_row("python", client["python"], server["python"], "" if client["python"] == server["python"] else "differs")
    for name, mine in client["versions"].items():
        theirs = installed_version(server["packages"], name)
        packages.add_row(name, _cell(mine), _cell(theirs), "" if mine == theirs else "differs")
    ours = client["causalab"]["distributions"]
    digests = server.get("causalab") or {}
    for name in sorted(set(ours) | set(digests)):
        mine = ours.get(name)
        theirs = digests.get(name) or ({"version": installed_version(server["packages"], name), "digest": None}
                                        if installed_version(server["packages"], name) else None)
        left = _cell(mine["version"], mine["digest"]) if mine else "not installed"
        right = _cell(theirs["version"], theirs["digest"]) if theirs else "not installed"
        same = mine is not None and theirs is not None and mine["version"] == theirs["version"] and (
            theirs["digest"] is None or mine["digest"] == theirs["digest"])
        # A server needs only what a block imports (`causalab ndif server-requirements`): lacking the rest is fine.
        missing = f"needed {needed[name]}" if name in needed else "client only"
        packages.add_row(name, left, right, "" if same else missing if theirs is None else "differs")
    if server.get("causalab") is None:
        packages.caption = "server digests not checked: no served model's checkpoint is on this client"

    served = Table(title="served models")
    for column in ("model", "revision", "dtype", "state"):
        served.add_column(column)
    for model_key, record in sorted(server["served"].items()):
        try:
            data = json.loads(model_key.split(":", 1)[1])
        except (IndexError, ValueError):
            data = {"repo_id": model_key}
        served.add_row(str(data.get("repo_id")), str(data.get("revision")), str(record.get("dtype")),
                       str(record.get("state")))
    mode, why = auto_code(server["packages"])
    return Group(packages, served, Text(f"code=auto picks {mode}: {why}"))
