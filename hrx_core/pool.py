"""BufferPool: bounded best-fit reuse of allocations.

``pool.allocate(n)`` leases the smallest idle free allocation that holds ``n`` bytes
(and wastes at most half of it), or allocates a new one. Closing (or dropping) the
:class:`PooledBuffer` returns the allocation to the pool. The pool keeps at most
``max_free_bytes`` of free allocations and releases the least recently returned
beyond that.

The lease is the caller's contract: a recorded graph that retains an allocation's
native backing does not stop the pool from handing it out again once the lease is
closed. Keep a pooled buffer leased until the recorded work that uses it is no
longer needed. Pending eager work is respected: an allocation whose submitted work
has not finished is not reused until it has.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .buffer import Allocation, Buffer, check_int

if TYPE_CHECKING:
    from .budget import MemoryBudget
    from .device import Device


class PooledBuffer(Buffer):
    """A buffer leased from a :class:`BufferPool`; ``close()`` returns it."""

    __slots__ = ("pool",)

    def __init__(self, pool: BufferPool, alloc: Allocation, nbytes: int) -> None:
        super().__init__(pool.device, alloc, 0, nbytes)
        self.pool = pool

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.pool._return(self._alloc)


class BufferPool:
    """Bounded best-fit reuse of device allocations."""

    def __init__(
        self,
        device: Device,
        *,
        max_free_bytes: int = 1 << 30,
        shared: bool = False,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.device = device
        self.max_free_bytes = check_int("max_free_bytes", max_free_bytes)
        self.shared = shared
        self.budget = budget
        self._free: list[Allocation] = []  # least recently returned first
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self._closed = False

    @property
    def free_bytes(self) -> int:
        return sum(a.nbytes for a in self._free)

    def allocate(self, nbytes: int) -> PooledBuffer:
        """Lease at least ``nbytes`` (the buffer's ``nbytes`` is exactly ``nbytes``)."""
        nbytes = check_int("nbytes", nbytes, minimum=1)
        with self._lock:
            best = None
            for alloc in self._free:
                if nbytes <= alloc.nbytes <= 2 * nbytes and (best is None or alloc.nbytes < best.nbytes):
                    if not alloc.quarantined and not alloc.busy():
                        best = alloc
            if best is not None:
                self._free.remove(best)
                self.hits += 1
                return PooledBuffer(self, best, nbytes)
            self.misses += 1
        alloc = self.device._allocate(nbytes, shared=self.shared, budget=self.budget, what="pooled buffer")
        return PooledBuffer(self, alloc, nbytes)

    def _return(self, alloc: Allocation) -> None:
        with self._lock:
            if self._closed:
                release = [alloc]
            else:
                self._free.append(alloc)
                release = []
                total = sum(a.nbytes for a in self._free)
                while total > self.max_free_bytes and self._free:
                    victim = self._free.pop(0)
                    total -= victim.nbytes
                    release.append(victim)
        for a in release:
            a.release()

    def trim(self) -> None:
        """Release every free allocation."""
        with self._lock:
            release, self._free = self._free, []
        for a in release:
            a.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.trim()

    def __repr__(self) -> str:
        return f"<hrx.BufferPool {len(self._free)} free ({self.free_bytes} bytes), hits={self.hits} misses={self.misses}>"
