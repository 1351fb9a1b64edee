"""Kernels: one name, one parameter list, an implementation per target.

A kernel carries sources keyed by target -- ``"host"`` (a Python callable over numpy
views), ``"cuda"`` (CUDA C++ for NVRTC), ``"ptx"``, ``"cubin"`` -- so the same kernel
runs on every engine: each device lists the targets it runs, most preferred first,
and the kernel compiles (through :func:`hrx_core.compile`, cached) and loads the
first one it has. A device target the kernel has no source for is still served when
that target's compiler declares that it reads another target's source (``gfx1151``
compiles the ``cuda`` source); an explicit source for the device target wins.
Cloning a kernel retains its loaded executables.

Parameters are buffers first, then scalars. ``buffers`` declares each buffer's
access ("read", "write", "read_write"); ``scalars`` declares each scalar's numpy
dtype. A CUDA kernel receives buffers as pointers and scalars by value in that
order; a host callable receives one numpy uint8 array per buffer (read-only for
"read") and numpy scalars, and also ``grid=``/``block=`` if its signature names them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .buffer import coerce_access
from .engine import Access, Executable
from .errors import InvalidArgument, Unsupported

if TYPE_CHECKING:
    from .device import Device


class Kernel:
    """A kernel with per-target sources and a declared parameter list."""

    def __init__(
        self,
        name: str,
        *,
        buffers: int | Sequence[Access | str] = 1,
        scalars: Sequence[Any] = (),
        host: Callable[..., Any] | str | None = None,
        cuda: str | None = None,
        ptx: str | bytes | None = None,
        cubin: bytes | None = None,
        sources: Mapping[str, Any] | None = None,
        entry: str | None = None,
        options: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a nonempty str, got {name!r}")
        self.name = name
        self.entry = entry or name
        if isinstance(buffers, int) and not isinstance(buffers, bool):
            if buffers < 0:
                raise InvalidArgument(f"buffers: expected >= 0, got {buffers}")
            accesses: tuple[Access, ...] = (Access.READ_WRITE,) * buffers
        else:
            accesses = tuple(coerce_access(a) for a in buffers)
        self.buffer_access = accesses
        try:
            self.scalar_types = tuple(np.dtype(s) for s in scalars)
        except TypeError as exc:
            raise InvalidArgument(f"scalars: {exc}") from None
        found: dict[str, Any] = dict(sources or {})
        for target, src in (("host", host), ("cuda", cuda), ("ptx", ptx), ("cubin", cubin)):
            if src is not None:
                found[target] = src
        if not found:
            raise InvalidArgument(f"kernel {name!r}: give at least one source (host=, cuda=, ptx=, cubin=, sources=)")
        self.sources: dict[str, Any] = found
        self.options = {k: tuple(v) for k, v in (options or {}).items()}
        self._executables: dict[int, Executable] = {}
        self._lock = threading.Lock()

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.sources)

    def clone(self) -> Kernel:
        """A kernel sharing sources and loaded executables (retains them)."""
        other = object.__new__(Kernel)
        other.__dict__.update(self.__dict__)
        return other

    def __repr__(self) -> str:
        return f"<hrx.Kernel {self.name} targets={','.join(self.sources)}>"

    def executable(self, device: Device) -> Executable:
        """Compile (cached) and load this kernel for ``device``."""
        key = id(device)
        exe = self._executables.get(key)
        if exe is not None:
            return exe
        with self._lock:
            exe = self._executables.get(key)
            if exe is not None:
                return exe
            picked = self.source_for(device.info.targets)
            if picked is None:
                raise Unsupported(
                    f"kernel {self.name!r} has sources for {', '.join(self.sources)}; "
                    f"{device.name} runs {', '.join(device.info.targets) or 'nothing'}"
                )
            target, source = picked
            from .plugins import compile as compile_source

            options = tuple(self.options.get(source, ()))
            if source != target:
                options += tuple(self.options.get(target, ()))
            options += tuple(device.native.compile_options(target))
            artifact = compile_source(self.sources[source], target=target, entry=self.entry, options=options)
            exe = device.native.load_executable(artifact)
            self._executables[key] = exe
            # keep the device alive as long as its executable is cached here
            return exe

    def source_for(self, targets: Sequence[str]) -> tuple[str, str] | None:
        """``(target, source target)`` for the first of ``targets`` this kernel can serve.

        A target is served by the kernel's own source for it, else by the source its
        registered compiler declares (``Compiler.source``); None when none is.
        """
        compilers = None
        for target in targets:
            if target in self.sources:
                return target, target
            if compilers is None:
                from .plugins import registry

                compilers = registry().compilers()
            compiler = compilers.get(target)
            if compiler is not None and compiler.source_target in self.sources:
                return target, compiler.source_target
        return None

    def check_scalars(self, scalars: Sequence[Any]) -> tuple[np.generic, ...]:
        if not scalars and not self.scalar_types:
            return ()
        if len(scalars) != len(self.scalar_types):
            raise InvalidArgument(
                f"scalars: kernel {self.name!r} takes {len(self.scalar_types)} scalars, got {len(scalars)}"
            )
        out = []
        for i, (value, dtype) in enumerate(zip(scalars, self.scalar_types)):
            if isinstance(value, np.generic) and value.dtype == dtype:
                out.append(value)
                continue
            bounds = _INT_BOUNDS.get(dtype)
            if bounds is not None and type(value) is int:
                # the common case, without numpy's array machinery
                if not bounds[0] <= value <= bounds[1]:
                    raise InvalidArgument(f"scalars[{i}]: {value!r} is not a valid {dtype}")
                out.append(dtype.type(value))
                continue
            try:
                converted = np.array(value, dtype=dtype)
                if converted.shape != () or (dtype.kind in "iu" and converted != value):
                    raise ValueError("out of range")
                out.append(converted[()])
            except (ValueError, TypeError, OverflowError):
                raise InvalidArgument(f"scalars[{i}]: {value!r} is not a valid {dtype}") from None
        return tuple(out)


_INT_BOUNDS = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}
