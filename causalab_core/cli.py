"""The `causalab` command line: run, validate, plan, table, compare, plugins, schema, env (plugins add theirs)."""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from causalab_core.errors import CausalabError

app = typer.Typer(
    name="causalab",
    help="Causal experiments on the insides of transformer language models.\n\n"
    "Write an experiment as a JSON document (see documents/README.md), check it with "
    "`causalab validate`, see what it will do with `causalab plan`, and run it with "
    "`causalab run DOC --out FOLDER`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False, soft_wrap=True)

DocumentArg = Annotated[Path, typer.Argument(help="The experiment document (JSON).", show_default=False)]
DataRoot = Annotated[Optional[Path], typer.Option(help="Folder that the document's data path is relative to (default: the document's folder).")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show the full traceback of an error.")]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like SIGINT so that the same cleanup runs."""


def _terminate(signum, frame):
    raise Terminated


@contextmanager
def reported(verbose: bool):
    """Turn a causalab error into one line on stderr and its exit code; an interruption into `Interrupted`."""
    try:
        yield
    except KeyboardInterrupt as exc:
        err.print("Interrupted", markup=False)
        raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
    except CausalabError as exc:
        if verbose:
            err.print(traceback.format_exc(), markup=False)
            if getattr(exc, "server_traceback", None):
                err.print("The server's traceback:\n" + exc.server_traceback, markup=False)
        err.print(exc.one_line(), markup=False)
        raise typer.Exit(exc.exit_code) from None


def engine_options(pairs: list[str]) -> dict:
    """``KEY=VALUE`` pairs as a dict, each value JSON where it parses and text otherwise."""
    from causalab_core.errors import EngineError

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise EngineError(f"--option {pair!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def _progress_bar(progress: Progress) -> Callable:
    def start(plan) -> Callable[[str], None]:
        task = progress.add_task("running", total=len(plan.steps()))
        return lambda path: progress.update(task, advance=1, description=path)

    return start


def _points_line() -> Callable[[int, int], None]:
    """Where no progress bar is drawn (a log file, CI): one line after each chunk of points.

    The first call says how many points an interrupted run already kept; a run
    done in one chunk says nothing."""
    import time

    start: list[float] = []

    def report(done: int, total: int) -> None:
        if not start:
            start.extend((done, time.monotonic()))
            return
        ran, seconds = done - start[0], time.monotonic() - start[1]
        if done == total and ran == total - start[0] and len(start) == 2:
            return
        start.append(done)
        left = total - done
        eta = f", about {seconds / max(ran, 1) * left:.0f} s left" if left else ""
        err.print(f"causalab: {done} of {total} points done, {left} left{eta}", highlight=False)

    return report


@app.command()
def run(
    document: DocumentArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder; must not exist or be empty (see --force).")],
    engine: Annotated[str, typer.Option(help="Engine plugin that runs the plan (see `causalab plugins`).")] = "hooks",
    batch_size: Annotated[Optional[int], typer.Option(help="Rows per forward pass (default: all rows at once).", min=1)] = None,
    device_map: Annotated[Optional[str], typer.Option(help="Passed to transformers when loading weights, e.g. cpu, cuda, auto.")] = None,
    data_root: DataRoot = None,
    force: Annotated[bool, typer.Option(help="Replace a previous causalab output folder (never a folder with other files).")] = False,
    resume: Annotated[bool, typer.Option(help="Finish an interrupted run on --out: only the points it did not complete.")] = False,
    option: Annotated[Optional[list[str]], typer.Option(help="An option of the engine, KEY=VALUE (VALUE as JSON where it parses: true, 3, \"x\"); repeatable. E.g. ndif's allow_skew=true.")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Run the chunks on N workers of a local Ray cluster on 127.0.0.1 (one model load each, --device-map per worker; plugin causalab-ray). With --ray-address: N workers there (default: one per CPU of the cluster).")] = None,
    ray_address: Annotated[Optional[str], typer.Option(help="Run the chunks on the Ray cluster at HOST:PORT instead of starting one (plugin causalab-ray).")] = None,
    verbose: Verbose = False,
) -> None:
    """Compile a document, run it on an engine, and write the output folder."""
    with reported(verbose):
        from causalab_core import api
        from causalab_core.results.confirm import poor_agreement
        from causalab_core.results.manifest import MANIFEST

        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn(), console=err, transient=True, disable=not err.is_terminal,
        ) as progress:
            result = api.run(
                document, out=out, engine=engine, batch_size=batch_size, device_map=device_map,
                data_root=data_root, force=force, options=engine_options(option or []), progress=_progress_bar(progress),
                resume=resume, points_done=None if err.is_terminal else _points_line(), workers=workers,
                ray_address=ray_address,
            )
        for rel in [*result.files, MANIFEST]:
            print(out / rel)
        if (line := poor_agreement(result.run.get("estimate"))) is not None:
            err.print(line, markup=False, highlight=False)


@app.command()
def validate(document: DocumentArg, data_root: DataRoot = None, verbose: Verbose = False) -> None:
    """Check a document and its data against the schema, the installed plugins and the model's tokenizer and config (no weights)."""
    with reported(verbose):
        from causalab_core import api

        built = api.plan(document, data_root=data_root)  # the points as compiled: `edges: "each"` sweeps the graph
        points = len(built.points)
        print(f"{document}: valid ({built.rows} rows, {points:,} point{'s' if points != 1 else ''})")


@app.command()
def plan(
    document: DocumentArg,
    data_root: DataRoot = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole plan as JSON.")] = False,
    verbose: Verbose = False,
) -> None:
    """Compile a document against a weightless shell of its model and print the plan."""
    with reported(verbose):
        from causalab_core import api
        from causalab_core.ir.render import render

        built = api.plan(document, data_root=data_root)
        # A loaded featurizer's bytes are shown by size; run.json and the plan keep their sha256.
        shown = lambda value: f"<{len(value)} bytes>" if isinstance(value, bytes) else str(value)  # noqa: E731
        print(json.dumps(built.to_dict(), indent=1, default=shown) if as_json else render(built))
        if not as_json:
            print(graph_line(built))


def graph_line(built) -> str:
    """The model's computation graph's size, or why it has none (``ir.graph``)."""
    from causalab_core.ir.graph import graph
    from transformers import AutoConfig

    try:
        g = graph(AutoConfig.from_pretrained(built.model.source, local_files_only=True))
    except ValueError as exc:
        return f"graph  none: {exc}"
    return f"graph  {g.family}: {len(g.nodes):,} nodes, {len(g.edges):,} edges (causalab graph prints them)"


@app.command("graph")
def graph_command(
    model: Annotated[str, typer.Argument(help="A model key: a checkpoint folder, a cached Hugging Face id, or a "
                                              "key a models plugin knows.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print every node and edge as JSON.")] = False,
    verbose: Verbose = False,
) -> None:
    """Print a model's computation graph (nodes: input, heads, MLPs, logits; edges into each input), from its
    config alone."""
    with reported(verbose):
        from causalab_core import api

        g = api.graph(model)
        if as_json:
            print(json.dumps({"family": g.family, "layers": g.layers, "heads": g.heads, "kv_heads": g.kv_heads,
                              "nodes": list(g.nodes), "edges": [list(e) for e in g.edges]}))
        else:
            print(f"{g!r}\nnodes  {' '.join(g.nodes[:12])}{' ...' if len(g.nodes) > 12 else ''}\n"
                  f"inputs {' '.join(dict.fromkeys(r for _, r in g.edges))}"[:2000])


@app.command()
def plugins(verbose: Verbose = False) -> None:
    """List every loaded plugin: name, distribution, version, hooks and source digest (JSON)."""
    with reported(verbose):
        from causalab_core.plugins.registry import registry

        reg = registry()
        listing = [
            {"name": p.name, "distribution": p.distribution, "version": p.version,
             "hooks": list(p.hooks), "digest": p.digest,
             "provides": {kind: [n for n in reg.names(kind) if reg.provider(kind, n) is p]
                          for kind in ("engine", "position", "featurizer", "metric", "intervention", "causal_model")
                          if any(reg.provider(kind, n) is p for n in reg.names(kind))},
             # A name two plugins offer: neither is used, and a document naming it is refused.
             **({"clashes": clashes} if (clashes := [f"{kind} {name!r} (also offered by "
                                                     f"{', '.join(d for d in dists if d != p.distribution)})"
                                                     for (kind, name), dists in sorted(reg.clashes.items())
                                                     if p.distribution in dists]) else {})}
            for p in reg.plugins
        ]
        print(json.dumps(listing, indent=2))
        for (kind, name), dists in sorted(reg.clashes.items()):
            err.print(f"warning: {kind} name {name!r} is provided by {' and by '.join(dists)}: a document naming "
                      "it is refused; uninstall one of them", markup=False)


@app.command()
def table(
    folder: Annotated[Path, typer.Argument(help="A run's output folder.", show_default=False)],
    fmt: Annotated[str, typer.Option("--format", help="csv, json (one array of records) or jsonl (JSON Lines: "
                                                      "one record a line).")] = "csv",
    summaries: Annotated[bool, typer.Option("--summaries", help="One row per point x metric (its summary) instead.")] = False,
    faithfulness: Annotated[bool, typer.Option("--faithfulness", help="A circuit search's faithfulness curve: one "
                                                                      "row per circuit size instead.")] = False,
    verbose: Verbose = False,
) -> None:
    """Print a finished run as a tidy table: one row per point x data row x metric (see causalab_core.load)."""
    with reported(verbose):
        import csv
        import sys

        from causalab_core.errors import DocumentError, echo
        from causalab_core.results.table import load

        if fmt not in ("csv", "json", "jsonl"):
            raise DocumentError(f"--format {echo(fmt)}: expected csv, json or jsonl")
        loaded = load(folder)
        if faithfulness:
            if loaded.circuit is None:
                raise DocumentError(f"--faithfulness: {echo(str(folder))} holds no circuit search (no faithfulness.json)")
            records = json.loads(loaded.files["faithfulness.json"])["curve"]
        else:
            records = loaded.records["summaries" if summaries else "rows"]
        if fmt in ("json", "jsonl"):
            from causalab_core.results.score import NOT_A_NUMBER

            def plain(record):  # strict JSON: a NaN is written as the metric files write it
                return {k: NOT_A_NUMBER[str(v)] if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf")))
                        else v for k, v in record.items()}

            def dumped(value) -> str:
                return json.dumps(value, ensure_ascii=False, allow_nan=False)

            if fmt == "jsonl":
                sys.stdout.write("".join(dumped(plain(r)) + "\n" for r in records))
            else:
                sys.stdout.write(dumped([plain(r) for r in records]) + "\n")
            return
        columns = list(dict.fromkeys(k for r in records for k in r))
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="A run's output folder.", show_default=False)],
    b: Annotated[Path, typer.Argument(help="Another run's output folder.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    verbose: Verbose = False,
) -> None:
    """Which metric files and rows differ between two runs, by how much, and which IIA rows flipped.

    Exit code 0 when the runs' metric files are identical, 1 when they differ.
    """
    with reported(verbose):
        from causalab_core.results.compare import compare as compare_runs, describe

        report = compare_runs(a, b)
        print(json.dumps(report, indent=1) if as_json else describe(report, str(a), str(b)))
    if not report["identical"]:
        raise typer.Exit(1)


@app.command()
def schema() -> None:
    """Print the JSON Schema of documents (version 2)."""
    with reported(False):
        from causalab_core.document import json_schema

        print(json.dumps(json_schema(), indent=2))


@app.command()
def env(verbose: Verbose = False) -> None:
    """Print the Python, watched package versions and causalab digests of this environment (JSON)."""
    with reported(verbose):
        from causalab_core.plugins.registry import registry
        from causalab_core.plugins.provenance import environment

        print(json.dumps(environment(registry()), indent=2))


def add_plugin_commands(app: typer.Typer) -> None:
    """Let each plugin add its commands (the ``causalab_commands`` hook); a taken name is a PluginError.

    Only the plugins whose module names the hook are loaded (`registry.command_plugins`), so listing the
    commands costs no torch; a failure inside a plugin's hook is one line naming it."""
    from causalab_core.errors import PluginError
    from causalab_core.plugins.registry import blamed, command_plugins

    def names() -> list[str]:
        return [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands] + \
            [g.name for g in app.registered_groups]

    for name, distribution, module in command_plugins():
        before = names()
        with blamed(f"plugin {name!r} of {distribution}", "in its causalab_commands hook"):
            module.causalab_commands(app=app)
        added = names()[len(before):]
        taken = [n for n in added if n in before]
        if taken:
            raise PluginError(f"{distribution} adds the command {taken[0]!r}, which causalab already has")


def _needs_plugin_commands(args: list[str]) -> bool:
    """Whether a command line may reach a plugin's command: not where it names one of causalab's own,
    which load only the plugins they use (`causalab schema` and `causalab run --help` load none)."""
    first = next((a for a in args if not a.startswith("-")), None)
    own = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}
    return first not in own


def main() -> None:
    import signal
    import sys

    # First of all: from here on SIGINT and SIGTERM end in `Interrupted` (130, 143), never a traceback.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        with reported(False):
            if _needs_plugin_commands(sys.argv[1:]):
                add_plugin_commands(app)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    try:
        app()  # each command reports inside its own `reported`
    finally:
        # The exit code is decided: a signal from here on must not replace it. At shutdown Python puts back
        # the default SIGINT action, and a late signal then killed the process (-2 in CI) instead of 130.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
