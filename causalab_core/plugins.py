"""The plugin registry: entry-point loading, and the named components plugins provide.

Every plugin, this project's own and a third party's, loads the same way:
from the ``causalab`` entry-point group (plus ``extra`` objects a caller
passes, as tests do). Hook specs and their markers are in :mod:`causalab_core.hookspecs`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy

from causalab_core.errors import PluginError
from causalab_core.hookspecs import PROJECT
from causalab_core.digests import distribution_digest

# Which kind each registration hook provides.
KIND_HOOKS = {
    "engine": "causalab_engines",
    "position": "causalab_position_resolvers",
    "featurizer": "causalab_featurizers",
    "metric": "causalab_metrics",
    "causal_model": "causalab_causal_models",
}


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin, as `causalab plugins` lists it."""

    name: str
    distribution: str
    version: str
    hooks: tuple[str, ...]
    digest: str
    module: ModuleType


class Registry:
    """Loaded plugins and the named components they provide, by kind."""

    def __init__(self, pm: pluggy.PluginManager, plugins: list[PluginInfo]):
        self.pm = pm
        self.plugins = plugins
        self._components: dict[str, dict[str, tuple[type, PluginInfo]]] = {}
        self.clashes: dict[tuple[str, str], list[str]] = {}
        """(kind, name) -> the distributions that each offer it: loaded, listed, refused only where used."""
        by_module = {p.module: p for p in plugins}
        for kind, hook_name in KIND_HOOKS.items():
            found: dict[str, tuple[type, PluginInfo]] = {}
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                owner = by_module[impl.plugin]
                for cls in impl.function() or ():
                    name = getattr(cls, "name", None)
                    if not isinstance(name, str) or not name:
                        raise PluginError(
                            f"{kind} class {cls.__qualname__} from {owner.distribution} has no `name`"
                        )
                    if name in found or (kind, name) in self.clashes:
                        owners = self.clashes.setdefault((kind, name), [found.pop(name)[1].distribution]
                                                         if name in found else [])
                        owners.append(owner.distribution)
                        continue
                    found[name] = (cls, owner)
            self._components[kind] = found

    def names(self, kind: str) -> list[str]:
        return sorted(self._components[kind])

    def get(self, kind: str, name: str, where: str = "") -> type:
        """The class registered under ``name``, or a one-line error listing what is installed."""
        try:
            return self._components[kind][name][0]
        except KeyError:
            pass
        at = f" at {where}" if where else ""
        if (kind, name) in self.clashes:
            both = " and by ".join(self.clashes[kind, name])
            raise PluginError(f"{kind} name {name!r}{at} is provided twice: by {both}; uninstall one of them")
        known = ", ".join(self.names(kind)) or "none"
        raise PluginError(f"unknown {kind} {name!r}{at}; installed: {known}")

    def provider(self, kind: str, name: str) -> PluginInfo:
        return self._components[kind][name][1]

    def components(self, kind: str) -> dict[str, type]:
        return {name: cls for name, (cls, _) in sorted(self._components[kind].items())}

    def model_source(self, key: str, revision: str | None) -> Any:
        return self.pm.hook.causalab_model_source(key=key, revision=revision)

    def combined_digest(self) -> str:
        """One sha256 over core's and every loaded plugin's name, version and digest."""
        lines = sorted(f"{p.distribution} {p.version} {p.digest}" for p in self.distributions())
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()

    def distributions(self) -> list[PluginInfo]:
        """Core and each loaded plugin's distribution, once each."""
        seen: dict[str, PluginInfo] = {}
        seen["causalab-core"] = core_info()
        for p in self.plugins:
            seen.setdefault(p.distribution, p)
        return [seen[k] for k in sorted(seen)]


@functools.cache
def core_info() -> PluginInfo:
    import causalab_core

    return PluginInfo(
        name="core",
        distribution="causalab-core",
        version=_version("causalab-core"),
        hooks=(),
        digest=distribution_digest("causalab-core", causalab_core),
        module=causalab_core,
    )


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def new_plugin_manager() -> pluggy.PluginManager:
    from causalab_core import hookspecs

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def build_registry(extra: tuple[Any, ...] = (), blocked: tuple[str, ...] = ()) -> Registry:
    """Load the entry-point plugins and ``extra`` plugin objects."""
    pm = new_plugin_manager()
    for name in blocked:
        pm.set_blocked(name)
    infos: list[PluginInfo] = []
    refuse_shared_entry_points()
    pm.load_setuptools_entrypoints(PROJECT)
    for plugin, dist in pm.list_plugin_distinfo():
        name = pm.get_name(plugin)
        infos.append(_info(pm, name, plugin, dist.metadata["name"]))
    for i, plugin in enumerate(extra):
        name = getattr(plugin, "__name__", f"extra-{i}")
        pm.register(plugin, name=name)
        infos.append(_info(pm, name, plugin, getattr(plugin, "DISTRIBUTION", name)))
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from None
    return Registry(pm, infos)


def refuse_shared_entry_points() -> None:
    """Two distributions whose ``causalab`` entry points share a name: pluggy would load one of them
    silently and the other would seem not installed. One line naming both, before anything loads."""
    owners: dict[str, set[str]] = {}
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == PROJECT:
                owners.setdefault(ep.name, set()).add(dist.metadata["name"])
    for name, dists in sorted(owners.items()):
        if len(dists) > 1:
            raise PluginError(f"entry point {name!r} of group {PROJECT!r} is declared by both "
                              f"{' and '.join(sorted(dists))}: only one of them could load; uninstall one")


def _info(pm: pluggy.PluginManager, name: str, plugin: Any, dist: str) -> PluginInfo:
    hooks = tuple(sorted(h.name for h in pm.get_hookcallers(plugin) or ()))
    digest = distribution_digest(dist, plugin if isinstance(plugin, ModuleType) else None)
    return PluginInfo(name, dist, _version(dist), hooks, digest, plugin)


@functools.cache
def registry() -> Registry:
    """The process-wide registry, built on first use."""
    return build_registry()


def installed_causalab() -> dict[str, dict[str, str]]:
    """This machine's causalab distributions with their versions and source digests.

    A remote engine's block calls this on the server, so the client can compare
    the server's installed copy of core and plugins with its own.
    """
    return {p.distribution: {"version": p.version, "digest": p.digest} for p in registry().distributions()}
