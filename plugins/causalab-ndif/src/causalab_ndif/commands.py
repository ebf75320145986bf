"""``causalab ndif ...``: the commands this plugin adds to the causalab command line."""

from __future__ import annotations

from pathlib import Path
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
    from causalab_core.plugins.registry import registry
    from causalab_core.plugins.provenance import environment

    from causalab_ndif.environment import describe, side_by_side
    from causalab_ndif.preflight import block_distributions
    from causalab_ndif.server import resolved_host

    with reported(verbose):
        server = describe(host or resolved_host())
        installed = registry()
        # What the installed mode needs on the server: every block imports these; a featurizer's plugin,
        # where a document uses its featurizers.
        needed = {name: "for code=installed" for name in block_distributions(installed, {})}
        for name in installed.names("featurizer"):
            needed.setdefault(installed.provider("featurizer", name).distribution,
                              "for code=installed by documents using its featurizers")
    Console(highlight=False).print(side_by_side(environment(installed), server, needed))


@ndif.command("server-requirements")
def server_requirements(
    documents: Annotated[list[Path], typer.Argument(help="The documents the server must run.")],
    shipped: Annotated[bool, typer.Option("--shipped", help="For the shipped mode (code=shipped): no causalab on the server.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the full traceback of an error.")] = False,
) -> None:
    """The pinned requirement lines an NDIF server needs to run these documents: exactly what the preflight compares.

    Compiled here (no weights). A server image installs these lines (causalab's
    own with --no-deps; see the plugin README's Dockerfile) and nothing else of causalab.
    """
    from causalab_core import api
    from causalab_core.cli import reported
    from causalab_core.plugins.registry import registry

    from causalab_ndif import shipping
    from causalab_ndif.preflight import server_requirements as needed

    with reported(verbose):
        installed = registry()
        classes = {}
        for document in documents:
            classes.update(api.featurizer_classes(api.plan(document, registry=installed), installed))
        wanted = shipping.server_requirements() if shipped else needed(installed, classes)
        lines = [f"{name}=={version}" for name, version in wanted.items() if version]
    typer.echo("\n".join(lines))
