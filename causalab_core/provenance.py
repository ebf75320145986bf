"""run.json: what ran, with which versions, and a digest of every line of causalab code loaded."""

from __future__ import annotations

import importlib.metadata
from typing import Any

from causalab_core.plugins import Registry

WATCHED = ("torch", "transformers", "nnsight", "nnterp", "pydantic")


def watched_versions() -> dict[str, str | None]:
    """Versions of the watched packages installed in this process (None where absent)."""
    out: dict[str, str | None] = {}
    for name in WATCHED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def causalab_digests(registry: Registry) -> dict[str, Any]:
    """The combined digest, and each distribution's version and source digest."""
    return {
        "digest": registry.combined_digest(),
        "distributions": {p.distribution: {"version": p.version, "digest": p.digest} for p in registry.distributions()},
    }


def run_record(
    registry: Registry, *, engine: str, remote: bool | str, batch_size: int | None, plan: Any
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "engine": engine,
        "remote": remote,
        "batch_size": batch_size,
        "versions": watched_versions(),
        "causalab": causalab_digests(registry),
    }
    for extra in registry.pm.hook.causalab_provenance(engine=engine, remote=remote, plan=plan):
        if extra:
            record.update(extra)
    return record
