"""The Python API the CLI is built on: validate, plan, run."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from hashlib import sha256
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from causalab_core.document.causal import rows_digest
from causalab_core.compiler import compile_document
from causalab_core.compiler.circuits import computation_graph
from causalab_core.results.circuit import find_circuit
from causalab_core.results.confirm import confirm, run_estimate
from causalab_core.plugins import returns
from causalab_core.plugins.contracts import HERE, Remote
from causalab_core.document import Document, LoadedDocument, load_document
from causalab_core.errors import EngineError, OutputError, clip, echo, shorten
from causalab_core.ir import Plan
from causalab_core.ir.graph import Graph
from causalab_core.plugins.registry import Registry, registry as default_registry
from causalab_core.plugins.provenance import run_digests, run_record
from causalab_core.results.folder import check_out, write_folder
from causalab_core.results.resume import (
    Store, chunk_size, has_store, open_store, ordered_files, plan_digest, point_files, store_path, was_forced,
)
from causalab_core.results.score import MetricResult, dump, output_files, score
from causalab_core.results.table import LoadedRun, from_files
from causalab_core.results.view import notebook_progress


DocumentLike = str | Path | dict[str, Any] | Document
"""A document as the API takes it: a file path, JSON text, a dict, or a ``Document`` built from the schema's models."""


def validate(document: DocumentLike, *, rows: Any = None, data_root: str | Path | None = None,
             registry: Registry | None = None) -> LoadedDocument:
    """Load a document and its rows and check them against the installed plugins and the model's shell.

    Everything `plan` refuses, `validate` refuses: it compiles (tokenizer, config, no weights).
    ``rows`` (a pandas DataFrame or a list of dicts) replaces the document's data.
    """
    reg = registry or default_registry()
    with reg.boundary():
        loaded = load_document(document, data_root, reg, rows)
        compile_document(loaded, reg)
    return loaded


def plan(document: DocumentLike, *, rows: Any = None, data_root: str | Path | None = None,
         registry: Registry | None = None) -> Plan:
    """Compile a document into a plan without loading weights (``rows`` as for :func:`validate`)."""
    reg = registry or default_registry()
    with reg.boundary():
        return compile_document(load_document(document, data_root, reg, rows), reg)


def graph(model: str | Path, *, revision: str | None = None, registry: Registry | None = None) -> Graph:
    """A model's computation graph as circuit work defines it (heads' q/k/v inputs, MLPs, logits), from its
    config alone: ``graph("causalab-toy/weekdays")`` (see :mod:`causalab_core.ir.graph`)."""
    reg = registry or default_registry()
    with reg.boundary():
        return computation_graph(str(model), revision, reg)


def featurizer_classes(plan: Plan, registry: Registry) -> dict[str, type]:
    """What an engine is handed: featurizer kind -> class, for every kind the plan's writes use, and
    ``intervention/<kind>`` -> class for each intervention that combines by its own ``apply``."""
    classes = {kind: registry.get("featurizer", kind) for kind in sorted({f.kind for f in plan.featurizers()})}
    for kind in sorted({iv.kind for iv in plan.interventions() if iv.combine == "custom"}):
        classes[f"intervention/{kind}"] = registry.get("intervention", kind)
    return classes


@dataclass(frozen=True, repr=False)
class RunResult(LoadedRun):
    """What a run produced: the tables ``load`` gives of its folder (kept in memory where ``out`` is None;
    ``save`` writes that folder later, byte for byte), with the plan it ran and each metric's content."""

    plan: Plan | None = None
    metrics: list[MetricResult] = field(default_factory=list)

    @property
    def out(self) -> Path | None:
        """The folder the run wrote; None for a run kept in memory."""
        return self.folder


def engine_options(cls: type, options: dict[str, Any] | None) -> Any:
    """The engine's own options, validated by its ``Options`` model: one line naming what is wrong."""
    try:
        return cls.Options.model_validate(options or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        known = ", ".join(cls.Options.model_fields) or "none"
        if not error["loc"]:  # a model validator: about the options together, not one key
            what = clip(error["msg"].removeprefix("Value error, "))
            raise EngineError(f"--option: {what} for engine {cls.name!r} (its options: {known})") from None
        key = str(error["loc"][0])
        # A union (e.g. true, false or "auto") fails once per member: say each, and what was given.
        msgs = dict.fromkeys(e["msg"] for e in exc.errors() if e["loc"][:1] == error["loc"][:1])
        what = "unknown option" if error["type"] == "extra_forbidden" else (
            f"got {echo(error.get('input'))}: " + ", or ".join(msgs))
        raise EngineError(f"--option {key}: {what} for engine {cls.name!r} (its options: {known})") from None


def check_capabilities(cls: type, plan: Plan, remote: Remote) -> None:
    """Refuse, before any weights load, an engine that cannot run this plan."""
    needed = set(plan.requires) | ({"remote"} if remote else set())
    missing = sorted(needed - set(cls.capabilities))
    if missing:
        raise EngineError(f"engine {cls.name!r} cannot run this document: it needs {', '.join(missing)}, "
                          f"which {cls.name!r} does not support")


def run(
    document: DocumentLike,
    *,
    rows: Any = None,
    out: str | Path | None = None,
    engine: str = "hooks",
    remote: Remote = HERE,
    batch_size: int | None = None,
    device_map: str | None = None,
    data_root: str | Path | None = None,
    force: bool = False,
    options: dict[str, Any] | None = None,
    registry: Registry | None = None,
    progress: Callable[[Plan], Callable[[str], None] | None] | None = None,
    resume: bool = False,
    points_done: Callable[[int, int], None] | None = None,
    workers: int | None = None,
    ray_address: str | None = None,
) -> RunResult:
    """Compile, execute on ``engine``, score, and (with ``out``) write the output folder.

    ``options``: the engine's own options (its ``Options`` model), e.g.
    ``{"allow_skew": True}`` for ``ndif``; validated before anything else runs.
    ``remote``: one of the cases named in :mod:`causalab_core.plugins.contracts`:
    ``HERE`` (False), ``SIMULATED`` ("local"), ``CONFIGURED_HOST`` (True) or a host URL.
    With ``out``, the points run in chunks and each completed point is kept beside ``out``
    (:mod:`causalab_core.results.resume`); ``resume`` runs only the points an interrupted run did not finish.
    ``points_done(done, total)`` is called before the first chunk and after each one.
    ``progress(plan)`` returns a callback called with each step's path as it finishes; by default, in a Jupyter
    kernel, a progress bar (``tqdm.auto``), and nothing anywhere else.
    ``rows`` (a pandas DataFrame or a list of dicts) replaces the document's data. With ``out`` None the results
    stay in memory: the returned ``RunResult`` holds the tables ``load`` gives, and ``save(out)`` writes the
    folder a run with ``out`` writes.
    ``workers`` / ``ray_address`` (with ``out``): the chunks run on that many workers of a local Ray cluster, or on
    the cluster at that address, through the installed chunk runner (``hookspecs.causalab_chunk_runner``).
    An exception inside plugin code (an engine, a featurizer, a metric...) is one `PluginError` naming it.
    """
    reg = registry or default_registry()
    if progress is None and points_done is None:
        progress = notebook_progress()
    with reg.boundary():
        return _run(reg, document, rows=rows, out=out, engine=engine, remote=remote, batch_size=batch_size,
                    device_map=device_map, data_root=data_root, force=force, options=options,
                    progress=progress, resume=resume, points_done=points_done, workers=workers,
                    ray_address=ray_address)


def _run(reg: Registry, document: DocumentLike, *, rows: Any, out: str | Path | None, engine: str, remote: Remote,
         batch_size: int | None, device_map: str | None, data_root: str | Path | None, force: bool,
         options: dict[str, Any] | None, progress: Callable[[Plan], Callable[[str], None] | None] | None,
         resume: bool, points_done: Callable[[int, int], None] | None, workers: int | None = None,
         ray_address: str | None = None) -> RunResult:
    out_path = Path(out) if out is not None else None
    loaded = load_document(document, data_root, reg, rows)
    if resume and out_path is None:
        raise OutputError("--resume needs --out: the folder whose interrupted run to finish")
    if resume and not has_store(out_path):
        raise OutputError(f"--out {shorten(str(out_path))}: nothing to resume (no interrupted run of it left "
                          f"{store_path(out_path.resolve()).name})")
    # Resuming a --force run (the line it was stopped with says to run --resume) replaces what it would have.
    force = force or (resume and was_forced(out_path))
    if out_path is not None:
        check_out(out_path, force=force, protected=loaded.read_paths())
    engine_cls = reg.get("engine", engine, "--engine")
    chosen = engine_options(engine_cls, options)
    chunks = chunk_runner(reg, workers, ray_address, out_path)
    remote = remote or engine_cls.runs_remote
    built = compile_document(loaded, reg)
    check_capabilities(engine_cls, built, remote)
    runner = engine_cls(device_map=device_map, options=chosen)
    classes = featurizer_classes(built, reg)
    on_step = progress(built) if progress else None

    def record_for(details: dict[str, Any]) -> dict[str, Any]:
        record = run_record(reg, engine=engine, remote=remote, batch_size=batch_size, plan=built, details=details)
        # Which rows were scored (a causal model's record says already): `causalab compare` tells data apart by it.
        record.setdefault("data", {"rows": len(loaded.rows), "sha256": rows_digest(loaded.rows)})
        if (estimate := run_estimate(built)) is not None:
            record["estimate"] = estimate
        return record

    def execute(plan: Plan) -> tuple[list[MetricResult], dict[str, Any], dict[str, bytes]]:
        """Run ``plan`` on the engine: its metrics, its run record, its output files."""
        outputs = returns.outputs(
            runner.execute(plan, featurizers=classes, remote=remote, batch_size=batch_size, progress=on_step),
            reg.who("engine", engine), [step.path for step in plan.steps()])
        metrics, record = score(plan, outputs, reg), record_for(runner.details)
        return metrics, record, output_files(plan, metrics, record, outputs)

    if out_path is None:
        metrics, record, files = execute(built)
    else:
        # Everything that decides the bytes: a resumed run must be the run that was interrupted.
        identity = {"document": sha256(dump(built.document)).hexdigest(), "plan": plan_digest(built),
                    "causalab": run_digests(reg, built, engine)["distributions"], "engine": engine, "batch size": batch_size,
                    "device map": device_map, "engine options": chosen.model_dump(mode="json")}
        store = open_store(out_path, identity, resume=resume, force=force)
        runner.details.update(store.state["details"])  # resumed: what the engine said before (a remote one's jobs)
        runner.store = store  # where an engine that sends jobs elsewhere keeps their ids (ndif)
        try:
            if chunks is not None:  # before any point runs: a cluster that cannot start is one line
                chunks.start(built, registry=reg, engine=engine, options=chosen.model_dump(mode="json"),
                             batch_size=batch_size, device_map=device_map)
            run_kept(built, store, execute, lambda: runner.details, points_done, chunks)
        except BaseException:
            if not store.done() and not store.remote_jobs():  # nothing kept, nothing to resume: no trace of the run
                store.remove()
            raise
        finally:
            if chunks is not None:
                chunks.close()
        record = record_for(store.state["details"])
        files = ordered_files(built, store, {"document.json": dump(built.document), "run.json": dump(record)})
        metrics = [MetricResult(point, m.name, json.loads(files[f"{point.name}/{m.name}.json" if point.name
                                                                 else f"{m.name}.json"]))
                   for point in built.points for m in point.metrics]
    if built.document.get("estimate", {}).get("confirm"):  # the top estimated points patched for real
        metrics, files, record = confirm(built, metrics, files, record, execute)
    if built.document.get("circuit"):  # a circuit chosen from the edge scores, and its faithfulness
        metrics, files, record = find_circuit(built, metrics, files, record, execute, lambda doc: compile_document(
            load_document(doc, data_root, reg, list(loaded.rows)), reg))
    if loaded.generated:  # the rows a causal model generated, as the run used them
        files["data.jsonl"] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in loaded.rows).encode()
    if out_path is not None:
        write_folder(out_path, files, force, loaded.read_paths())
        store.remove()
    tables = replace(from_files(files, out_path), reads=tuple(loaded.read_paths()))
    return RunResult(**{f.name: getattr(tables, f.name) for f in fields(LoadedRun)}, plan=built, metrics=metrics)


def chunk_runner(reg: Registry, workers: int | None, address: str | None, out: Path | None) -> Any:
    """The installed chunk runner for ``--workers`` / ``--ray-address``, or None where neither is given."""
    if workers is None and address is None:
        return None
    flag = "--workers" if workers is not None else "--ray-address"
    if workers is not None and workers < 1:
        raise EngineError(f"--workers must be 1 or more, got {workers}")
    if out is None:
        raise OutputError(f"{flag} needs --out: the chunks the workers finish are kept beside it")
    runner = returns.chunk_runner(reg.pm.hook.causalab_chunk_runner(workers=workers, address=address),
                                  reg.implementers("causalab_chunk_runner"))
    if runner is None:
        raise EngineError(f"{flag} needs a chunk runner plugin, and none is installed (pip install causalab-ray)")
    return runner


def run_kept(plan: Plan, store: Store, execute: Callable, details: Callable[[], dict[str, Any]],
             points_done: Callable[[int, int], None] | None, chunks: Any = None) -> None:
    """Run the points ``store`` does not hold yet, a chunk at a time, keeping each completed point.

    ``chunks``: a chunk runner (``hookspecs.causalab_chunk_runner``) that runs the chunks elsewhere, several at a
    time, and hands back each one's files as ``execute`` makes them; it sizes the chunks and keeps in ``details()``
    what ran where. Its points are kept as each chunk comes back, in whatever order."""
    todo = [i for i in range(len(plan.points)) if i not in store.done()]
    size = chunk_size(len(plan.points)) if chunks is None else chunks.chunk_size(len(plan.points))
    if any(s.kind == "run" and s.estimate_steps for point in plan.points for s in point.steps):
        size = len(plan.points)  # integrated gradients move every estimated point along one path: one chunk
    if points_done:
        points_done(len(plan.points) - len(todo), len(plan.points))  # what an interrupted run already kept
    done, cut = len(plan.points) - len(todo), [todo[start:start + size] for start in range(0, len(todo), size)]
    ran = ((chunk, execute(replace(plan, points=tuple(plan.points[i] for i in chunk)))[2]) for chunk in cut) \
        if chunks is None else chunks.run(plan, cut, details())
    for chunk, files in ran:
        for i in chunk:
            store.keep(i, point_files(plan.points[i], files), details())
        done += len(chunk)
        if points_done:
            points_done(done, len(plan.points))
