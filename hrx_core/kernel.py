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

A scalar may also be a *record*: a structured numpy dtype of numeric fields
(``np.dtype([("v", np.uint32, (256,))])``), passed by value as the C struct of the
same layout (a CUDA kernel declares it ``const __grid_constant__`` to index it
without a copy). Its value is a ``numpy.void`` of exactly that dtype (or a 0-d array
of it), copied when the launch is made: a small table -- row indices, pointers --
travels with the launch instead of through memory the kernel must read first. A
device takes at most ``limits.max_kernel_arg_bytes`` of arguments (8 bytes a buffer,
each scalar's size, each aligned to its size): a kernel over that limit is refused
when it is loaded (Unsupported), never at launch.

``programmatic=True`` declares that the kernel's CUDA code, built for sm_90 or newer,
waits for the kernels it depends on before it touches their output (``griddepcontrol.wait``,
what ``cudaGridDependencySynchronize`` issues), in every block and before any early
return. A recorded graph may then launch it while its kernel predecessors are still
running (programmatic dependent launch: the cuda engine with compute capability 9.0 or
newer, opt-in with ``HRX_CUDA_PDL=1``): its launch overlaps their tail instead of
following their completion. A kernel that does not wait must not declare it: it would
read its inputs too early.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import numpy as np

from .buffer import coerce_access
from .engine import Access, EngineDevice, Executable, HostReference
from .engine_rules import check_executable
from .errors import InvalidArgument, Unsupported
from .errors import show as _show

if TYPE_CHECKING:
    from .device import Device


#: Largest buffer and scalar counts a kernel may declare (far above any real kernel).
MAX_BUFFERS = 256
MAX_SCALARS = 256
#: What each known target's source must be.
_SOURCE_KINDS: dict[str, tuple[type, ...]] = {"cuda": (str,), "ptx": (str, bytes, bytearray), "cubin": (bytes, bytearray)}


def _forget_executable(kernel_ref: weakref.ref[Kernel], key: int) -> None:
    kernel = kernel_ref()
    if kernel is not None:
        kernel._executables.pop(key, None)
        kernel._image_bytes.pop(key, None)


def code_bytes(code: Any, source: Any = None) -> int:
    """Size of an executable image: the compiled payload (PTX, cubin, a shared library)
    when it is bytes, else the source text it came from (Python callables count 0:
    their code lives in the interpreter, outside device memory)."""
    if isinstance(code, (bytes, bytearray, memoryview)):
        return len(code)
    if isinstance(code, str):
        return len(code.encode())
    if isinstance(source, str):
        return len(source.encode())
    return 0


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
        programmatic: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a nonempty str, got {_show(name)}")
        if not isinstance(programmatic, bool):
            raise InvalidArgument(f"programmatic: expected a bool, got {_show(programmatic)}")
        #: the kernel waits for its predecessors itself (see the module doc)
        self.programmatic = programmatic
        if entry is not None and (not isinstance(entry, str) or not entry):
            raise InvalidArgument(f"entry: expected a nonempty str or None, got {_show(entry)}")
        self.name = name
        self.entry = entry or name
        if isinstance(buffers, int) and not isinstance(buffers, bool):
            if not 0 <= buffers <= MAX_BUFFERS:
                raise InvalidArgument(f"buffers: expected 0..{MAX_BUFFERS}, got {buffers}")
            accesses: tuple[Access, ...] = (Access.READ_WRITE,) * buffers
        elif isinstance(buffers, (list, tuple)) and len(buffers) <= MAX_BUFFERS:
            try:
                accesses = tuple(coerce_access(a) for a in buffers)
            except InvalidArgument as exc:
                raise InvalidArgument(f"buffers: {exc}") from None
        else:
            raise InvalidArgument(f"buffers: expected a count or a list of accesses ('read', 'write', 'read_write'), got {_show(buffers)}")
        self.buffer_access = accesses
        if not isinstance(scalars, (list, tuple)) or len(scalars) > MAX_SCALARS:
            raise InvalidArgument(f"scalars: expected a list of up to {MAX_SCALARS} numpy dtypes, got {_show(scalars)}")
        types = []
        for i, t in enumerate(scalars):
            if t is None:  # numpy would read None as float64
                raise InvalidArgument(f"scalars[{i}]: expected a dtype, got None")
            try:
                dt = np.dtype(t)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(f"scalars[{i}]: {_show(t)} is not a dtype ({exc})") from None
            if dt.fields is not None:
                if not is_record_dtype(dt):
                    raise InvalidArgument(f"scalars[{i}]: {dt} is not a record of numeric fields (no objects, "
                                          "no nested records)")
                misplaced = _unaligned_field(dt)
                if misplaced:
                    raise InvalidArgument(f"scalars[{i}]: record {dt} is not laid out as a C struct ({misplaced}); "
                                          "build it with np.dtype([...], align=True)")
            elif dt.kind not in "biufc" or dt.shape != ():
                raise InvalidArgument(f"scalars[{i}]: {dt} is not a numeric scalar dtype or a record of numeric fields")
            types.append(dt)
        self.scalar_types = tuple(types)
        #: bytes of arguments a launch passes (see :func:`argument_bytes`)
        self.argument_bytes = argument_bytes(len(self.buffer_access), self.scalar_types)
        #: per scalar, what the compiled dispatch (hrx_core.fastpath) converts itself:
        #: (code, numpy scalar type); code 0x10 | size for native signed ints, 0x20 |
        #: size unsigned, 0x30 | size floats, 0 for anything it leaves to check_scalars
        self._scalar_plan = tuple((_scalar_code(dt), dt.type) for dt in types)
        if sources is not None and not isinstance(sources, Mapping):
            raise InvalidArgument(f"sources: expected a mapping of target to source, got {type(sources).__name__}")
        found: dict[str, Any] = dict(sources or {})
        for target, src in (("host", host), ("cuda", cuda), ("ptx", ptx), ("cubin", cubin)):
            if src is not None:
                found[target] = src
        if not found:
            raise InvalidArgument(f"kernel {name!r}: give at least one source (host=, cuda=, ptx=, cubin=, sources=)")
        for target, src in found.items():
            if not isinstance(target, str) or not target:
                raise InvalidArgument(f"sources: target names are nonempty strs, got {_show(target)}")
            kinds = _SOURCE_KINDS.get(target)
            if target == "host" and not (callable(src) or isinstance(src, str)) or target == "host" and src == "":
                raise InvalidArgument(f"host: expected a callable or Python source (a nonempty str), got {type(src).__name__}")
            if kinds is not None and not isinstance(src, kinds):
                raise InvalidArgument(f"{target}: expected {' or '.join(k.__name__ for k in kinds)}, got {type(src).__name__}")
            if not (callable(src) or isinstance(src, (str, bytes, bytearray))):
                raise InvalidArgument(f"sources[{target!r}]: expected a callable, str or bytes, got {type(src).__name__}")
        self.sources: dict[str, Any] = found
        if options is not None and not isinstance(options, Mapping):
            raise InvalidArgument(f"options: expected a mapping of target to a list of strs, got {type(options).__name__}")
        opts: dict[str, tuple[str, ...]] = {}
        for target, values in (options or {}).items():
            if not isinstance(target, str) or isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)) \
                    or not all(isinstance(v, str) for v in values):
                raise InvalidArgument(f"options: expected {{target: [str, ...]}}, got {_show(target)}: {_show(values)}")
            opts[target] = tuple(values)
        self.options = opts
        self._executables: dict[int, Executable] = {}
        self._image_bytes: dict[int, int] = {}
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
                    f"{device.name} runs {', '.join(device.info.targets) or 'nothing'} (a kernel runs on a "
                    "target it gives a source for, sources={target: ...}, or whose registered compiler reads "
                    "one of its sources; a device that runs host callables lists 'host' among its targets)"
                )
            target, source = picked
            limit = getattr(getattr(device.info, "limits", None), "max_kernel_arg_bytes", None)  # (stand-ins: none)
            if limit is not None and self.argument_bytes > limit:
                raise Unsupported(
                    f"kernel {self.name!r} takes {self.argument_bytes} bytes of arguments; {device.name} passes at "
                    f"most {limit} (limits.max_kernel_arg_bytes): pass large tables in a buffer"
                )
            from .plugins import compile as compile_source

            options = tuple(self.options.get(source, ()))
            if source != target:
                options += tuple(self.options.get(target, ()))
            options += tuple(device.native.compile_options(target))
            artifact = compile_source(self.sources[source], target=target, entry=self.entry, options=options)
            if target != "host" and getattr(device.native, "wants_host_reference", False):
                artifact = attrs.evolve(artifact, reference=self._host_reference())
            exe = device.native.load_executable(artifact)
            if self.programmatic:
                try:
                    exe.programmatic = True
                except AttributeError:  # an executable without the attribute never launches early
                    pass
            if isinstance(device.native, EngineDevice):  # an engine's device (not a test stand-in)
                check_executable(device.info.engine, exe)
            self._image_bytes[key] = code_bytes(artifact.code, self.sources[source])
            self._executables[key] = exe
            # keyed by id: forget the entry when the device goes, so a later device that
            # reuses the id never gets a dead device's executable
            try:
                weakref.finalize(device, _forget_executable, weakref.ref(self), key)
            except TypeError:
                pass  # a stand-in device without weak references (tests)
            return exe

    def code_bytes(self, device: Device) -> int:
        """Bytes a budget is charged for this kernel's code on ``device`` (loaded if it
        was not): its executable image and the private workspace the engine reports."""
        exe = self.executable(device)
        return self._image_bytes.get(id(device), 0) + int(getattr(exe, "private_bytes", 0) or 0)

    def _host_reference(self) -> HostReference | None:
        """The host implementation with this kernel's parameter list (None without one)."""
        host = self.sources.get("host")
        if host is None:
            return None
        if not callable(host):
            from .plugins import compile as compile_source

            host = compile_source(host, target="host", entry=self.entry).code
        return HostReference(host, self.buffer_access, self.scalar_types)

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
        """``scalars`` converted to the declared dtypes, exactly: ints in range (no bools
        for numeric dtypes), finite or non-finite floats for float dtypes, no None, no
        strings, no arrays."""
        if type(scalars) is not tuple and type(scalars) is not list:
            if isinstance(scalars, (str, bytes, np.ndarray)) or not isinstance(scalars, Sequence):
                raise InvalidArgument(f"scalars: expected a list or tuple of numbers, got {type(scalars).__name__}")
        if not scalars and not self.scalar_types:
            return ()
        if len(scalars) != len(self.scalar_types):
            raise InvalidArgument(
                f"scalars: kernel {self.name!r} takes {len(self.scalar_types)} scalars, got {len(scalars)}"
            )
        return tuple([_scalar(i, value, dtype) for i, (value, dtype) in enumerate(zip(scalars, self.scalar_types))])


def _scalar(i: int, value: Any, dtype: np.dtype) -> np.generic:
    """Scalar ``i`` as ``dtype`` (Kernel.check_scalars' conversion of one scalar; a
    record is copied)."""
    if isinstance(value, np.generic) and value.dtype == dtype and dtype.fields is None:
        return value
    bounds = _INT_BOUNDS.get(dtype)
    if bounds is not None and type(value) is int:
        # the common case, without numpy's array machinery
        if not bounds[0] <= value <= bounds[1]:
            raise InvalidArgument(f"scalars[{i}]: {value!r} is outside the range of {dtype} {list(bounds)}")
        return cast(np.generic, dtype.type(value))
    return _convert_scalar(i, value, dtype)


def is_record_dtype(dtype: np.dtype) -> bool:
    """A structured dtype whose fields are numeric scalars or arrays of them (what a
    kernel takes by value as a C struct)."""
    if dtype.fields is None or dtype.hasobject or dtype.itemsize == 0:
        return False
    for field in dtype.fields.values():
        base = field[0].base
        if base.fields is not None or base.kind not in "biufc":
            return False
    return True


def _unaligned_field(dtype: np.dtype) -> str:
    """What keeps record ``dtype`` from having the layout of the C struct of its fields
    (each at an offset aligned to its element size, the size a multiple of the largest):
    '' when nothing does."""
    largest = 1
    fields: Mapping[str, Any] = dtype.fields or {}
    for name, field in fields.items():
        base, offset = field[0].base, field[1]
        largest = max(largest, base.itemsize)
        if offset % base.itemsize:
            return f"field {name!r} at offset {offset} needs {base.itemsize}-byte alignment"
    if dtype.itemsize % largest:
        return f"its size {dtype.itemsize} is not a multiple of {largest}"
    return ""


def argument_bytes(buffers: int, scalar_types: Sequence[np.dtype]) -> int:
    """Bytes of a launch's arguments as a C parameter list lays them out: 8 a buffer
    pointer, then each scalar at an offset aligned to its size (a record to its
    fields' largest alignment)."""
    total = 8 * buffers
    for dt in scalar_types:
        align = argument_alignment(dt)
        total = -(-total // align) * align + dt.itemsize
    return total


def argument_alignment(dtype: np.dtype) -> int:
    """The alignment a C parameter list gives a scalar of ``dtype``: its size, or for a
    record its largest field element's size."""
    if dtype.fields:
        return max((f[0].base.itemsize for f in dtype.fields.values()), default=1)
    return max(dtype.itemsize, 1)


def check_scalar(kernel: Kernel, index: int, value: Any) -> np.generic:
    """Scalar ``index`` of ``kernel`` converted exactly as :meth:`Kernel.check_scalars`
    converts it (InvalidArgument otherwise) -- but a record of the declared dtype is
    returned as given, not copied: :meth:`PreparedDispatch.set_scalar` keeps (copies)
    what a later launch will read."""
    types = kernel.scalar_types
    if type(index) is not int or not 0 <= index < len(types):
        raise InvalidArgument(f"index: kernel {kernel.name!r} has scalars 0..{len(types) - 1}, got {_show(index)}")
    dtype = types[index]
    if isinstance(value, np.void) and value.dtype == dtype:  # a record: the engine copies it
        return value
    return _scalar(index, value, dtype)


def _record(i: int, value: Any, dtype: np.dtype) -> np.generic:
    """A record scalar: a copy of ``value`` (a numpy.void or 0-d array of exactly
    ``dtype``), so that the caller may reuse its memory once the launch is made."""
    if (isinstance(value, np.void) or isinstance(value, np.ndarray) and value.shape == ()) and value.dtype == dtype:
        return cast(np.generic, np.frombuffer(value.tobytes(), dtype)[0])
    shown = f"a {value.dtype} {type(value).__name__}" if isinstance(value, (np.void, np.ndarray)) else type(value).__name__
    raise InvalidArgument(f"scalars[{i}]: expected a numpy.void of {dtype}, got {shown[:120]}")


def _scalar_code(dtype: np.dtype) -> int:
    """The compiled dispatch's conversion code for ``dtype`` (see Kernel._scalar_plan)."""
    if not dtype.isnative or dtype.itemsize not in (1, 2, 4, 8):
        return 0
    if dtype.kind == "i":
        return 0x10 | dtype.itemsize
    if dtype.kind == "u":
        return 0x20 | dtype.itemsize
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return 0x30 | dtype.itemsize
    return 0


def _convert_scalar(i: int, value: Any, dtype: np.dtype) -> np.generic:
    """One scalar argument as ``dtype``, refusing anything that is not exactly a number
    of that kind (None would become NaN, True would become 1)."""
    if dtype.fields is not None:
        return _record(i, value, dtype)
    kind = dtype.kind
    is_bool = isinstance(value, (bool, np.bool_))
    if kind == "b":
        ok = is_bool or (isinstance(value, (int, np.integer)) and value in (0, 1))
    elif kind in "iu":
        ok = not is_bool and isinstance(value, (int, np.integer))
    elif kind in "fc":
        ok = not is_bool and isinstance(value, (int, float, np.integer, np.floating) + ((complex, np.complexfloating) if kind == "c" else ()))
    else:
        ok = False
    if ok:
        try:
            with np.errstate(over="raise", invalid="ignore"):
                converted = cast(np.generic, np.asarray(value, dtype=dtype)[()])
            if kind in "iub" and converted != value:
                raise ValueError("out of range")
            return converted
        except (ValueError, TypeError, OverflowError, FloatingPointError):
            pass
    shown = repr(value) if isinstance(value, (int, float, bool, complex, np.generic)) else type(value).__name__
    raise InvalidArgument(f"scalars[{i}]: {shown[:80]} is not a valid {dtype}")


_INT_BOUNDS = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}
