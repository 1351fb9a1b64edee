"""Memory placement across engines: where backing lives, who reaches it, and how
writes become visible. Engine-neutral policy; engines only export and import.

* :class:`MemoryPlacement` -- ``MemoryPlacement.Shared(device)``: backing that every
  engine of a fabric reaches (coherent host-visible memory owned by ``device``);
  ``MemoryPlacement.NpuLocal(device)``: storage of the NPU ``device`` itself.
* :class:`Fabric` -- ``allocation_profiles(devices, coherent)`` answers, before
  allocating, what access a complete set of devices gets; ``allocate`` creates
  backing for a placement; ``adopt(buffer, device)`` creates an alias of an owned
  allocation on another engine's device (export/import of the backing). The alias
  retains the original allocation and shares its host access guards (host mappings,
  pending device use) and visibility transitions (cache-maintenance state).
* :func:`visibility` (also ``Buffer.visibility``) -- for existing backing: whether
  the consumer reaches it, the release/acquire actions that make the producer's
  writes visible, and the scope of atomics per access width.
* :func:`prepare_release_host` / :func:`prepare_acquire_host` -- merge ranges and
  retain the host cache operations needed before device use of host writes
  (release) or before host reads of device writes (acquire).

Visibility is not ordering: execution dependencies still come from streams, events
and the runtime's hazards (which see an alias and its original as one allocation).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self, Union

import attrs

from .buffer import Allocation, Binding, Buffer, View, as_binding, backing_of
from .engine import CacheOp
from .errors import InvalidArgument, Unsupported

if TYPE_CHECKING:
    from .budget import MemoryBudget
    from .device import Device

HOST = "host"
#: A producer or consumer: a device, or the host CPU ("host").
Agent = Union["Device", str]


def _device(name: str, value: Any) -> Any:
    from .device import Device

    if not isinstance(value, Device):
        raise InvalidArgument(f"{name}: expected an hrx Device, got {type(value).__name__}")
    return value


# -- placements ---------------------------------------------------------------------


@attrs.frozen
class Shared:
    """Backing every engine of the fabric reaches: coherent host-visible memory of ``device``."""

    device: Device = attrs.field(validator=lambda i, a, v: _device("device", v))


@attrs.frozen
class NpuLocal:
    """Storage of the NPU ``device`` (other engines reach it only by importing it)."""

    device: Device = attrs.field(validator=lambda i, a, v: _device("device", v))

    def __attrs_post_init__(self) -> None:
        if self.device.info.kind != "npu":
            raise InvalidArgument(f"NpuLocal: {self.device.name} is a {self.device.info.kind} device, not an NPU")


class MemoryPlacement:
    """Where a new allocation lives: ``MemoryPlacement.Shared(device)`` or
    ``MemoryPlacement.NpuLocal(device)``."""

    Shared = Shared
    NpuLocal = NpuLocal


# -- aliases --------------------------------------------------------------------------


class AliasAllocation(Allocation):
    """An import of another allocation's backing on another device.

    It retains the original (released when the alias is freed) and shares its host
    access guards -- ``host_maps`` and ``pending`` are the original's objects, and
    the cache-maintenance flags read and write the original's -- so a host mapping
    of either rejects conflicting device use of both, and a device write through the
    alias needs the same INVALIDATE before host reads. It is never charged: the
    original carries the budget charge.
    """

    __slots__ = ("origin",)

    def __init__(self, device: Device, native: Any, origin: Allocation) -> None:
        self.origin = origin
        flags = (origin.host_dirty, origin.device_dirty)
        super().__init__(device, native, origin.nbytes, shared=origin.shared, external=origin)
        origin.host_dirty, origin.device_dirty = flags  # Allocation.__init__ wrote through
        self.pending = origin.pending
        self.host_maps = origin.host_maps
        self.records = origin.records  # launch records of either count for both
        origin.retain()
        self.on_free.append(lambda _alias: origin.release())

    @property
    def host_dirty(self) -> bool:
        return self.origin.host_dirty

    @host_dirty.setter
    def host_dirty(self, value: bool) -> None:
        self.origin.host_dirty = value

    @property
    def device_dirty(self) -> bool:
        return self.origin.device_dirty

    @device_dirty.setter
    def device_dirty(self, value: bool) -> None:
        self.origin.device_dirty = value


# -- profiles -------------------------------------------------------------------------


@attrs.frozen
class AllocationProfile:
    """One way to back memory for a complete set of devices.

    ``access`` maps each device name to "owner" (native memory) or "import" (an
    alias of the owner's backing); ``host`` is "coherent", "cache-maintained"
    (map with cache_control) or "none". :meth:`allocate` creates backing with it.
    """

    placement: Shared | NpuLocal
    devices: tuple[Any, ...]
    coherent: bool
    access: Mapping[str, str]
    host: str

    @property
    def owner(self) -> Device:
        return self.placement.device

    def allocate(self, nbytes: int, *, budget: MemoryBudget | None = None, fabric: Fabric | None = None) -> PlacedBuffer:
        """Allocate on the owner and import on every other device of the profile."""
        fabric = Fabric() if fabric is None else fabric
        owner = fabric.allocate(nbytes, self.placement, budget=budget, coherent=self.coherent)
        placed = PlacedBuffer(owner)
        try:
            for dev in self.devices:
                if dev is not self.owner:
                    placed._views[id(dev)] = fabric.adopt(owner, dev)
        except BaseException:
            placed.close()
            raise
        return placed


class PlacedBuffer:
    """Backing and its handle on every device of a profile (``placed.on(device)``)."""

    def __init__(self, owner: Buffer) -> None:
        self.buffer = owner
        self._views: dict[int, Buffer] = {id(owner.device): owner}

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def on(self, device: Device) -> Buffer:
        """The handle of this backing on ``device``."""
        try:
            return self._views[id(device)]
        except KeyError:
            raise InvalidArgument(f"device: {device.name} is not part of this allocation's profile") from None

    def close(self) -> None:
        for b in list(self._views.values()):
            b.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _host_visible(device: Device, shared: bool) -> bool:
    return shared or device.info.host_mappable


class Fabric:
    """Allocation and import across the engines of one machine."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: imports made through :meth:`adopt` (aliases created)
        self.imports = 0

    def allocation_profiles(self, devices: Sequence[Device], coherent: bool) -> list[AllocationProfile]:
        """Ways to back memory that every device in ``devices`` reaches (before any
        allocation). ``coherent=True`` keeps only coherent backing. Empty when no
        backing reaches them all."""
        if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence) or not devices:
            raise InvalidArgument("devices: expected a nonempty list of devices")
        if not isinstance(coherent, bool):
            raise InvalidArgument(f"coherent: expected a bool, got {type(coherent).__name__}")
        devs = tuple(_device(f"devices[{i}]", d) for i, d in enumerate(devices))
        out = []
        for owner in devs:
            options = []
            if owner.info.coherent_shared_memory:
                options.append(True)
            if not coherent:
                options.append(False)
            for shared in options:
                visible = _host_visible(owner, shared)
                access = {}
                for d in devs:
                    if d is owner:
                        access[d.name] = "owner"
                    elif (visible and d.info.imports_host_memory) or _same_domain(d, owner):
                        access[d.name] = "import"
                    else:
                        break
                else:
                    placement: Shared | NpuLocal
                    if shared or owner.info.kind != "npu":
                        placement = Shared(owner)
                    else:
                        placement = NpuLocal(owner)
                    host = "coherent" if shared else ("cache-maintained" if visible else "none")
                    out.append(AllocationProfile(placement, devs, shared, access, host))
        return out

    def allocate(self, nbytes: int, placement: Shared | NpuLocal, *, budget: MemoryBudget | None = None, coherent: bool | None = None) -> Buffer:
        """New backing for ``placement`` on its device. ``Shared`` gives coherent
        host-visible memory (``coherent=False``: ordinary host-mappable memory, which
        needs cache maintenance); ``NpuLocal`` ordinary NPU memory."""
        if isinstance(placement, Shared):
            dev = placement.device
            if coherent is False and dev.info.host_mappable:
                return dev.allocate(nbytes, budget=budget)
            if not dev.info.coherent_shared_memory:
                raise Unsupported(f"Shared: {dev.name} has no coherent shared memory")
            return dev.allocate_shared(nbytes, budget=budget)
        if isinstance(placement, NpuLocal):
            return placement.device.allocate(nbytes, budget=budget)
        raise InvalidArgument(f"placement: expected MemoryPlacement.Shared or .NpuLocal, got {type(placement).__name__}")

    def adopt(self, buffer: Buffer, device: Device) -> Buffer:
        """An alias of ``buffer``'s whole allocation on ``device`` (export/import of
        the backing). Offsets are the same as in the original allocation."""
        if not isinstance(buffer, Buffer):
            raise InvalidArgument(f"buffer: expected a Buffer, got {type(buffer).__name__}")
        device = _device("device", device)
        origin = backing_of(buffer.allocation)
        if origin.device is device:  # back home: another handle of the original
            return Buffer(device, origin.retain(), buffer._base, buffer.nbytes)
        if origin.external is not None and not isinstance(origin, AliasAllocation):
            raise Unsupported("adopt: wrapped external memory cannot be exported")
        native = device.native.import_buffer(origin.native)
        if native is None:
            raise Unsupported(
                f"adopt: {device.name} cannot import memory of {origin.device.name} "
                f"({'shared' if origin.shared else 'device'} memory); allocate it with a profile from allocation_profiles"
            )
        alias = AliasAllocation(device, native, origin)
        with self._lock:
            self.imports += 1
        return Buffer(device, alias, buffer._base, buffer.nbytes)


# -- visibility --------------------------------------------------------------------------


@attrs.frozen
class Visibility:
    """How writes of ``producer`` to a backing become visible to ``consumer``.

    ``release``: actions after the producer's writes (e.g. "host-cache-flush",
    "device-release-system"); ``acquire``: actions before the consumer's reads
    (e.g. "host-cache-invalidate", "device-acquire-system"); ``atomic_scopes``: per
    access width in bytes, the scope atomics have between the two ("device",
    "system" or "none"). These describe visibility only; order the work itself with
    events or the runtime.
    """

    producer: str
    consumer: str
    reachable: bool
    coherent: bool
    release: tuple[str, ...]
    acquire: tuple[str, ...]
    atomic_scopes: Mapping[int, str]
    note: str = ""
    #: Atomic operations that do NOT act on this backing between these agents although
    #: ``atomic_scopes`` allows atomics of their width (e.g. "float-max": on gfx1151 a
    #: floating-point atomic max does not update coherent memory -- use an integer
    #: compare/exchange loop over the float's bits instead).
    unsupported_atomics: tuple[str, ...] = ()


def _agent_name(a: Any, name: str = "agent") -> str:
    return HOST if isinstance(a, str) and a == HOST else _device(name, a).name


def _same_domain(a: Any, b: Any) -> bool:
    """Both devices share a memory domain (they import each other's allocations)."""
    return bool(a.info.memory_domain) and a.info.memory_domain == b.info.memory_domain


def _reaches(agent: Any, origin: Allocation) -> bool:
    if agent == HOST:
        return origin.native.host_view() is not None
    if agent is origin.device or _same_domain(agent, origin.device):
        return True
    return bool(agent.info.imports_host_memory and origin.native.host_view() is not None)


def visibility(buffer: Buffer | View | Binding, producer: Agent, consumer: Agent) -> Visibility:
    """Describe reach, release/acquire actions and atomic scopes of ``buffer``'s
    backing from ``producer`` to ``consumer`` (devices or "host")."""
    b = as_binding("buffer", buffer)
    origin = backing_of(b.view.buffer.allocation)
    p, c = _agent_name(producer, "producer"), _agent_name(consumer, "consumer")
    coherent = origin.shared
    missing = [n for n, a in ((p, producer), (c, consumer)) if not _reaches(a, origin)]
    if missing:
        return Visibility(p, c, False, coherent, (), (), {4: "none", 8: "none"},
                          f"{', '.join(missing)} cannot reach this {origin.device.name} allocation")
    if p == c:
        scope = "system" if p == HOST else "device"
        return Visibility(p, c, True, coherent, (), (), {4: scope, 8: scope}, "same agent: program order")
    release: list[str] = []
    acquire: list[str] = []
    if p == HOST:
        release.append("host-store-release" if coherent else "host-cache-flush")
    else:
        release.append("device-release-system")
    if c == HOST:
        acquire.append("host-load-acquire" if coherent else "host-cache-invalidate")
    else:
        acquire.append("device-acquire-system")
    scope = "system" if coherent else "none"
    note = "" if coherent else "non-coherent backing: no cross-agent atomics; cache maintenance is required"
    unsupported: tuple[str, ...] = ()
    if coherent:
        for agent in (producer, consumer):
            if not isinstance(agent, str):  # a Device (HOST is the only str agent)
                caveats = agent.info.properties.get("coherent_unsupported_atomics", ())
                unsupported += tuple(x for x in caveats if x not in unsupported)
    return Visibility(p, c, True, coherent, tuple(release), tuple(acquire), {4: scope, 8: scope}, note, unsupported)


# -- host cache operations -----------------------------------------------------------


class HostCacheOps:
    """Merged host ranges and the cache operations they need, retained until closed.

    ``ranges``: (allocation, start, end) after merging overlapping and adjacent
    ranges; ``operations``: (CacheOp, start, length) per non-coherent allocation
    (coherent backing needs none). :meth:`apply` performs them (checked like
    ``Buffer.cache_control``: pending device work on the bytes raises AccessConflict).
    """

    def __init__(self, op: CacheOp, merged: list[tuple[Allocation, int, int]]) -> None:
        self.op = op
        self.ranges = merged
        self._handles: list[tuple[Buffer, int, int]] = []
        for alloc, start, end in merged:
            if not alloc.shared:
                self._handles.append((Buffer(alloc.device, alloc.retain()), start, end - start))
        self.closed = False

    @property
    def operations(self) -> list[tuple[CacheOp, int, int]]:
        return [(self.op, start, length) for _, start, length in self._handles]

    def apply(self) -> None:
        if self.closed:
            raise InvalidArgument("host cache operations are closed")
        for handle, start, length in self._handles:
            handle.cache_control(self.op, start, length)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for handle, _, _ in self._handles:
                handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _merge(name: str, ranges: Iterable[Buffer | View | Binding]) -> list[tuple[Allocation, int, int]]:
    from .execution.graph import merge_accesses  # imported here: execution imports this module

    if isinstance(ranges, (Buffer, View, Binding)):
        ranges = [ranges]
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Iterable):
        raise InvalidArgument(f"{name}: expected Buffers, Views or Bindings, got {type(ranges).__name__}")
    spans = []
    for i, r in enumerate(ranges):
        v = as_binding(f"{name}[{i}]", r).view
        spans.append((backing_of(v.buffer.allocation), v.start, v.end, False))
    return [(alloc, start, end) for alloc, start, end, _ in merge_accesses(spans)]


def prepare_release_host(ranges: Iterable[Buffer | View | Binding]) -> HostCacheOps:
    """Cache operations that make host writes to ``ranges`` visible to devices (FLUSH)."""
    return HostCacheOps(CacheOp.FLUSH, _merge("ranges", ranges))


def prepare_acquire_host(ranges: Iterable[Buffer | View | Binding]) -> HostCacheOps:
    """Cache operations that make device writes to ``ranges`` visible to host reads (INVALIDATE)."""
    return HostCacheOps(CacheOp.INVALIDATE, _merge("ranges", ranges))


def __getattr__(name: str) -> Any:
    """``placement.ResidentSession`` / ``ResidentStartup`` (the specification's
    ``fabric::ResidentSession``): the resident exchange, in :mod:`hrx_core.resident`."""
    if name in ("ResidentSession", "ResidentStartup"):
        from . import resident

        return getattr(resident, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "HOST",
    "AliasAllocation",
    "AllocationProfile",
    "Fabric",
    "HostCacheOps",
    "MemoryPlacement",
    "NpuLocal",
    "PlacedBuffer",
    "Shared",
    "Visibility",
    "backing_of",
    "prepare_acquire_host",
    "prepare_release_host",
    "visibility",
]
