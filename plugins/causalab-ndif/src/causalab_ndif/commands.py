"""``causalab ndif ...``: the commands this plugin adds to the causalab command line."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

ndif = typer.Typer(help="NDIF servers: what a server has, beside this client.", no_args_is_help=True)


@ndif.command()
def env(
    host: Annotated[Optional[str], typer.Option(help="The NDIF server (default: nnsight's configured host, NDIF_HOST).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the full traceback of an error.")] = False,
) -> None:
    """This client's environment and the server's, side by side: packages, causalab digests, served models."""
    from rich.console import Console

    from causalab_core.cli import reported
    from causalab_core.plugins import registry
    from causalab_core.provenance import environment

    from causalab_ndif.environment import describe, side_by_side
    from causalab_ndif.server import resolved_host

    with reported(verbose):
        server = describe(host or resolved_host())
    Console(highlight=False).print(side_by_side(environment(registry()), server))
