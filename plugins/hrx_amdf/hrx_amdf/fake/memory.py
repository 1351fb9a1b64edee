"""Memory of the simulated Strix Halo: backings, address spaces and a host cache model.

The APU's devices share system memory, so every backing is host memory (a numpy
array) and commands are executed by reading and writing it. What makes the
simulation useful is that it refuses what hardware would not do:

* **Addresses.** Each backing gets a distinct address per consuming interface -- a
  GPU virtual address, an XDNA DMA address, an XDNA firmware address -- from
  separate ranges with unmapped guard gaps, so an address of the wrong kind, one past
  the end of an allocation or one into freed memory resolves to nothing and faults.
* **Permissions.** A device reaches a backing only through an access established at
  creation or import, with the access bits (read, write, execute) it was given.
* **Host caches.** Ordinary system memory (``HOST_VISIBLE`` without ``HOST_COHERENT``)
  is mapped through a simulated write-back CPU cache: host stores stay in the cache
  until ``cache_control(FLUSH)`` writes the dirty bytes back, and host loads keep
  seeing cached bytes until ``INVALIDATE`` (write back dirty bytes, then reload).
  Missing maintenance therefore shows up as wrong bytes, deterministically. Coherent
  and write-combined memory is mapped directly.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..constants import (
    AddressKind,
    AtomicScope,
    ExternalMemoryType,
    HostCacheability,
    HostCacheOperation,
    MapFlag,
    MemoryAccess,
    MemoryClass,
    MemoryFlag,
    StatusCode,
)
from ..errors import AmdfError, error_for, make_status
from ..provider import (
    CacheTransition,
    DeviceAccess,
    DeviceSite,
    ExternalMemory,
    HostMapping,
    HostMappingInfo,
    HostSite,
    Memory,
    MemoryInfo,
    PairInfo,
)

if TYPE_CHECKING:
    from . import FakeProvider

PAGE = 4096
#: Unmapped gap after every allocation, so running off the end faults.
GUARD = 1 << 21

#: First address of each interface's range (distinct so kinds cannot be mixed up).
ADDRESS_BASES = {
    AddressKind.GPU: 0x0000_1000_0000_0000,
    AddressKind.XDNA_DMA: 0x0000_4000_0000_0000,
    AddressKind.XDNA_FIRMWARE: 0x0000_7000_0000_0000,
}


def fail(call: str, code: StatusCode, detail: str) -> AmdfError:
    return error_for(call, make_status(code), detail)


class MemoryFault(Exception):
    """A device access the hardware would fault on (resolved by the queue that made it)."""


def _aligned_zeros(nbytes: int, alignment: int = PAGE) -> np.ndarray:
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + nbytes]


class HostCache:
    """A write-back CPU cache over one backing (see the module docstring).

    ``lines`` holds what host loads and stores see; ``clean`` what was last loaded
    from or written back to memory, so dirty bytes are those that differ."""

    def __init__(self, backing: np.ndarray) -> None:
        self.backing = backing
        # host addresses of the lines keep the backing's (page) alignment
        self.lines = _aligned_zeros(len(backing))
        self.lines[:] = backing
        self.clean = backing.copy()
        self.lock = threading.Lock()

    def flush(self, start: int, end: int) -> None:
        with self.lock:
            self.flush_locked(start, end)

    def invalidate(self, start: int, end: int) -> None:
        # x86 has no discard: invalidation writes dirty lines back (CLFLUSH), then reloads.
        with self.lock:
            self.flush_locked(start, end)
            self.lines[start:end] = self.backing[start:end]
            self.clean[start:end] = self.backing[start:end]

    def flush_locked(self, start: int, end: int) -> None:
        lines, clean = self.lines[start:end], self.clean[start:end]
        dirty = lines != clean
        if dirty.any():
            self.backing[start:end][dirty] = lines[dirty]
            clean[dirty] = lines[dirty]


class Access:
    """One established device access of a backing."""

    def __init__(self, ordinal: int, device: Any, access: MemoryAccess, flags: MemoryFlag, kinds: frozenset[AddressKind]):
        self.ordinal = ordinal
        self.device = device
        self.access = access
        self.flags = flags
        self.kinds = kinds
        self.addresses: dict[AddressKind, int] = {}


class Backing:
    """Physical storage shared by the memories created over it (an export/import
    keeps one backing)."""

    _ids = itertools.count(1)

    def __init__(self, nbytes: int, memory_class: MemoryClass, flags: MemoryFlag, cacheability: HostCacheability, model_cache: bool):
        self.id = next(self._ids)
        self.nbytes = nbytes
        self.memory_class = memory_class
        self.flags = flags
        self.cacheability = cacheability
        self.array = _aligned_zeros(max(nbytes, 1))[:nbytes]
        self.cache: HostCache | None = None
        self.cached_host = (
            model_cache
            and bool(flags & MemoryFlag.HOST_VISIBLE)
            and not flags & MemoryFlag.HOST_COHERENT
            and cacheability == HostCacheability.WRITE_BACK
        )
        self.references = 0  # memories over this backing
        self.lock = threading.Lock()

    def host_cache(self) -> HostCache:
        with self.lock:
            if self.cache is None:
                self.cache = HostCache(self.array)
            return self.cache


class AddressSpace:
    """Maps addresses of one interface kind to (memory, offset)."""

    def __init__(self, kind: AddressKind) -> None:
        self.kind = kind
        self._next = ADDRESS_BASES[kind]
        self._starts: list[int] = []
        self._entries: list[tuple[int, int, FakeMemory, int]] = []  # start, end, memory, access ordinal
        self._lock = threading.Lock()

    def assign(self, memory: FakeMemory, ordinal: int, nbytes: int, alignment: int) -> int:
        with self._lock:
            align = max(alignment, PAGE)
            start = -(-self._next // align) * align
            end = start + max(nbytes, 1)
            self._next = -(-(end + GUARD) // PAGE) * PAGE
            index = bisect.bisect(self._starts, start)
            self._starts.insert(index, start)
            self._entries.insert(index, (start, end, memory, ordinal))
            return start

    def release(self, start: int) -> None:
        with self._lock:
            index = bisect.bisect_left(self._starts, start)
            if index < len(self._starts) and self._starts[index] == start:
                del self._starts[index]
                del self._entries[index]

    def lookup(self, address: int) -> tuple[int, int, FakeMemory, int] | None:
        with self._lock:
            index = bisect.bisect(self._starts, address) - 1
            if index < 0:
                return None
            entry = self._entries[index]
            return entry if entry[0] <= address < entry[1] else None


class FakeExternalMemory(ExternalMemory):
    """An exported range. The payload is the backing itself: the simulation stands in
    for the dma-buf, which it cannot create for memory it does not own natively."""

    def __init__(self, memory: FakeMemory, type: ExternalMemoryType, offset: int, nbytes: int) -> None:
        self.type = type
        self.nbytes = nbytes
        self.source_offset = offset
        self._memory: FakeMemory | None = memory
        self._backing: Backing | None = memory.backing
        with memory.backing.lock:
            memory.backing.references += 1

    def take(self) -> tuple[Backing, int, int]:
        backing = self._backing
        if backing is None:
            raise fail("memory_import", StatusCode.INVALID_ARGUMENT, "the external memory is empty (released or imported)")
        self._backing = None
        self._memory = None
        return backing, self.source_offset, self.nbytes

    def release(self) -> None:
        backing, self._backing, self._memory = self._backing, None, None
        if backing is not None:
            with backing.lock:
                backing.references -= 1


class FakeHostMapping(HostMapping):
    def __init__(self, memory: FakeMemory, offset: int, nbytes: int, flags: MapFlag) -> None:
        self.memory = memory
        backing = memory.backing
        self._cache = backing.host_cache() if backing.cached_host else None
        start = memory.offset + offset
        source = self._cache.lines if self._cache is not None else backing.array
        array = source[start : start + nbytes]
        if not flags & MapFlag.WRITE:
            array = array.view()
            array.flags.writeable = False
        self.array = array
        self._start = start
        self._destroyed = False
        cached = self._cache is not None
        host_op = lambda op: CacheTransition(kind=2 if cached else 1, executor=4 if cached else 0, operation=0, host_operation=op)  # noqa: E731
        self.info = HostMappingInfo(
            flags=flags,
            cacheability=backing.cacheability,
            address=int(array.ctypes.data),
            offset=offset,
            nbytes=nbytes,
            cache_line_size=64,
            flush=host_op(HostCacheOperation.FLUSH),
            invalidate=host_op(HostCacheOperation.INVALIDATE),
        )

    def cache_control(self, operation: HostCacheOperation, offset: int, nbytes: int) -> None:
        call = "host_mapping_cache_control"
        if self._destroyed:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "mapping destroyed")
        if not isinstance(operation, int) or operation not in (HostCacheOperation.FLUSH, HostCacheOperation.INVALIDATE):
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"operation {operation!r}")
        if offset < 0 or nbytes < 0 or offset + nbytes > self.info.nbytes:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"[{offset}, {offset + nbytes}) outside the {self.info.nbytes}-byte mapping")
        if nbytes == 0:
            return
        if operation == HostCacheOperation.FLUSH and not self.info.flags & MapFlag.WRITE:
            raise fail(call, StatusCode.FAILED_PRECONDITION, "flush needs a writable mapping")
        if operation == HostCacheOperation.INVALIDATE and not self.info.flags & MapFlag.READ:
            raise fail(call, StatusCode.FAILED_PRECONDITION, "invalidate needs a readable mapping")
        if self._cache is None:
            return  # coherent or write-combined: nothing is cached
        # Maintenance touches whole cache lines, as the hardware does.
        start = self._start + offset
        end = start + nbytes
        lo = self.memory.offset + ((start - self.memory.offset) // 64) * 64
        hi = min(self.memory.offset + self.memory.info.nbytes, -(-(end - self.memory.offset) // 64) * 64 + self.memory.offset)
        if operation == HostCacheOperation.FLUSH:
            self._cache.flush(lo, hi)
        else:
            self._cache.invalidate(lo, hi)

    def destroy(self) -> None:
        if self._destroyed:
            raise fail("host_mapping_destroy", StatusCode.INVALID_ARGUMENT, "mapping already destroyed")
        self._destroyed = True
        self.memory._mappings.discard(self)


class FakeMemory(Memory):
    """A memory object over (a range of) a backing, with its device accesses."""

    def __init__(
        self,
        provider: FakeProvider,
        backing: Backing,
        offset: int,
        nbytes: int,
        profile: int,
        accesses: Sequence[DeviceAccess],
        alignment: int,
    ) -> None:
        self.provider = provider
        self.backing = backing
        self.offset = offset
        self.alive = True
        self._mappings: set[FakeHostMapping] = set()
        self.accesses: list[Access] = []
        with backing.lock:
            backing.references += 1
        flags = backing.flags
        for ordinal, request in enumerate(accesses):
            access = Access(ordinal, request.device, request.access, request.flags, request.address_kinds)
            for kind in sorted(request.address_kinds):
                access.addresses[kind] = provider.address_space(kind).assign(self, ordinal, nbytes, alignment)
            self.accesses.append(access)
        self.info = MemoryInfo(
            profile=profile,
            memory_class=backing.memory_class,
            access_count=len(self.accesses),
            flags=flags,
            nbytes=nbytes,
            alignment=max(alignment, PAGE),
            native_bytes=-(-nbytes // PAGE) * PAGE,
        )

    # -- Memory API ------------------------------------------------------------------

    def _check_alive(self, call: str) -> None:
        if not self.alive:
            raise fail(call, StatusCode.INVALID_ARGUMENT, "memory was destroyed")

    def address(self, access_ordinal: int = 0, kind: AddressKind = AddressKind.GPU) -> int:
        call = "memory_query_address"
        self._check_alive(call)
        if not isinstance(kind, int) or kind not in AddressKind.__members__.values():
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"unknown address kind {kind!r}")
        if not 0 <= access_ordinal < len(self.accesses):
            raise fail(call, StatusCode.OUT_OF_RANGE, f"access ordinal {access_ordinal} of {len(self.accesses)}")
        address = self.accesses[access_ordinal].addresses.get(AddressKind(kind))
        if address is None:
            raise fail(call, StatusCode.UNSUPPORTED, f"access {access_ordinal} has no {AddressKind(kind).name} address")
        return address

    def map(self, offset: int = 0, nbytes: int | None = None, flags: MapFlag = MapFlag.READ | MapFlag.WRITE) -> FakeHostMapping:
        call = "memory_map"
        self._check_alive(call)
        if not self.info.flags & MemoryFlag.HOST_VISIBLE:
            raise fail(call, StatusCode.UNSUPPORTED, "memory is not HOST_VISIBLE")
        size = self.info.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or size <= 0 or offset + size > self.info.nbytes:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"[{offset}, {offset + size}) outside {self.info.nbytes} bytes")
        if not flags or int(flags) & ~int(MapFlag.READ | MapFlag.WRITE):
            raise fail(call, StatusCode.INVALID_ARGUMENT, f"map flags {flags!r}")
        mapping = FakeHostMapping(self, offset, size, MapFlag(flags))
        self._mappings.add(mapping)
        return mapping

    def export(self, type: ExternalMemoryType = ExternalMemoryType.DMA_BUF_FD, offset: int = 0, nbytes: int | None = None) -> FakeExternalMemory:
        call = "memory_export"
        self._check_alive(call)
        if type != ExternalMemoryType.DMA_BUF_FD:
            raise fail(call, StatusCode.UNSUPPORTED, f"{ExternalMemoryType(type).name} exports are not supported")
        if not self.info.flags & MemoryFlag.SHAREABLE:
            raise fail(call, StatusCode.UNSUPPORTED, "memory was not created SHAREABLE")
        size = self.info.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or size <= 0 or offset + size > self.info.nbytes or offset % PAGE:
            raise fail(call, StatusCode.OUT_OF_RANGE, f"export range [{offset}, {offset + size}) of {self.info.nbytes} bytes")
        return FakeExternalMemory(self, ExternalMemoryType.DMA_BUF_FD, self.offset + offset, size)

    def pair_info(self, producer: DeviceSite | HostSite, consumer: DeviceSite | HostSite) -> PairInfo:
        call = "memory_query_pair_info"
        self._check_alive(call)
        sites: list[Access | None] = []  # None: the host side of the pair
        for site in (producer, consumer):
            if isinstance(site, HostSite):
                if not isinstance(site.mapping, FakeHostMapping) or site.mapping.memory.backing is not self.backing:
                    raise fail(call, StatusCode.FAILED_PRECONDITION, "host site maps another backing")
                sites.append(None)
            elif isinstance(site, DeviceSite):
                memory = site.memory
                if not isinstance(memory, FakeMemory) or memory.backing is not self.backing:
                    raise fail(call, StatusCode.FAILED_PRECONDITION, "device site on another backing")
                if not 0 <= site.access_ordinal < len(memory.accesses):
                    raise fail(call, StatusCode.OUT_OF_RANGE, f"access ordinal {site.access_ordinal}")
                sites.append(memory.accesses[site.access_ordinal])
            else:
                raise fail(call, StatusCode.INVALID_ARGUMENT, f"site {site!r}")
        coherent = bool(self.backing.flags & MemoryFlag.HOST_COHERENT)
        none = CacheTransition(kind=1, executor=0, operation=0)
        host_flush = CacheTransition(kind=2, executor=4, operation=1, host_operation=HostCacheOperation.FLUSH)
        host_invalidate = CacheTransition(kind=2, executor=4, operation=2, host_operation=HostCacheOperation.INVALIDATE)
        queue_release = CacheTransition(kind=3, executor=1, operation=1)
        queue_acquire = CacheTransition(kind=3, executor=1, operation=2)
        prod, cons = sites
        release = none if coherent else (host_flush if prod is None else queue_release)
        acquire = none if coherent else (host_invalidate if cons is None else queue_acquire)
        system = prod is None or cons is None or prod.device is not cons.device
        scope = AtomicScope.SYSTEM if system else AtomicScope.DEVICE
        # gfx1151 does not make float atomics visible in coherent memory; integer
        # atomics of both widths are reported at the pair's scope.
        return PairInfo(reachable=True, release=release, acquire=acquire, atomic_scope_32=scope, atomic_scope_64=scope)

    def destroy(self) -> None:
        call = "memory_destroy"
        self._check_alive(call)
        if self._mappings:
            raise fail(call, StatusCode.BUSY, f"{len(self._mappings)} host mapping(s) still live")
        self.alive = False
        for access in self.accesses:
            for kind, address in access.addresses.items():
                self.provider.address_space(kind).release(address)
        with self.backing.lock:
            self.backing.references -= 1
        self.provider._memory_destroyed(self)

    # -- device side (used by the command processors) --------------------------------

    def device_view(self, offset: int, nbytes: int) -> np.ndarray:
        """The bytes a device access sees (the backing; host caches are separate)."""
        start = self.offset + offset
        return self.backing.array[start : start + nbytes]


def resolve(
    provider: FakeProvider,
    kind: AddressKind,
    address: int,
    nbytes: int,
    *,
    device: Any,
    need: MemoryAccess,
    alignment: int = 1,
    what: str = "access",
) -> tuple[FakeMemory, int]:
    """Resolve a device access of ``nbytes`` at ``address``; MemoryFault if the
    hardware would fault (unmapped, freed, beyond the allocation, not permitted for
    ``device``, misaligned)."""
    if address % alignment:
        raise MemoryFault(f"{what} at {address:#x} is not {alignment}-byte aligned")
    entry = provider.address_space(kind).lookup(address)
    if entry is None:
        raise MemoryFault(f"{what} at {address:#x}: no {kind.name} mapping there (unmapped, freed or of another kind)")
    start, end, memory, ordinal = entry
    if address + max(nbytes, 1) > end:
        raise MemoryFault(
            f"{what} [{address:#x}, {address + nbytes:#x}) runs past the end of its {end - start}-byte allocation at {start:#x}"
        )
    access = memory.accesses[ordinal]
    if access.device is not device:
        raise MemoryFault(f"{what} at {address:#x}: the allocation's access {ordinal} belongs to another device")
    if need & ~access.access:
        raise MemoryFault(f"{what} at {address:#x} needs {MemoryAccess(need)!r} but the access grants {access.access!r}")
    return memory, address - start


def device_bytes(provider: FakeProvider, kind: AddressKind, address: int, nbytes: int, *, device: Any, need: MemoryAccess, alignment: int = 1, what: str = "access") -> np.ndarray:
    """The device-visible bytes of one checked access (see :func:`resolve`)."""
    memory, offset = resolve(provider, kind, address, nbytes, device=device, need=need, alignment=alignment, what=what)
    return memory.device_view(offset, nbytes)
