"""Memory of the amdgpu engine: buffers, and the small arenas queues carve commands from.

Placement follows the specification: ordinary buffers live in cacheable system
memory (GTT) and need explicit host cache maintenance around direct host access;
``allocate(shared=True)`` gives coherent GTT memory (the core stages transfers
through it). Every allocation is SHAREABLE, so the NPU engine can import it
(an export/import of the backing, a dma-buf on hardware).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_amdf.constants import HostCacheOperation, MemoryAccess, MemoryFlag
from hrx_amdf.provider import DeviceAccess, HostMapping, Memory
from hrx_core.engine import CacheOp, NativeBuffer
from hrx_core.errors import InvalidArgument

if TYPE_CHECKING:
    from .device import AmdgpuDevice

#: Access every engine allocation grants the GPU (code and commands are executed).
RWX = MemoryAccess.READ | MemoryAccess.WRITE | MemoryAccess.EXECUTE


class AmdgpuBuffer(NativeBuffer):
    """A provider memory object with its GPU address and a lazily created host mapping."""

    def __init__(self, device: AmdgpuDevice, memory: Memory, nbytes: int, *, coherent: bool, imported: Any = None) -> None:
        self.device = device
        self.memory = memory
        #: What the NPU engine (or any importer) exports and imports.
        self.amdf_memory = memory
        self.nbytes = nbytes
        self.coherent = coherent
        self.address = memory.address()
        self._mapping: HostMapping | None = None
        self._lock = threading.Lock()
        self._imported = imported  # the exporting buffer, kept alive while the import lives
        self.freed = False

    def mapping(self) -> HostMapping:
        mapping = self._mapping
        if mapping is None:
            with self._lock:
                if self._mapping is None:
                    self._mapping = self.memory.map()
                mapping = self._mapping
        return mapping

    def host_view(self) -> np.ndarray | None:
        if self.freed:
            raise InvalidArgument("buffer was freed")
        return self.mapping().array[: self.nbytes]

    def cache_control(self, op: CacheOp, offset: int, length: int) -> None:
        if self.coherent or length <= 0:
            return
        operation = HostCacheOperation.FLUSH if op is CacheOp.FLUSH else HostCacheOperation.INVALIDATE
        self.mapping().cache_control(operation, offset, length)

    def pointer(self) -> int:
        return self.address

    def free(self) -> None:
        if self.freed:
            return
        self.freed = True
        self.device._release_buffer(self)

    def _destroy(self) -> None:
        with self._lock:
            mapping, self._mapping = self._mapping, None
        if mapping is not None:
            mapping.destroy()
        self.memory.destroy()
        self._imported = None

    def __repr__(self) -> str:
        kind = "coherent" if self.coherent else "cached"
        return f"<AmdgpuBuffer {self.nbytes} B {kind} at {self.address:#x}>"


class Arena:
    """A ring of command/kernarg bytes in coherent, executable memory.

    Queues carve each submission's indirect buffer, kernel arguments and fill patterns
    from it; a chunk is reused once the submission that used it has retired (the
    queue's retire counter, written by the device at the end of the submission, has
    passed its sequence number). Oversized chunks get their own allocation."""

    def __init__(self, device: AmdgpuDevice, nbytes: int) -> None:
        self.device = device
        self.nbytes = nbytes
        self.memory = device._create_memory(nbytes, coherent=True)
        self.base = self.memory.address()
        self.mapping = self.memory.map()
        self.bytes = self.mapping.array
        self._live: list[tuple[int, int, int]] = []  # (start, end, sequence) in allocation order
        self._extra: list[tuple[Memory, Any, int]] = []

    def allocate(self, nbytes: int, sequence: int, retired: int) -> tuple[int, np.ndarray] | None:
        """(GPU address, host bytes) of ``nbytes`` (64-byte aligned) for submission
        ``sequence``, or None when the ring is full of unretired chunks."""
        self._reclaim(retired)
        size = -(-max(nbytes, 1) // 64) * 64
        if size > self.nbytes // 2:
            memory = self.device._create_memory(size, coherent=True)
            mapping = memory.map()
            self._extra.append((memory, mapping, sequence))
            return memory.address(), mapping.array[:size]
        if not self._live:
            start = 0
        else:
            tail = self._live[0][0]
            head = self._live[-1][1]
            wrapped = self._live[-1][0] < tail  # the newest chunk starts before the oldest
            if not wrapped and head + size <= self.nbytes:
                start = head  # [tail, head) is live; append after it
            elif not wrapped and size <= tail:
                start = 0  # wrap; the rest of this lap stays unused
            elif wrapped and head + size <= tail:
                start = head  # live: [tail, end of lap) and [0, head)
            else:
                return None
        end = start + size
        self._live.append((start, end, sequence))
        return self.base + start, self.bytes[start:end]

    def _reclaim(self, retired: int) -> None:
        while self._live and self._live[0][2] <= retired:
            self._live.pop(0)
        if self._extra:
            keep = []
            for memory, mapping, sequence in self._extra:
                if sequence <= retired:
                    mapping.destroy()
                    memory.destroy()
                else:
                    keep.append((memory, mapping, sequence))
            self._extra = keep

    def idle(self, retired: int) -> bool:
        self._reclaim(retired)
        return not self._live and not self._extra

    def destroy(self) -> None:
        for memory, mapping, _ in self._extra:
            mapping.destroy()
            memory.destroy()
        self._extra = []
        self.mapping.destroy()
        self.memory.destroy()


__all__ = ["AmdgpuBuffer", "Arena", "RWX", "DeviceAccess", "MemoryFlag"]
