"""Compilation of kernel sources through compilers registered by plugins.

``hrx_core.compile(source, target=...)`` finds the compiler registered for the
target through the ``hrx_compilers`` hook and caches the result in memory, and on
disk for compilers that produce bytes, keyed by source, entry, options, target and
the compiler's own salt (its version, a driver version).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from .engine import Artifact
from .errors import CompileError, InvalidArgument, Unsupported


@attrs.frozen
class Compiler:
    """A compiler for one target.

    ``compile(source, entry, options)`` returns ``(code, log)`` or raises
    CompileError. ``persistent`` compilers return bytes, which are cached on disk.
    ``salt()`` names what else the output depends on (compiler and driver versions).
    ``source`` names the kernel-source target this compiler reads when it is not its
    own target: ``Compiler(target="gfx1151", source="cuda", ...)`` compiles a kernel's
    ``cuda`` source (and receives its ``cuda`` options) for a gfx1151 device.
    """

    target: str
    compile: Callable[[Any, str, tuple[str, ...]], tuple[Any, str]]
    persistent: bool = False
    salt: Callable[[], str] = lambda: ""
    description: str = ""
    source: str = ""

    @property
    def source_target(self) -> str:
        """The kernel-source target this compiler reads (its own target by default)."""
        return self.source or self.target


def cache_dir() -> Path:
    """Where persistent compiler output is cached (``HRX_CACHE_DIR`` overrides)."""
    root = os.environ.get("HRX_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hrx"


def _source_digest(source: Any) -> str:
    if isinstance(source, str):
        return hashlib.sha256(source.encode()).hexdigest()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(source)).hexdigest()
    if callable(source):
        # Python callables are cached by identity: the function object is the source.
        return f"callable-{id(source):x}"
    raise InvalidArgument(f"source: expected str, bytes or a callable, got {type(source).__name__}")


class CompileCache:
    """Memory cache in front of every compiler, plus the disk cache for bytes."""

    def __init__(self) -> None:
        self._memory: dict[str, Artifact] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.disk_hits = 0

    def compile(
        self,
        compilers: dict[str, Compiler],
        source: Any,
        *,
        target: str,
        entry: str = "",
        options: Sequence[str] = (),
    ) -> Artifact:
        if not isinstance(target, str) or not target:
            raise InvalidArgument(f"target: expected a nonempty str, got {type(target).__name__}")
        compiler = compilers.get(target)
        if compiler is None:
            known = ", ".join(sorted(compilers)) or "none"
            raise Unsupported(f"target {target!r}: no compiler registered (registered: {known})")
        if not isinstance(entry, str):
            raise InvalidArgument(f"entry: expected str, got {type(entry).__name__}")
        if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
            raise InvalidArgument(f"options: expected a list of strs, got {type(options).__name__}")
        options = tuple(options)
        digest = hashlib.sha256(
            "\0".join([target, _source_digest(source), entry, *options, compiler.salt()]).encode()
        ).hexdigest()
        # A callable is its own compiled code: caching it by identity would keep every
        # host callable alive forever (and a recycled id could return a dead one's code).
        memoize = not callable(source)
        with self._lock:
            hit = self._memory.get(digest) if memoize else None
            if hit is not None:
                self.hits += 1
                return hit
        path = cache_dir() / target / f"{digest}.bin" if compiler.persistent else None
        if path is not None and path.is_file():
            code: Any = path.read_bytes()
            log = ""
            self.disk_hits += 1
        else:
            self.misses += 1
            try:
                code, log = compiler.compile(source, entry, options)
            except CompileError:
                raise
            except Exception as exc:  # a compiler bug must not escape as a non-HRX error
                raise CompileError(f"{target} compiler failed: {exc}") from exc
            if path is not None:
                if not isinstance(code, (bytes, bytearray)):
                    raise CompileError(f"{target} compiler returned {type(code).__name__}, expected bytes")
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                    tmp.write_bytes(code)
                    os.replace(tmp, path)
                except OSError:
                    pass  # a read-only cache only costs recompilation
        artifact = Artifact(target=target, entry=entry, code=code, key=digest, log=log)
        if memoize:
            with self._lock:
                self._memory[digest] = artifact
        return artifact

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
