"""causalab-ray: a sweep's chunks run on the workers of a Ray cluster (`causalab run --workers N`, `--ray-address`).

Importing this module imports no Ray: the registry loads it for every command, and Ray loads only for a run
that names ``--workers`` or ``--ray-address``.
"""

from __future__ import annotations

from typing import Any

from causalab_core import hookimpl


@hookimpl
def causalab_chunk_runner(workers: int | None, address: str | None) -> Any:
    from causalab_ray.runner import RayChunks

    return RayChunks(workers=workers, address=address)


@hookimpl
def causalab_provenance(details: dict[str, Any]) -> dict[str, Any] | None:
    """run.json's ``ray``: the workers (node, pid, threads, devices) and which ran each chunk (and which died)."""
    return {"ray": details["ray"]} if details.get("ray") else None
