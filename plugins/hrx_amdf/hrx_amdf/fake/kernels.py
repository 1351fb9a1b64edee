"""Running kernels on the simulated GPU without its ISA.

No RDNA emulator is at hand, so a dispatch runs the kernel's *reference*: the host
implementation every HRX kernel already has. What the simulation does check is
everything around the ISA that an engine writes:

* the code object was loaded where the dispatch says (the bytes in executable memory
  equal the code object's load image at that base, relocations applied);
* the program address, COMPUTE_PGM_RSRC1/2/3, the user-SGPR layout (PM4) or the
  descriptor address and segment sizes (AQL) agree with the kernel descriptor;
* the kernel arguments are read from kernarg memory with the code object's own
  argument metadata: pointers must resolve to live allocations the device may access
  as declared, by-value arguments must have the sizes of the kernel's scalars, and
  the hidden arguments (block counts, group sizes, remainders, grid dimensions,
  offsets) must describe the dispatch that carries them.

Which reference belongs to which kernel is registered with the simulation when code
is loaded (:meth:`FakeProvider.register_code_object`). A pointer argument on
hardware is only an address; to hand the reference a numpy view of the right length
the engine may describe each kernarg block's pointer extents
(:meth:`FakeProvider.describe_kernargs`); each described pointer must equal the one
decoded from memory, so the description cannot hide a wrong kernarg layout.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from ..constants import AddressKind, MemoryAccess
from .memory import MemoryFault, device_bytes, resolve

if TYPE_CHECKING:
    from ..codeobject import CodeObject
    from . import FakeProvider
    from .memory import FakeMemory

#: hrx_core.engine.Access values: READ=1, WRITE=2, READ_WRITE=3.
_WRITES = 2


class KernelFault(Exception):
    """A dispatch the hardware would not run as the engine meant it (a queue fault)."""


@attrs.frozen
class KernelReference:
    """The host implementation of one kernel, and its HRX parameter list.

    ``function(*buffers, *scalars[, grid=, block=])`` receives one uint8 numpy array per
    buffer (read-only where the access does not write) and numpy scalars of
    ``scalars``' dtypes, like the host engine's kernels."""

    function: Callable[..., Any]
    buffers: tuple[int, ...]  # hrx_core.engine.Access per buffer
    scalars: tuple[np.dtype, ...]  # type: ignore[type-arg]
    wants_grid: bool = False
    wants_block: bool = False

    @classmethod
    def of(cls, function: Callable[..., Any], buffers: Sequence[int], scalars: Sequence[Any]) -> KernelReference:
        try:
            params = inspect.signature(function).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        return cls(function, tuple(int(b) for b in buffers), tuple(np.dtype(s) for s in scalars), "grid" in params, "block" in params)


@attrs.define
class LoadedCodeObject:
    base: int
    code: CodeObject
    memory: FakeMemory
    references: Mapping[str, KernelReference]


@attrs.frozen
class Dispatch:
    """One decoded dispatch: which kernel, its geometry and where its arguments are."""

    loaded: LoadedCodeObject
    kernel: Any  # codeobject kernel record
    grid_items: tuple[int, int, int]  # work-items per dimension
    block: tuple[int, int, int]
    dims: int
    kernarg_address: int


class CodeObjects:
    """Code objects loaded into simulated device memory, by entry and descriptor address."""

    def __init__(self) -> None:
        self._by_entry: dict[int, tuple[LoadedCodeObject, Any]] = {}
        self._by_descriptor: dict[int, tuple[LoadedCodeObject, Any]] = {}
        self._loaded: list[LoadedCodeObject] = []
        self._kernargs: dict[int, tuple[tuple[int, int], ...]] = {}
        # reentrant: a garbage-collected hrx Buffer may free device memory (and so call
        # forget_memory) from inside any of these methods on the same thread
        self._lock = threading.RLock()

    def register(self, loaded: LoadedCodeObject) -> None:
        with self._lock:
            self._loaded.append(loaded)
            for kernel in loaded.code.kernels.values():
                self._by_entry[kernel.entry_address(loaded.base)] = (loaded, kernel)
                self._by_descriptor[kernel.descriptor_address(loaded.base)] = (loaded, kernel)

    def forget_memory(self, memory: FakeMemory) -> None:
        with self._lock:
            gone = [lo for lo in self._loaded if lo.memory is memory]
            for loaded in gone:
                self._loaded.remove(loaded)
                for kernel in loaded.code.kernels.values():
                    self._by_entry.pop(kernel.entry_address(loaded.base), None)
                    self._by_descriptor.pop(kernel.descriptor_address(loaded.base), None)

    def by_entry(self, address: int) -> tuple[LoadedCodeObject, Any] | None:
        with self._lock:
            return self._by_entry.get(address)

    def by_descriptor(self, address: int) -> tuple[LoadedCodeObject, Any] | None:
        with self._lock:
            return self._by_descriptor.get(address)

    def describe_kernargs(self, address: int, extents: Sequence[tuple[int, int]]) -> None:
        with self._lock:
            self._kernargs[address] = tuple((int(a), int(n)) for a, n in extents)

    def kernarg_extents(self, address: int) -> tuple[tuple[int, int], ...] | None:
        with self._lock:
            return self._kernargs.get(address)


def check_loaded(provider: FakeProvider, loaded: LoadedCodeObject, device: Any) -> None:
    """The load image must be in executable device memory at ``loaded.base``."""
    image = loaded.code.load_image(loaded.base)
    try:
        memory, offset = resolve(
            provider, AddressKind.GPU, loaded.base, len(image), device=device, need=MemoryAccess.EXECUTE | MemoryAccess.READ, what="code object"
        )
    except MemoryFault as exc:
        raise KernelFault(str(exc)) from None
    if memory is not loaded.memory:
        raise KernelFault("code object base does not lie in the registered memory")
    present = memory.device_view(offset, len(image))
    if not np.array_equal(present, np.frombuffer(image, dtype=np.uint8)):
        first = int(np.argmax(present != np.frombuffer(image, dtype=np.uint8)))
        raise KernelFault(
            f"device memory at {loaded.base:#x} does not hold the code object's load image "
            f"(first difference at byte {first}; segments misplaced or relocations not applied for this base?)"
        )


_HIDDEN_ZERO = {
    "hidden_global_offset_x",
    "hidden_global_offset_y",
    "hidden_global_offset_z",
    "hidden_none",
    "hidden_printf_buffer",
    "hidden_hostcall_buffer",
    "hidden_default_queue",
    "hidden_completion_action",
    "hidden_multigrid_sync_arg",
    "hidden_heap_v1",
    "hidden_dynamic_lds_size",
}


def execute(provider: FakeProvider, device: Any, dispatch: Dispatch) -> None:
    """Decode and check the kernel arguments of ``dispatch``, then run its reference."""
    kernel = dispatch.kernel
    reference = dispatch.loaded.references.get(kernel.name)
    if reference is None:
        raise KernelFault(f"kernel {kernel.name!r}: no reference was registered with its code object")
    size = kernel.kernarg_segment_size
    align = max(kernel.kernarg_segment_align, 4)
    if size == 0:
        raw = np.zeros(0, dtype=np.uint8)  # nothing to read: the kernel takes no arguments
    else:
        try:
            raw = device_bytes(
                provider, AddressKind.GPU, dispatch.kernarg_address, size, device=device, need=MemoryAccess.READ, alignment=align, what="kernarg segment"
            ).copy()
        except MemoryFault as exc:
            raise KernelFault(f"kernel {kernel.name!r}: {exc}") from None

    def field(arg: Any) -> int:
        return int.from_bytes(raw[arg.offset : arg.offset + arg.size].tobytes(), "little")

    explicit = [a for a in kernel.args if not a.value_kind.startswith("hidden_")]
    pointers = [a for a in explicit if a.value_kind == "global_buffer"]
    values = [a for a in explicit if a.value_kind == "by_value"]
    other = [a for a in explicit if a.value_kind not in ("global_buffer", "by_value")]
    if other:
        raise KernelFault(f"kernel {kernel.name!r}: unsupported argument kinds {[a.value_kind for a in other]}")
    if explicit != pointers + values:
        raise KernelFault(f"kernel {kernel.name!r}: HRX kernels take buffers first, then scalars")
    if len(pointers) != len(reference.buffers) or len(values) != len(reference.scalars):
        raise KernelFault(
            f"kernel {kernel.name!r}: the code object takes {len(pointers)} pointers and {len(values)} values, "
            f"its reference {len(reference.buffers)} buffers and {len(reference.scalars)} scalars"
        )

    gx, gy, gz = dispatch.grid_items
    bx, by, bz = dispatch.block
    expected_hidden = {
        "hidden_block_count_x": gx // bx,
        "hidden_block_count_y": gy // by,
        "hidden_block_count_z": gz // bz,
        "hidden_group_size_x": bx,
        "hidden_group_size_y": by,
        "hidden_group_size_z": bz,
        "hidden_remainder_x": gx % bx,
        "hidden_remainder_y": gy % by,
        "hidden_remainder_z": gz % bz,
        "hidden_grid_dims": dispatch.dims,
        "hidden_shared_base": provider.shared_aperture,
        "hidden_private_base": provider.private_aperture,
    }
    for arg in kernel.args:
        kind = arg.value_kind
        if not kind.startswith("hidden_"):
            continue
        value = field(arg)
        if kind in expected_hidden:
            if value != expected_hidden[kind]:
                raise KernelFault(
                    f"kernel {kernel.name!r}: {kind} at kernarg offset {arg.offset} is {value}, "
                    f"the dispatch needs {expected_hidden[kind]} (grid {dispatch.grid_items} work-items, block {dispatch.block})"
                )
        elif kind in _HIDDEN_ZERO:
            if value != 0:
                raise KernelFault(f"kernel {kernel.name!r}: {kind} must be 0 (nothing provides it), got {value:#x}")
        # other hidden kinds (queue_ptr and the like) are not interpreted

    extents = provider.code_objects.kernarg_extents(dispatch.kernarg_address)
    if extents is not None and len(extents) != len(pointers):
        raise KernelFault(
            f"kernel {kernel.name!r}: {len(extents)} pointer extents described for kernarg {dispatch.kernarg_address:#x}, "
            f"the kernel has {len(pointers)} pointers"
        )
    buffers = []
    for index, (arg, access) in enumerate(zip(pointers, reference.buffers)):
        if arg.size != 8:
            raise KernelFault(f"kernel {kernel.name!r}: pointer argument {index} is {arg.size} bytes")
        pointer = field(arg)
        need = MemoryAccess.READ | (MemoryAccess.WRITE if access & _WRITES else MemoryAccess(0))
        try:
            if extents is not None:
                described, nbytes = extents[index]
                if described != pointer:
                    raise KernelFault(
                        f"kernel {kernel.name!r}: pointer argument {index} at kernarg offset {arg.offset} is {pointer:#x}, "
                        f"but the engine packed {described:#x} there"
                    )
            else:
                memory, offset = resolve(provider, AddressKind.GPU, pointer, 1, device=device, need=need, what=f"pointer argument {index}")
                nbytes = memory.info.nbytes - offset
            view = device_bytes(provider, AddressKind.GPU, pointer, nbytes, device=device, need=need, what=f"pointer argument {index}")
        except MemoryFault as exc:
            raise KernelFault(f"kernel {kernel.name!r}: {exc}") from None
        if not access & _WRITES:
            view = view.view()
            view.flags.writeable = False
        buffers.append(view)
    scalars = []
    for index, (arg, dtype) in enumerate(zip(values, reference.scalars)):
        if arg.size != dtype.itemsize:
            raise KernelFault(f"kernel {kernel.name!r}: value argument {index} is {arg.size} bytes, the scalar is {dtype}")
        scalars.append(np.frombuffer(raw[arg.offset : arg.offset + arg.size].tobytes(), dtype=dtype)[0])

    kwargs: dict[str, Any] = {}
    groups = (-(-gx // bx), -(-gy // by), -(-gz // bz))
    if reference.wants_grid:
        kwargs["grid"] = groups
    if reference.wants_block:
        kwargs["block"] = dispatch.block
    try:
        reference.function(*buffers, *scalars, **kwargs)
    except Exception as exc:  # the kernel's own failure is a queue fault, as on hardware
        raise KernelFault(f"kernel {kernel.name!r} failed in its reference: {type(exc).__name__}: {exc}") from exc
