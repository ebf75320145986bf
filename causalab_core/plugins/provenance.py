"""run.json: what ran, with which versions, and a digest of every line of causalab code loaded."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import re
import sys
from typing import TYPE_CHECKING, Any

from causalab_core.plugins.digests import distribution_digest, source_digest  # noqa: F401  (where they lived before)

if TYPE_CHECKING:  # registry.py imports nothing of this module: imports run one way
    from causalab_core.plugins.registry import PluginInfo, Registry

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


def used_components(plan: Any, engine: str) -> dict[str, list[str]]:
    """The components a run uses, by kind: its engine, the position resolvers that resolved its plan, and the
    featurizers, interventions and metrics of its points."""
    used = {
        "engine": [engine],
        "position": list(plan.resolvers),
        "featurizer": sorted({f.kind for f in plan.featurizers()}),
        "intervention": sorted({i.kind for i in plan.interventions()}),
        "metric": sorted({m.kind for point in plan.points for m in point.metrics}),
    }
    return {kind: names for kind, names in used.items() if names}


def components(registry: Registry, plan: Any, engine: str) -> dict[str, dict[str, str]]:
    """Which distribution (and version) provided each component the run used: whose code made each number."""

    def provider(kind: str, name: str) -> str:
        info = registry.provider(kind, name)
        return f"{info.distribution} {info.version}"

    return {kind: {name: provider(kind, name) for name in names}
            for kind, names in used_components(plan, engine).items()}


def run_distributions(registry: Registry, plan: Any, engine: str) -> list[PluginInfo]:
    """The distributions whose code makes a run's numbers: core, and the providers of the components it uses
    (engine, and the causalab distributions the engine requires; position resolvers, featurizers,
    interventions, metrics). The one rule for a run's identity: what
    a resume and a Ray worker compare, and run.json records; a remote server compares the part of it that runs
    there, a trained featurizer's file records the part that trained it (``trained_digest``). Another plugin
    installed beside them, or changed, is not the run's: it changes none of its numbers."""
    names = {"causalab-core"} | {registry.provider(kind, name).distribution for kind, names
                                 in used_components(plan, engine).items() for name in names}
    names |= causalab_requirements(registry.provider("engine", engine).distribution)  # ndif runs nnterp's block
    return [p for p in registry.distributions() if p.distribution in names]


def causalab_requirements(distribution: str) -> set[str]:
    """The causalab distributions ``distribution`` requires (not as an extra): code an engine runs as its own."""
    try:
        requires = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return set()
    names = {re.match(r"[A-Za-z0-9._-]+", r).group().lower().replace("_", "-") for r in requires if "extra ==" not in r}
    return {n for n in names if n.startswith("causalab-")}


def digests_of(infos: list[PluginInfo]) -> dict[str, Any]:
    """One sha256 over the distributions' names, versions and source digests, and each one's version and digest."""
    found = {p.distribution: {"version": p.version, "digest": p.digest} for p in infos}
    return {"digest": combined(found), "distributions": found}


def combined(distributions: dict[str, dict[str, str]]) -> str:
    """One sha256 over ``{distribution: {version, digest}}``, in name order."""
    lines = sorted(f"{name} {d['version']} {d['digest']}" for name, d in distributions.items())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def trained_digest(run: dict[str, Any], featurizer_kind: str) -> str:
    """A trained featurizer's ``causalab``: the digest of core (the training loop) and the featurizer's
    distribution, out of run.json's record. Not the engine's: every engine trains the same bytes (and a file
    trained on one loads on another)."""
    owner = run["components"]["featurizer"][featurizer_kind].rsplit(" ", 1)[0]
    return combined({name: d for name, d in run["causalab"]["distributions"].items()
                     if name in ("causalab-core", owner)})


def run_digests(registry: Registry, plan: Any, engine: str) -> dict[str, Any]:
    """run.json's ``causalab``: the digests of the distributions the run uses (``run_distributions``)."""
    return digests_of(run_distributions(registry, plan, engine))


def arithmetic() -> dict[str, Any]:
    """What decides the last bits of this process's float arithmetic (and so of anything trained)."""
    import torch

    return {"torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled()}


def environment(registry: Registry) -> dict[str, Any]:
    """This process's Python, watched package versions and causalab digests (`causalab env`)."""
    return {"python": sys.version.split()[0], "versions": watched_versions(), "causalab": causalab_digests(registry)}


def causalab_digests(registry: Registry) -> dict[str, Any]:
    """Every loaded distribution's digests, and one over them all (`causalab env`, a server's install)."""
    return digests_of(registry.distributions())


def loaded_weights_dtype(details: dict[str, Any]) -> str | None:
    """The dtype of the weights that computed the numbers (``torch.float16``), as the engine read it off the
    loaded model (``Engine.record_loaded``), or a remote engine's ``served_dtype`` read off the served weights:
    the document's ``model.dtype`` is what was asked, this is what ran."""
    return details.get("loaded_dtype") or details.get("served_dtype")


def run_record(
    registry: Registry, *, engine: str, remote: bool | str, batch_size: int | None, plan: Any,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "engine": engine,
        "remote": remote,
        "batch_size": batch_size,
    }
    loaded_dtype = loaded_weights_dtype(details or {})
    if loaded_dtype:
        record["loaded_dtype"] = loaded_dtype
    if (details or {}).get("position_reuse"):  # whether position-level reuse ran, and who chose it
        record["position_reuse"] = details["position_reuse"]
    record["versions"] = watched_versions()
    record["causalab"] = run_digests(registry, plan, engine)
    record["components"] = components(registry, plan, engine)
    record["arithmetic"] = arithmetic()
    if plan.data:
        record["data"] = plan.data
    loaded = {f.name: f.state_digest for f in plan.featurizers() if f.state_digest}
    if loaded:
        record["loaded_featurizers"] = loaded
    from causalab_core.plugins import returns

    who = registry.implementers("causalab_provenance")
    for extra in registry.pm.hook.causalab_provenance(engine=engine, remote=remote, plan=plan,
                                                      details=details or {}):
        if returns.provenance(extra, who):
            record.update(extra)
    return record


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
