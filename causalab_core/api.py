"""The Python API the CLI is built on: validate, plan, run."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from causalab_core.compiler import compile_document
from causalab_core.contracts import HERE, Remote
from causalab_core.document import LoadedDocument, load_document
from causalab_core.errors import EngineError
from causalab_core.ir import Plan
from causalab_core.plugins import Registry, registry as default_registry
from causalab_core.provenance import run_record
from causalab_core.output import check_out, write_folder
from causalab_core.results import MetricResult, output_files, score


def validate(path: str | Path, *, data_root: str | Path | None = None, registry: Registry | None = None) -> LoadedDocument:
    """Load a document and its rows and check them against the installed plugins and the model's shell.

    Everything `plan` refuses, `validate` refuses: it compiles (tokenizer, config, no weights).
    """
    reg = registry or default_registry()
    loaded = load_document(path, data_root, reg)
    compile_document(loaded, reg)
    return loaded


def plan(path: str | Path, *, data_root: str | Path | None = None, registry: Registry | None = None) -> Plan:
    """Compile a document into a plan without loading weights."""
    reg = registry or default_registry()
    return compile_document(load_document(path, data_root, reg), reg)


def featurizer_classes(plan: Plan, registry: Registry) -> dict[str, type]:
    """Featurizer kind -> class, for every kind the plan's writes use: what an engine is handed."""
    return {kind: registry.get("featurizer", kind) for kind in sorted({f.kind for f in plan.featurizers()})}


@dataclass(frozen=True)
class RunResult:
    """What a run produced (and wrote, when ``out`` was given)."""

    plan: Plan
    metrics: list[MetricResult]
    run: dict[str, Any]
    files: dict[str, bytes]
    out: Path | None


def engine_options(cls: type, options: dict[str, Any] | None) -> Any:
    """The engine's own options, validated by its ``Options`` model: one line naming what is wrong."""
    try:
        return cls.Options.model_validate(options or {})
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        known = ", ".join(cls.Options.model_fields) or "none"
        what = "unknown option" if error["type"] == "extra_forbidden" else error["msg"]
        raise EngineError(f"--option {key}: {what} for engine {cls.name!r} (its options: {known})") from None


def check_capabilities(cls: type, plan: Plan, remote: Remote) -> None:
    """Refuse, before any weights load, an engine that cannot run this plan."""
    needed = set(plan.requires) | ({"remote"} if remote else set())
    missing = sorted(needed - set(cls.capabilities))
    if missing:
        raise EngineError(f"engine {cls.name!r} cannot run this document: it needs {', '.join(missing)}, "
                          f"which {cls.name!r} does not support")


def run(
    path: str | Path,
    *,
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
) -> RunResult:
    """Compile, execute on ``engine``, score, and (with ``out``) write the output folder.

    ``options``: the engine's own options (its ``Options`` model), e.g.
    ``{"allow_skew": True}`` for ``ndif``; validated before anything else runs.
    ``remote``: one of the cases named in :mod:`causalab_core.contracts`:
    ``HERE`` (False), ``SIMULATED`` ("local"), ``CONFIGURED_HOST`` (True) or a host URL.
    """
    reg = registry or default_registry()
    out_path = Path(out) if out is not None else None
    loaded = load_document(path, data_root, reg)
    if out_path is not None:
        check_out(out_path, force=force, protected=loaded.read_paths())
    engine_cls = reg.get("engine", engine, "--engine")
    chosen = engine_options(engine_cls, options)
    remote = remote or engine_cls.runs_remote
    built = compile_document(loaded, reg)
    check_capabilities(engine_cls, built, remote)
    runner = engine_cls(device_map=device_map, options=chosen)
    outputs = runner.execute(built, featurizers=featurizer_classes(built, reg), remote=remote, batch_size=batch_size,
                             progress=progress(built) if progress else None)
    metrics = score(built, outputs, reg)
    record = run_record(reg, engine=engine, remote=remote, batch_size=batch_size, plan=built,
                        details=runner.details)
    files = output_files(built, metrics, record, outputs)
    if loaded.generated:  # the rows a causal model generated, as the run used them
        files["data.jsonl"] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in loaded.rows).encode()
    if out_path is not None:
        write_folder(out_path, files, force, loaded.read_paths())
    return RunResult(built, metrics, record, files, out_path)
