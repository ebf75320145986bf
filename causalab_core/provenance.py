"""run.json: what ran, with which versions, and a digest of every line of causalab code loaded."""

from __future__ import annotations

import functools
import importlib.metadata
from typing import Any

from causalab_core.plugins import Registry

WATCHED = ("torch", "transformers", "nnsight", "nnterp", "pydantic")


@functools.cache
def _versions() -> tuple[tuple[str, str | None], ...]:
    found = []
    for name in WATCHED:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, None))
    return tuple(found)


def watched_versions() -> dict[str, str | None]:
    """Versions of the watched packages installed in this process (None where absent; read once)."""
    return dict(_versions())


def causalab_digests(registry: Registry) -> dict[str, Any]:
    """The combined digest, and each distribution's version and source digest."""
    return {
        "digest": registry.combined_digest(),
        "distributions": {p.distribution: {"version": p.version, "digest": p.digest} for p in registry.distributions()},
    }


def run_record(
    registry: Registry, *, engine: str, remote: bool | str, batch_size: int | None, plan: Any,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "engine": engine,
        "remote": remote,
        "batch_size": batch_size,
        "versions": watched_versions(),
        "causalab": causalab_digests(registry),
    }
    for extra in registry.pm.hook.causalab_provenance(engine=engine, remote=remote, plan=plan,
                                                      details=details or {}):
        if extra:
            record.update(extra)
    return record


def installed_causalab() -> dict[str, dict[str, str]]:
    """This machine's causalab distributions with their versions and source digests.

    A remote engine's block calls this on the server, so the client can compare
    the server's installed copy of core and plugins with its own.
    """
    from causalab_core.plugins import registry

    return causalab_digests(registry())["distributions"]


def digest_skew(client: dict[str, dict[str, str]], server: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """``{distribution: (client, server)}`` for each client distribution the server lacks or has other sources of."""
    skew = {}
    for name, mine in client.items():
        theirs = server.get(name)
        if theirs is None:
            skew[name] = (f"{mine['version']} {mine['digest'][:12]}", "not installed")
        elif theirs["digest"] != mine["digest"]:
            skew[name] = (f"{mine['version']} {mine['digest'][:12]}", f"{theirs['version']} {theirs['digest'][:12]}")
    return skew
