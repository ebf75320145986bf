"""causalab plugin: engine ``ndif`` (the nnterp engine's session on an NDIF server), its provenance, ``causalab ndif``."""

from __future__ import annotations

from typing import Any

from causalab_core import hookimpl


@hookimpl
def causalab_engines() -> list[type]:
    from causalab_ndif.engine import NdifEngine

    return [NdifEngine]


@hookimpl
def causalab_commands(app: Any) -> None:
    from causalab_ndif.commands import ndif

    app.add_typer(ndif, name="ndif")


@hookimpl
def causalab_provenance(engine: str, remote: bool, plan: Any, details: dict[str, Any]) -> dict[str, Any] | None:
    """run.json's ``server`` (what the host's /env says), ``served_dtype`` (read inside the block) and
    ``code`` (how the block's code reached the server: installed there, or shipped by value), ``jobs``."""
    if engine != "ndif" or "host" not in details:
        return None
    from causalab_ndif.server import server_record

    record = {"server": server_record(details["host"]), "served_dtype": details["served_dtype"],
              "server_causalab": details["server_causalab"], "code": details["code"]}
    if details["skew"]:
        record["skew"] = details["skew"]
    if details.get("dtype_mismatch"):
        record["dtype_mismatch"] = details["dtype_mismatch"]
    if details.get("jobs"):  # each job's points and the bytes it sent and received
        record["jobs"] = details["jobs"]
    if details.get("job_size"):  # --option max_job_s: the first job's time and the points per job it chose
        record["job_size"] = details["job_size"]
    return record
