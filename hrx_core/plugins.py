"""Plugin discovery (pluggy, entry-point group ``hrx``) and engine selection.

The built-in host engine is registered through the same hooks as third-party
plugins. Each entry point is loaded on its own: one that fails to import is recorded
(``failures()``, ``hrx doctor``) and the others still load.
"""

from __future__ import annotations

import importlib.metadata as md
import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from . import hookspecs
from .compiler import CompileCache, Compiler
from .engine import Artifact, Engine, EngineStatus
from .errors import EngineNotFound, InvalidArgument, PluginError, show

if TYPE_CHECKING:
    from .device import Device

ENV_ENGINE = "HRX_ENGINE"

log = logging.getLogger("hrx.plugins")


@attrs.frozen
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    builtin: bool = False


@attrs.frozen
class PluginFailure:
    name: str
    value: str
    distribution: str
    version: str
    error: str


class Registry:
    """The plugin manager plus what was found: plugins, failures, engines, compilers."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.failures: list[PluginFailure] = []
        from .host import plugin as host_plugin

        self.pm.register(host_plugin, name="host")
        from . import __version__

        self.plugins.append(PluginInfo("host", host_plugin.__name__, "hrx-core", __version__, builtin=True))
        self._load_entry_points()
        self._engines: dict[str, Engine] | None = None
        self._compilers: dict[str, Compiler] | None = None
        self._devices: dict[tuple[Any, ...], Device] = {}
        self._lock = threading.Lock()
        self.compile_cache = CompileCache()

    def _load_entry_points(self) -> None:
        seen: set[str] = set()
        for ep in md.entry_points(group=hookspecs.PROJECT):
            if ep.name in seen or self.pm.has_plugin(ep.name):
                continue
            seen.add(ep.name)
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            try:
                obj = ep.load()
                self._register_checked(obj, ep.name)
            except Exception as exc:  # a broken plugin must not break discovery
                failure = PluginFailure(ep.name, ep.value, dist_name, version, f"{type(exc).__name__}: {exc}")
                self.failures.append(failure)
                log.warning("plugin %r (%s %s, %s) failed to load: %s; its engines, kernels and commands are missing "
                            "(hrx doctor lists it)", ep.name, dist_name, version, ep.value, failure.error)
                continue
            self.plugins.append(PluginInfo(ep.name, ep.value, dist_name, version))
        try:
            self.pm.check_pending()  # every hook implementation names a spec
        except pluggy.PluginValidationError as exc:  # pragma: no cover - _register_checked catches it per plugin
            raise PluginError(str(exc)) from exc

    def _register_checked(self, obj: object, name: str) -> None:
        """Register ``obj``; a hook implementation that names no hook spec (a misspelling)
        unregisters it again and raises PluginError naming the hook."""
        try:
            self.pm.register(obj, name=name)
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"plugin {name!r}: {exc}") from None
        unknown = sorted(hc.name for hc in self.pm.get_hookcallers(obj) or () if hc.spec is None)
        if unknown:
            self.pm.unregister(obj, name=name)
            known = ", ".join(sorted(n for n in dir(hookspecs) if n.startswith("hrx_")))
            raise PluginError(
                f"plugin {name!r} implements unknown hook{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(n) for n in unknown)} (a misspelling? the hooks are: {known})"
            )

    def register(self, obj: object, name: str) -> None:
        """Register a plugin object at run time (tests, notebooks, docs); its engines and
        compilers join the next lookups. Raises PluginError for an unknown hook or an
        engine name clash (and registers nothing then)."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a nonempty str, got {show(name)}")
        if self.pm.has_plugin(name):
            raise PluginError(f"a plugin named {name!r} is already registered")
        self._register_checked(obj, name)
        previous = self._engines, self._compilers
        self._engines = self._compilers = None
        try:
            self.engines()
            self.compilers()
        except BaseException:
            self.pm.unregister(obj, name=name)
            self._engines, self._compilers = previous
            raise
        self.plugins.append(PluginInfo(name, getattr(obj, "__name__", type(obj).__name__), "?", "?"))

    def unregister(self, name: str) -> None:
        """Remove a plugin registered with :meth:`register` (devices already open stay open)."""
        obj = self.pm.get_plugin(name) if isinstance(name, str) else None
        if obj is None or name == "host":
            raise InvalidArgument(f"name: no removable plugin named {show(name)}")
        self.pm.unregister(obj, name=name)
        self.plugins = [p for p in self.plugins if p.name != name]
        self._engines = self._compilers = None

    def engines(self) -> dict[str, Engine]:
        if self._engines is None:
            found: dict[str, Engine] = {}
            owner: dict[str, str] = {}
            # in registration order (pluggy calls them last-registered first): the
            # built-in host plugin comes first
            for impl in self.pm.hook.hrx_engines.get_hookimpls():
                result = impl.function()
                if result is not None and not isinstance(result, Sequence):
                    raise PluginError(f"plugin {impl.plugin_name!r}: hrx_engines returned {type(result).__name__}, not a list")
                for engine in result or ():
                    if not isinstance(engine, Engine):
                        raise PluginError(
                            f"plugin {impl.plugin_name!r}: hrx_engines returned {type(engine).__name__}, "
                            "not an hrx_core.engine.Engine"
                        )
                    name = getattr(engine, "name", None)
                    if not isinstance(name, str) or not name:
                        raise PluginError(f"plugin {impl.plugin_name!r}: engine {type(engine).__name__} has no name (a nonempty str)")
                    if name in found:
                        first = owner[name]
                        builtin = first == "host" and impl.plugin_name != "host"
                        if builtin and engine.replaces_builtin:
                            found[name], owner[name] = engine, impl.plugin_name
                            continue
                        hint = (" (set replaces_builtin = True on the engine class to replace the built-in one)"
                                if builtin else " (engine names are unique: rename one)")
                        raise PluginError(
                            f"engine name {name!r} is registered by plugins {first!r} and {impl.plugin_name!r}{hint}"
                        )
                    found[name], owner[name] = engine, impl.plugin_name
            self._engines = found
        return self._engines

    def compilers(self) -> dict[str, Compiler]:
        if self._compilers is None:
            found: dict[str, Compiler] = {}
            for result in self.pm.hook.hrx_compilers():
                for compiler in result or ():
                    if not isinstance(compiler, Compiler):
                        raise PluginError(f"hrx_compilers returned {type(compiler).__name__}, not a Compiler")
                    found.setdefault(compiler.target, compiler)
            self._compilers = found
        return self._compilers


_registry: Registry | None = None
_registry_lock = threading.Lock()


def registry() -> Registry:
    """The process-wide registry, created on first use."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Registry()
    return _registry


def reload() -> Registry:
    """Discover plugins again (e.g. after installing one). Open devices stay open."""
    global _registry
    with _registry_lock:
        _registry = Registry()
    return _registry


def register(plugin: object, name: str) -> None:
    """Register a plugin object (a module or any object with ``@hookimpl`` functions) in
    this process, as an ``hrx`` entry point would: for tests, notebooks and the engine
    author's guide. Raises PluginError for an unknown (misspelled) hook or an engine
    name clash, registering nothing."""
    registry().register(plugin, name)


def unregister(name: str) -> None:
    """Remove a plugin added with :func:`register`."""
    registry().unregister(name)


def plugin_manager() -> pluggy.PluginManager:
    return registry().pm


def plugins() -> list[PluginInfo]:
    return list(registry().plugins)


def failures() -> list[PluginFailure]:
    return list(registry().failures)


def engines() -> dict[str, Engine]:
    """Installed engines by name."""
    return dict(registry().engines())


def engine_status() -> dict[str, EngineStatus]:
    out = {}
    for name, engine in registry().engines().items():
        try:
            out[name] = engine.probe()
        except Exception as exc:
            out[name] = EngineStatus(False, f"probe failed: {type(exc).__name__}: {exc}")
    return out


def kernels(engine: str) -> dict[str, Any]:
    """Kernels that plugins provide for ``engine`` (the ``hrx_kernels`` hook), by name.

    The first plugin to provide a name wins; a broken hook implementation raises
    PluginError naming the problem.
    """
    from .kernel import Kernel

    found: dict[str, Any] = {}
    try:
        results = registry().pm.hook.hrx_kernels(engine=engine)
    except Exception as exc:
        raise PluginError(f"hrx_kernels({engine!r}) failed: {type(exc).__name__}: {exc}") from exc
    for result in results:
        for name, kernel in (result or {}).items():
            if isinstance(kernel, Kernel):
                found.setdefault(name, kernel)
    return found


def compile(source: Any, *, target: str, entry: str = "", options: tuple[str, ...] | list[str] = ()) -> Artifact:
    """Compile ``source`` for ``target`` with the registered compiler (cached)."""
    reg = registry()
    return reg.compile_cache.compile(reg.compilers(), source, target=target, entry=entry, options=options)


def best_engine() -> str:
    """Name of the engine :func:`device` picks: HRX_ENGINE, else the highest priority
    available engine that opted in to being a default (``Engine.default_capable``) and
    is not on simulated hardware (``EngineStatus.default``)."""
    forced = os.environ.get(ENV_ENGINE, "").strip()
    if forced:
        return forced
    statuses = engine_status()
    ranked = sorted(
        (e for n, e in registry().engines().items()
         if e.default_capable is True and statuses[n].available and statuses[n].default),
        key=lambda e: -e.priority,
    )
    if not ranked:
        raise EngineNotFound("no engine is available (not even the host engine?)")
    return ranked[0].name


def _engine_for(engine: str | None) -> tuple[str, Engine]:
    reg = registry()
    name = best_engine() if engine is None else engine
    if not isinstance(name, str):
        raise InvalidArgument(f"engine: expected a str, got {type(name).__name__}")
    engines_ = reg.engines()
    eng = engines_.get(name)
    if eng is None:
        installed = ", ".join(sorted(engines_)) or "none"
        hint = f" (from {ENV_ENGINE})" if engine is None else ""
        broken = "; ".join(f"plugin {f.name!r} failed to load: {f.error}" for f in reg.failures)
        raise EngineNotFound(
            f"engine {name!r}{hint} is not installed; installed engines: {installed}" + (f"; {broken}" if broken else "")
        )
    return name, eng


def open_device(engine: str | None = None, index: int = 0, **options: Any) -> Device:
    """Open a new, uncached device (its own queues, stats and queue-count setting)."""
    name, eng = _engine_for(engine)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidArgument(f"index: expected an int >= 0, got {show(index)}")
    status = eng.probe()
    if not status.available:
        raise EngineNotFound(f"engine {name!r} is installed but unavailable: {status.reason}")
    if index >= max(status.device_count, 1):
        raise InvalidArgument(f"index: engine {name!r} has {status.device_count} devices, asked for {index}")
    from .device import Device
    from .engine_rules import check_device

    native = eng.open_device(index, **options)
    try:
        check_device(name, native, options)
    except PluginError:
        close = getattr(native, "close", None)
        if callable(close):
            close()
        raise
    return Device(eng, native)


def device(engine: str | None = None, index: int = 0, **options: Any) -> Device:
    """The device ``index`` of ``engine`` (default: the best available engine).

    Devices are cached per (engine, index, options): every call with the same
    arguments returns the same device. Engine options (e.g. the host engine's
    ``max_transfer_bytes``) give a separate device; :func:`open_device` always
    opens a new one.
    """
    reg = registry()
    name, _ = _engine_for(engine)
    key = (name, index, tuple(sorted(options.items())))
    with reg._lock:
        dev = reg._devices.get(key)
        if dev is not None and not dev.closed:
            return dev
        dev = open_device(name, index, **options)
        reg._devices[key] = dev
    if log.isEnabledFor(logging.INFO):
        log.info("device %s:%d (%s): %s", name, index, dev.info.name, _why_engine(name, engine))
    return dev


def _why_engine(name: str, asked: str | None) -> str:
    """Why ``name`` serves a device() call, for the log."""
    if asked is not None:
        return "the engine asked for"
    if os.environ.get(ENV_ENGINE, "").strip():
        return f"chosen by {ENV_ENGINE}"
    others = []
    for other, status in engine_status().items():
        if other == name:
            continue
        engine = registry().engines()[other]
        reason = status.reason if len(status.reason) <= 80 else status.reason[:77] + "..."
        state = ("unavailable: " + reason) if not status.available else \
            "not a default (simulated hardware)" if not status.default else \
            "not a default (no default_capable opt-in)" if engine.default_capable is not True else \
            f"priority {engine.priority}"
        others.append(f"{other} ({state})")
    chosen = registry().engines()[name].priority
    return f"the best available engine (priority {chosen}); others: {'; '.join(others) or 'none'}"


def devices() -> list[Device]:
    """Device 0.. of every available engine."""
    out: list[Device] = []
    for name, status in engine_status().items():
        if status.available:
            out.extend(device(name, i) for i in range(max(status.device_count, 1)))
    return out
