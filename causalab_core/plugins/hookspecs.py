"""Every hook a causalab plugin can implement.

Each hook is called with keyword arguments only, so an implementation may accept
fewer arguments than its spec (and a spec can grow without breaking plugins).
The ``causalab_*`` registration hooks return lists of classes; each class carries
a unique ``name`` (a duplicate name is an error naming both distributions).
"""

from __future__ import annotations

from typing import Any

import pluggy

PROJECT = "causalab"
"""The entry-point group and pluggy project name."""
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

# -- components ---------------------------------------------------------------


@hookspec
def causalab_engines() -> list[type]:
    """Return engine classes (see :class:`causalab_core.plugins.contracts.Engine`).

    Called once when the registry is built. An engine runs a compiled plan and
    returns ``{step path: {name: tensor}}``; it declares ``capabilities`` so that a
    plan it cannot run is refused before any weights load.
    """


@hookspec
def causalab_position_resolvers() -> list[type]:
    """Return position resolver classes (see :class:`causalab_core.plugins.contracts.PositionResolver`).

    Resolvers run on the client, at compile time only: each turns a position spec
    and one row's tokens into a window of token indices, or a reason code.
    """


@hookspec
def causalab_featurizers() -> list[type]:
    """Return featurizer classes (see :class:`causalab_core.plugins.contracts.Featurizer`).

    A featurizer maps a site's activation ``x`` to ``(features, error)`` and back;
    a swap write exchanges selected features and keeps the base's error term.
    """


@hookspec
def causalab_interventions() -> list[type]:
    """Return intervention classes (see :class:`causalab_core.plugins.contracts.Intervention`).

    An intervention is what a write puts at its site: a source's value (``swap``), zero, a mean over rows,
    noise, a vector added... Its ``recipe`` says what value it needs and how it combines with the site's.
    """


@hookspec
def causalab_metrics() -> list[type]:
    """Return metric classes (see :class:`causalab_core.plugins.contracts.Metric`).

    A metric names the answer columns it needs (tokenized at compile time) and
    computes per-row values and a summary from the logits an engine returned.
    """


@hookspec
def causalab_causal_models() -> list[type]:
    """Return causal model classes (see :class:`causalab_core.plugins.contracts.CausalModel`).

    A causal model states a hypothesis about a task's high-level variables and
    generates the interchange data that tests it: a document's ``data`` (or a
    featurizer's training data) can be ``{"causal_model": {"kind": ...}}``.
    """


# -- the command line -----------------------------------------------------------


@hookspec
def causalab_commands(app: Any) -> None:
    """Add commands to the ``causalab`` command line (``app`` is its typer app), as llm's ``register_commands``.

    A command name core or another plugin already uses is an error naming both. Implement it in the module
    the ``causalab`` entry point names: `causalab --help` imports only the plugins whose entry-point module's
    source names this hook (so listing commands loads no torch), and causalab's own commands none of them.
    """


# -- models -------------------------------------------------------------------


@hookspec(firstresult=True)
def causalab_model_source(key: str, revision: str | None) -> Any:
    """Return a local directory (str or Path) holding the checkpoint for ``key``, or None.

    Called at compile time and again by in-process engines before loading
    weights. The first non-None answer wins; when every plugin answers None the
    key is taken as a local directory or a Hugging Face cache id (offline).
    """


# -- provenance ---------------------------------------------------------------


@hookspec
def causalab_provenance(engine: str, remote: bool, plan: Any, details: dict[str, Any]) -> dict[str, Any] | None:
    """Return extra top-level fields for ``run.json``, or None.

    Called after the engine returned, on the client, with the engine's
    ``details`` (plain data it learned while running). A remote engine's plugin
    adds what it learned about the server here (e.g. ``server``, ``served_dtype``).
    """


# -- where chunks run -------------------------------------------------------------


@hookspec(firstresult=True)
def causalab_chunk_runner(workers: int | None, address: str | None) -> Any:
    """Return a chunk runner for ``causalab run --workers N`` / ``--ray-address ADDRESS``, or None (causalab-ray's).

    Called once per run that names either option (``api.run(workers=, ray_address=)``); core imports no cluster
    library. The points still run in the chunks the resume store keeps (``api.run_kept``), only elsewhere:

    - ``start(plan, *, registry, engine, options, batch_size, device_map)``: before any point runs, connect or start
      the cluster, start the workers (each with its own local engine ``engine``, built with ``options`` as plain
      data) and check them (a worker without the client's causalab distributions is refused); every refusal is
      one ``CausalabError`` line.
    - ``chunk_size(points)``: points per chunk.
    - ``run(plan, chunks, details)``: run each chunk (a list of point indices of ``plan``) and yield
      ``(chunk, files)`` as each finishes, in any order, ``files`` as ``score.output_files`` lays out the chunk's
      sub-plan; keep in ``details`` (the run's engine details, run.json's source) what the workers' engines said
      and where each chunk ran. A chunk whose worker died is run again elsewhere.
    - ``close()``: stop what ``start`` started; called however the run ends.

    The client keeps each chunk's points as they come and writes the folder in the fixed point order, so the
    metric files are those of a one-process run.
    """


# -- presentation -----------------------------------------------------------------


@hookspec(firstresult=True)
def causalab_run_html(run: Any) -> str | None:
    """Return HTML that shows ``run`` (a ``LoadedRun``) inline in a notebook, or None (causalab-report's).

    Called by ``LoadedRun._repr_html_``: the run's heatmaps, rows and provenance, with nothing fetched from a
    network; a run kept in memory (``run(out=None)``) as well as a folder. Core shows a plain summary table
    where no plugin answers.
    """


@hookspec(firstresult=True)
def causalab_run_figure(run: Any, metric: str | None) -> Any:
    """Return a matplotlib ``Figure`` of ``metric`` over ``run``'s sweep (default: its first metric), or None.

    Called by ``LoadedRun.plot``; the figure is not saved anywhere (``causalab plot`` saves one per metric).
    """
