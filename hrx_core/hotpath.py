"""Small compiled hot paths: cffi API-mode extensions built on first use.

An engine whose per-call Python cost matters (a prepared launch, a graph replay with
rebinding) hands :func:`load` a few lines of C and their cffi declarations. The first
use compiles them with the system C compiler (through :mod:`hrx_core.native`, the one
way HRX builds host code) into the compile cache,
``hrx_core.compiler.cache_dir()/hot/<digest>/``, and imports the result; later uses in
the process answer from memory, later processes from the cache. The extension is
engine-neutral C: native entry points reach it as function pointers (an engine that
loads its driver in cffi ABI mode passes ``ffi.cast("uintptr_t", lib.fn)``), so nothing
links against a driver.

Where no extension can be had the caller keeps its pure-Python path, and
:attr:`HotModule.status` says why: ``HRX_HOT_PATH=0`` (forces the fallback), cffi not
installed, no C compiler (``CC``, else the interpreter's compiler, else ``cc``), no
Python headers, a compiler error, an unwritable cache. :func:`load` never raises for
any of those; results must be identical either way, only the cost differs.

Builds are thread- and process-safe: each builder compiles into a private temporary
directory and renames it into place; a builder that loses the race discards its copy
and loads the winner's. The digest covers the name, declarations, source, the cffi
version and the interpreter's ABI, so a change of any of them builds anew.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import re
import shutil
import sys
import sysconfig
import threading
import time
import uuid
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

from .errors import InvalidArgument

#: Environment variable: "0" (or "off", "false", "no") forces the pure-Python fallback.
ENV = "HRX_HOT_PATH"
#: Bumped when the way extensions are built changes (part of the digest).
BUILDER_VERSION = "1"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_OFF = frozenset({"0", "off", "false", "no"})
log = logging.getLogger("hrx.kernels")


class HotModule:
    """A compiled extension (``ffi``, ``lib``) or the reason there is none.

    ``compiled`` says which; ``status`` is ``{"compiled": bool, "reason": str, "path":
    str | None}`` (``path``: the extension file when compiled).
    """

    __slots__ = ("compiled", "ffi", "lib", "name", "path", "reason")

    def __init__(self, name: str, ffi: Any, lib: Any, reason: str, path: str | None) -> None:
        self.name = name
        self.ffi = ffi
        self.lib = lib
        self.compiled = lib is not None
        self.reason = reason
        self.path = path

    @property
    def status(self) -> dict[str, Any]:
        """``{"compiled": bool, "reason": str, "path": str | None}``."""
        return {"compiled": self.compiled, "reason": self.reason, "path": self.path}

    def __repr__(self) -> str:
        state = "compiled" if self.compiled else "fallback"
        return f"<HotModule {self.name} {state}: {self.reason}>"


def enabled() -> bool:
    """False when ``HRX_HOT_PATH`` asks for the pure-Python fallback (read on every call)."""
    return os.environ.get(ENV, "").strip().lower() not in _OFF


def cache_root() -> Path:
    """Where hot-path extensions live: ``hrx_core.compiler.cache_dir()/hot``."""
    from .compiler import cache_dir

    return cache_dir() / "hot"


@functools.lru_cache(maxsize=256)
def digest(name: str, cdef: str, source: str, flags: tuple[str, ...] = ()) -> str:
    """The cache key of an extension: its text, the cffi version and the interpreter ABI
    (remembered: a module's later loads -- each hot path's first use looks its module up
    -- hash none of its source again)."""
    try:
        import cffi

        cffi_version = cffi.__version__
    except ImportError:
        cffi_version = "none"
    parts = (
        BUILDER_VERSION,
        name,
        cdef,
        source,
        cffi_version,
        sys.implementation.cache_tag or "",
        str(sysconfig.get_config_var("EXT_SUFFIX")),
        platform.machine(),
        *flags,
    )
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def compiler_command() -> list[str]:
    """The C compiler to run: ``CC``, else the interpreter's ``CC``, else ``cc``
    (:func:`hrx_core.native.compiler_command`)."""
    from . import native

    return native.compiler_command("c")


def _python_include() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(p for p in (paths.get("include"), paths.get("platinclude")) if p))


# key -> HotModule (successes by (root, digest); failures also by the compiler asked)
_modules: dict[tuple[str, ...], HotModule] = {}
_locks: dict[tuple[str, ...], threading.Lock] = {}
_locks_guard = threading.Lock()
#: Compiler runs in this process (tests check that a cached extension is not rebuilt).
builds = 0


def forget() -> None:
    """Drop what this process remembers (tests; extensions already imported stay loaded)."""
    with _locks_guard:
        _modules.clear()


def load(name: str, cdef: str, source: str, *, flags: Sequence[str] = ()) -> HotModule:
    """The extension ``name`` built from ``cdef`` (cffi declarations) and ``source`` (C),
    compiled by :func:`hrx_core.native.build_shared` with ``-O2`` then ``flags``.

    Built on first use into the cache and imported; never raises for a missing
    compiler, headers or cffi, a failed build or ``HRX_HOT_PATH=0``: the result then
    has ``compiled == False`` and the reason. Raises :class:`InvalidArgument` only for
    arguments of the wrong type or a ``name`` that is not a short identifier.
    """
    return _load(name, cdef, source, flags, cffi_module=True)


def load_extension(name: str, source: str, *, flags: Sequence[str] = ()) -> HotModule:
    """A plain CPython extension (no cffi) built from ``source`` like :func:`load`.

    ``source`` is C that includes ``Python.h`` and defines ``static PyObject
    *hrx_module_create(const char *name)`` (returning the new module object); the
    builder adds the ``PyInit_`` function its cache name needs. The result's ``lib`` is
    the imported module (``ffi`` is None). Same cache, fallbacks and reasons as
    :func:`load`, except that cffi is not needed."""
    return _load(name, "", source, flags, cffi_module=False)


def _load(name: str, cdef: str, source: str, flags: Sequence[str], *, cffi_module: bool) -> HotModule:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgument(f"name: expected an identifier of at most 64 characters, got {name!r}")
    for label, text in (("cdef", cdef), ("source", source)):
        if not isinstance(text, str):
            raise InvalidArgument(f"{label}: expected C text (str), got {type(text).__name__}")
    if isinstance(flags, str) or not all(isinstance(f, str) for f in flags):
        raise InvalidArgument(f"flags: expected a sequence of str, got {flags!r}")
    flags = tuple(flags)
    if not enabled():
        log.debug("hot path %r: disabled by %s=%s", name, ENV, os.environ.get(ENV))
        return HotModule(name, None, None, f"disabled by {ENV}={os.environ.get(ENV)}", None)
    try:
        root = cache_root()
    except Exception as exc:  # noqa: BLE001 - no home directory, odd HRX_CACHE_DIR
        return HotModule(name, None, None, f"no compile cache: {exc}", None)
    key_digest = digest(name, cdef, source, flags if cffi_module else ("python-extension", *flags))
    key = (str(root), key_digest)
    module = _modules.get(key)
    if module is not None:
        return module
    failure_key = (*key, " ".join(compiler_command()))
    module = _modules.get(failure_key)
    if module is not None:
        return module
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        module = _modules.get(key) or _modules.get(failure_key)
        if module is None:
            try:
                module = _load_or_build(name, cdef, source, root, key_digest, flags, cffi_module)
            except Exception as exc:  # noqa: BLE001 - a hot path must never break its caller
                module = HotModule(name, None, None, f"unexpected {type(exc).__name__}: {exc}", None)
            _modules[key if module.compiled else failure_key] = module
            if not module.compiled:  # said once per extension and compiler
                log.warning("hot path %r: not compiled (%s); the pure-Python path runs instead (same results, "
                            "more time per call)", name, module.reason)
    return module


def _module_name(name: str, key_digest: str) -> str:
    return f"_hrx_hot_{name}_{key_digest[:16]}"


def _load_or_build(name: str, cdef: str, source: str, root: Path, key_digest: str,
                   flags: tuple[str, ...], cffi_module: bool = True) -> HotModule:
    cffi: Any = None
    if cffi_module:
        try:
            cffi = importlib.import_module("cffi")
        except ImportError:
            return HotModule(name, None, None, "cffi is not installed", None)
    modname = _module_name(name, key_digest)
    final = root / key_digest
    library = final / f"{modname}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"
    stale = ""
    if library.is_file():
        try:
            return _import(name, modname, library, "loaded from the cache", cffi_module)
        except Exception as exc:  # noqa: BLE001 - a damaged cache entry: build it again
            stale = f"{type(exc).__name__}: {exc}"
    built = _build(cffi, name, modname, cdef, source, root, library.name, flags)
    if isinstance(built, HotModule):
        return built
    try:
        # loaded from the private build directory before it is published: another
        # process replacing a damaged entry may pull the cache directory away at any
        # time, and a loaded library stays mapped whatever happens to its path
        module = _import(name, modname, built / library.name, f"built with {compiler_command()[0]}", cffi_module)
    except Exception as exc:  # noqa: BLE001
        shutil.rmtree(built, ignore_errors=True)
        why = f"{type(exc).__name__}: {exc}"
        return HotModule(name, None, None, f"cannot load the built extension: {why}", None)
    try:
        _publish(built, final, replace=bool(stale))
    except OSError:
        pass  # the cache stays without it: the next process builds again
    finally:
        shutil.rmtree(built, ignore_errors=True)
    module.path = str(library)  # (what later processes load; the build directory is gone)
    return module


def _build(cffi: Any | None, name: str, modname: str, cdef: str, source: str, root: Path, filename: str,
           flags: tuple[str, ...]) -> Path | HotModule:
    """Compile into a private temporary directory; its path, or a fallback HotModule."""
    global builds
    from . import native
    from .errors import CompileError

    argv = compiler_command()
    if shutil.which(argv[0]) is None:
        return HotModule(name, None, None, f"no C compiler: {argv[0]!r} not found (set CC)", None)
    includes = _python_include()
    if not any((Path(p) / "Python.h").is_file() for p in includes):
        where = ", ".join(includes) or "nowhere"
        return HotModule(name, None, None, f"no Python headers (Python.h not in {where})", None)
    tmp = root / f".tmp-{modname}-{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
    except OSError as exc:
        return HotModule(name, None, None, f"cache not writable: {exc}", None)
    try:
        c_file = tmp / f"{modname}.c"
        if cffi is not None:
            ffi = cffi.FFI()
            ffi.cdef(cdef)
            _emit_c(ffi, modname, source, c_file)
        else:
            c_file.write_text(f"{source}\n\nPyMODINIT_FUNC PyInit_{modname}(void)\n"
                              f"{{\n    return hrx_module_create(\"{modname}\");\n}}\n")
        builds += 1
        started = time.monotonic()
        try:
            native.build_shared(c_file.read_text(), tmp / filename, language="c", flags=("-O2", *flags),
                                includes=includes)
        except CompileError as exc:
            log = (exc.log or str(exc)).strip().splitlines()
            detail = " | ".join(log[:4])
            raise _BuildFailed(f"{argv[0]} failed after {time.monotonic() - started:.1f} s: {detail}") from None
    except _BuildFailed as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        return HotModule(name, None, None, str(exc), None)
    except Exception as exc:  # noqa: BLE001 - cffi parse errors, OSError running the compiler
        shutil.rmtree(tmp, ignore_errors=True)
        return HotModule(name, None, None, f"build failed: {type(exc).__name__}: {exc}", None)
    return tmp


class _BuildFailed(Exception):
    pass


def _emit_c(ffi: Any, modname: str, source: str, c_file: Path) -> None:
    """Write the extension's C file (quietly: emit_c_code prints a line)."""
    try:
        from cffi.recompiler import make_c_source
    except ImportError:
        ffi.set_source(modname, source)
        ffi.emit_c_code(str(c_file))
        return
    make_c_source(ffi, modname, source, str(c_file), verbose=False)


def _publish(built: Path, final: Path, *, replace: bool) -> None:
    """Rename the built directory into place; a concurrent builder may have won."""
    if replace and final.exists():
        trash = final.with_name(f".stale-{final.name}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(final, trash)
            shutil.rmtree(trash, ignore_errors=True)
        except OSError:
            pass
    try:
        os.rename(built, final)
    except OSError:
        if not final.is_dir():
            raise  # not a lost race: the cache directory is unusable


def _import(name: str, modname: str, library: Path, reason: str, cffi_module: bool = True) -> HotModule:
    loader = importlib.machinery.ExtensionFileLoader(modname, str(library))
    spec = importlib.util.spec_from_file_location(modname, str(library), loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {library}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    if not cffi_module:
        return HotModule(name, None, module, reason, str(library))
    return HotModule(name, module.ffi, module.lib, reason, str(library))


def doctor_row(area: str, label: str, status: Callable[[], dict[str, Any]]) -> tuple[str, str, str]:
    """An ``hrx doctor`` row for a compiled hot path: ``(area, label, "compiled, <reason>
    (<path>)")`` or ``(area, label, "fallback (Python): <why>")``. ``status()`` returns
    :attr:`HotModule.status` (building the extension on first use); whatever it raises
    is reported as the reason, never raised."""
    try:
        state = status()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never raises
        return (area, label, f"fallback (Python): {type(exc).__name__}: {exc}")
    if state["compiled"]:
        return (area, label, f"compiled, {state['reason']} ({state['path']})")
    return (area, label, f"fallback (Python): {state['reason']}")


__all__ = ["ENV", "HotModule", "cache_root", "compiler_command", "digest", "doctor_row", "enabled", "forget", "load",
           "load_extension"]
