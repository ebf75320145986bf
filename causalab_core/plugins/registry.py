"""The plugin registry: entry-point loading, and the named components plugins provide.

Every plugin, this project's own and a third party's, loads the same way:
from the ``causalab`` entry-point group (plus ``extra`` objects a caller
passes, as tests do). Hook specs and their markers are in :mod:`causalab_core.plugins.hookspecs`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import pluggy

from causalab_core.errors import CausalabError, MissingPlugin, PluginError, clip
from causalab_core.plugins.hookspecs import PROJECT
from causalab_core.plugins.digests import distribution_digest

# Which kind each registration hook provides.
KIND_HOOKS = {
    "engine": "causalab_engines",
    "position": "causalab_position_resolvers",
    "featurizer": "causalab_featurizers",
    "metric": "causalab_metrics",
    "intervention": "causalab_interventions",
    "causal_model": "causalab_causal_models",
}
# How a failure names each kind.
KIND_WORDS = {"engine": "engine", "position": "position resolver", "featurizer": "featurizer",
              "metric": "metric", "intervention": "intervention", "causal_model": "causal model"}


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

    def __init__(self, pm: pluggy.PluginManager, plugins: list[PluginInfo], failed: tuple[str, ...] = ()):
        self.pm = pm
        self.plugins = plugins
        self.failed = failed
        """One line per entry-point plugin that failed to load: a run stops on it only where a component it
        names is missing (the broken plugin may have provided it); any other run goes on, warned."""
        self._components: dict[str, dict[str, tuple[type, PluginInfo]]] = {}
        self.clashes: dict[tuple[str, str], list[str]] = {}
        """(kind, name) -> the distributions that each offer it: loaded, listed, refused only where used."""
        by_module = {p.module: p for p in plugins}
        for kind, hook_name in KIND_HOOKS.items():
            found: dict[str, tuple[type, PluginInfo]] = {}
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                owner = by_module[impl.plugin]
                with blamed(f"plugin {owner.name!r} of {owner.distribution}", f"in its {hook_name} hook"):
                    classes = list(impl.function() or ())
                for cls in classes:
                    name = getattr(cls, "name", None)
                    if not isinstance(name, str) or not name:
                        raise PluginError(
                            f"{kind} class {getattr(cls, '__qualname__', repr(cls))} from {owner.distribution} "
                            "has no `name`"
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
            raise MissingPlugin(f"{kind} name {name!r}{at} is provided twice: by {both}; uninstall one of them")
        known = ", ".join(self.names(kind)) or "none"
        raise MissingPlugin(f"unknown {kind} {name!r}{at}{self.failed_note()}; installed: {known}")

    def failed_note(self) -> str:
        """What to add to a missing component's line where a plugin failed to load: it may have provided it."""
        return "".join(f"; {line}, and may provide it" for line in self.failed)

    def provider(self, kind: str, name: str) -> PluginInfo:
        return self._components[kind][name][1]

    def who(self, kind: str, name: str) -> str:
        """A component as a plugin's error names it: ``metric 'brier' of causalab-example``."""
        return f"{kind} {name!r} of {self.provider(kind, name).distribution}"

    def implementers(self, hook: str) -> str:
        """The plugins that implement ``hook``, as an error names them (the one that answered is among them)."""
        owners = {p.module: p for p in self.plugins}
        names = [f"plugin {owners[i.plugin].name!r} of {owners[i.plugin].distribution}" if i.plugin in owners
                 else f"plugin {i.plugin_name!r}" for i in getattr(self.pm.hook, hook).get_hookimpls()]
        return names[0] if len(names) == 1 else "one of " + ", ".join(names)

    def components(self, kind: str) -> dict[str, type]:
        return {name: cls for name, (cls, _) in sorted(self._components[kind].items())}

    def model_source(self, key: str, revision: str | None) -> Any:
        from causalab_core.plugins import returns

        with self.boundary():
            found = self.pm.hook.causalab_model_source(key=key, revision=revision)
        return returns.model_source(found, self.implementers("causalab_model_source"), key)

    @contextmanager
    def boundary(self) -> Iterator[None]:
        """Where core calls plugin code: an exception a plugin raised (not a deliberate `CausalabError`)
        becomes one `PluginError` line naming the component and its distribution, the original chained
        for ``--verbose``. An exception with no plugin code on its traceback is core's, and passes."""
        try:
            yield
        except CausalabError:
            raise
        except (Exception, SystemExit) as exc:  # a plugin's sys.exit() must not end a run silently
            try:
                culprit = self.blame(exc.__traceback__)
            except Exception:  # noqa: BLE001 - naming the plugin must never hide the error itself
                culprit = None
            if culprit is None:
                raise
            who, where = culprit
            raise PluginError(f"{who} failed in {where}: {_exception_line(exc)}") from exc

    def blame(self, tb: TracebackType | None) -> tuple[str, str] | None:
        """Whose code a traceback went through, innermost first, and where: a component's method (its kind,
        name and distribution), else a hook implementation, else any function of a plugin's package."""
        frames = []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        frames.reverse()
        classes = {cls: (kind, name, info) for kind, found in self._components.items()
                   for name, (cls, info) in found.items()}
        for frame in frames:
            obj = _first_argument(frame)  # a method's self (or cls)
            cls = obj if isinstance(obj, type) else type(obj)
            # A method of the component (not core code holding a class in a variable named `cls`).
            method = _method_name(cls, frame.f_code) if obj is not None and cls in classes else None
            if method is not None:
                kind, name, info = classes[cls]
                return f"{KIND_WORDS[kind]} {name!r} of {info.distribution}", method
        by_module = {p.module: p for p in self.plugins}
        hooks = {impl.function.__code__: (by_module[plugin], caller.name) for plugin in by_module
                 for caller in self.pm.get_hookcallers(plugin) or ()
                 for impl in caller.get_hookimpls() if impl.plugin is plugin and hasattr(impl.function, "__code__")}
        packages = {p.module.__name__.partition(".")[0]: p for p in self.plugins
                    if isinstance(p.module, ModuleType) and not p.module.__name__.startswith("causalab_core")}
        for frame in frames:
            if frame.f_code in hooks:
                info, hook = hooks[frame.f_code]
                return f"plugin {info.name!r} of {info.distribution}", f"its {hook} hook"
        for frame in frames:
            info = packages.get(str(frame.f_globals.get("__name__", "")).partition(".")[0])
            if info is not None:
                return f"plugin {info.name!r} of {info.distribution}", frame.f_code.co_name
        return None

    def distributions(self) -> list[PluginInfo]:
        """Core and each loaded plugin's distribution, once each."""
        seen: dict[str, PluginInfo] = {}
        seen["causalab-core"] = core_info()
        for p in self.plugins:
            seen.setdefault(p.distribution, p)
        return [seen[k] for k in sorted(seen)]


@functools.cache
def core_info() -> PluginInfo:
    causalab_core = sys.modules[__name__.partition(".")[0]]  # the package itself: loaded before any module of it
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
    from causalab_core.plugins import hookspecs

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
    failed = []
    for dist in importlib.metadata.distributions():  # as pluggy's load_setuptools_entrypoints, one at a time
        for ep in dist.entry_points:
            if ep.group != PROJECT or pm.get_plugin(ep.name) or pm.is_blocked(ep.name):
                continue  # one distribution found twice on the path loads once
            owner = dist.metadata["name"]
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as exc:  # an import error, a bad hook signature: that plugin's line, not every run's
                failed.append(f"plugin {ep.name!r} of {owner} failed to load ({ep.value}): {_exception_line(exc)}")
                continue
            infos.append(_info(pm, ep.name, plugin, owner))
    for i, plugin in enumerate(extra):
        name = getattr(plugin, "__name__", f"extra-{i}")
        if pm.has_plugin(name):  # a module named like an installed plugin's entry point (metrics.py): its own key
            name = f"{name} (extra {i})"
        try:
            pm.register(plugin, name=name)
        except ValueError as exc:  # the same object twice: pluggy's message dumps every plugin
            raise PluginError(f"extra plugin {name!r} is registered already ({type(plugin).__name__} "
                              f"{getattr(plugin, '__name__', plugin)!r} given twice, or installed too)") from exc
        infos.append(_info(pm, name, plugin, getattr(plugin, "DISTRIBUTION", name)))
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(str(exc)) from None
    return Registry(pm, infos, tuple(failed))


def _first_argument(frame: Any) -> Any:
    """The value of a frame's first parameter (``self`` or ``cls`` of a method), or None."""
    code = frame.f_code
    if code.co_argcount:
        return frame.f_locals.get(code.co_varnames[0])
    if code.co_flags & inspect.CO_VARARGS:  # def method(*args): self is args[0]
        args = frame.f_locals.get(code.co_varnames[code.co_kwonlyargcount])
        return args[0] if isinstance(args, tuple) and args else None
    return None


def _method_name(cls: type, code: Any) -> str | None:
    """The name under which ``cls`` has (or inherits) a method (plain, class, static or property) of this ``code``."""
    for klass in cls.__mro__:
        for key, attr in vars(klass).items():
            fn = getattr(attr, "fget", None) or getattr(attr, "__func__", attr)
            if getattr(fn, "__code__", None) is code:
                return key
    return None


def _exception_line(exc: BaseException) -> str:
    """``Type: message`` on one line, the message cut as a plugin's own text is."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {clip(text)}" if text else type(exc).__name__


@contextmanager
def blamed(who: str, how: str) -> Iterator[None]:
    """A plugin call whose owner is known: any exception but a deliberate `CausalabError` is one line."""
    try:
        yield
    except CausalabError:
        raise
    except Exception as exc:
        raise PluginError(f"{who} failed {how}: {_exception_line(exc)}") from exc


def command_plugins() -> list[tuple[str, str, Any]]:
    """(name, distribution, module) of each entry-point plugin that adds commands, loading no other plugin:
    a module is imported only where its source names the ``causalab_commands`` hook (or where it has
    no source to read), so `causalab --help` starts without torch and the plugins that import it."""
    refuse_shared_entry_points()
    found, seen = [], set()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != PROJECT or ep.name in seen:  # one distribution found twice on the path loads once
                continue
            seen.add(ep.name)
            source = None if ep.attr else _module_source(ep.module)
            if source is not None and "causalab_commands" not in source:
                continue
            with blamed(f"plugin {ep.name!r} of {dist.metadata['name']}", f"to load ({ep.value})"):
                module = ep.load()
            if getattr(module, "causalab_commands", None) is not None:
                found.append((ep.name, dist.metadata["name"], module))
    return found


def _module_source(name: str) -> str | None:
    """The source text of module ``name`` without importing it (nor its parent packages), where it has one."""
    top, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        paths = [Path(spec.origin)] if spec.origin else []
    else:
        paths = [Path(base, *rest.split(".")).with_suffix(".py") for base in spec.submodule_search_locations or ()]
        paths += [Path(base, *rest.split("."), "__init__.py") for base in spec.submodule_search_locations or ()]
    for path in paths:
        if path.suffix == ".py" and path.is_file():
            return path.read_text(encoding="utf-8", errors="replace")
    return None


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
    """The process-wide registry, built on first use; a plugin that failed to load is a warning line on stderr
    (a run that names a component missing because of it stops, naming it)."""
    built = build_registry()
    for line in built.failed:
        print(f"warning: {line}; what uses none of its components goes on", file=sys.stderr)
    return built


def installed_causalab() -> dict[str, dict[str, str]]:
    """This machine's causalab distributions with their versions and source digests.

    A remote engine's block calls this on the server, so the client can compare
    the server's installed copy of core and plugins with its own.
    """
    return {p.distribution: {"version": p.version, "digest": p.digest} for p in registry().distributions()}
