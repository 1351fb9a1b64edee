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

import collections
import threading
from typing import TYPE_CHECKING

from .buffer import Allocation, Buffer, check_int
from .errors import InvalidArgument

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

    def __del__(self) -> None:
        # The garbage collector may run this on a thread inside the pool's lock: hand
        # the allocation back without taking it (the pool drains returns later).
        try:
            if not self._closed:
                self._closed = True
                self.pool._returned.append(self._alloc)
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


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
        from .budget import MemoryBudget
        from .device import Device

        if not isinstance(device, Device):
            raise InvalidArgument(f"device: expected an hrx Device, got {type(device).__name__}")
        if not isinstance(shared, bool):
            raise InvalidArgument(f"shared: expected a bool, got {type(shared).__name__}")
        if budget is not None and not isinstance(budget, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        self.device = device
        self.max_free_bytes = check_int("max_free_bytes", max_free_bytes)
        self.shared = shared
        self.budget = budget
        self._free: list[Allocation] = []  # least recently returned first
        self._lock = threading.Lock()
        # Allocations handed back without the lock (finalizers); drained under it.
        # deque.append is atomic, so a finalizer never waits for the lock.
        self._returned: collections.deque[Allocation] = collections.deque()
        self.hits = 0
        self.misses = 0
        self._closed = False

    @property
    def free_bytes(self) -> int:
        self._drain()
        return sum(a.nbytes for a in list(self._free))

    def _drain(self) -> None:
        """Take in allocations finalizers handed back, then release what exceeds the
        free limit (outside the lock)."""
        if not self._returned:
            return
        with self._lock:
            release = self._take_returned_locked()
        for a in release:
            a.release()

    def _take_returned_locked(self) -> list[Allocation]:
        release: list[Allocation] = []
        while self._returned:
            alloc = self._returned.popleft()
            if self._closed:
                release.append(alloc)
            else:
                self._free.append(alloc)
        total = sum(a.nbytes for a in self._free)
        while total > self.max_free_bytes and self._free:
            victim = self._free.pop(0)
            total -= victim.nbytes
            release.append(victim)
        return release

    def allocate(self, nbytes: int) -> PooledBuffer:
        """Lease at least ``nbytes`` (the buffer's ``nbytes`` is exactly ``nbytes``)."""
        nbytes = check_int("nbytes", nbytes, minimum=1)
        self._drain()
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
        self._returned.append(alloc)
        self._drain()

    def trim(self) -> None:
        """Release every free allocation."""
        with self._lock:
            release = self._take_returned_locked()
            release += self._free
            self._free = []
        for a in release:
            a.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.trim()

    def __repr__(self) -> str:
        return f"<hrx.BufferPool {len(self._free)} free ({self.free_bytes} bytes), hits={self.hits} misses={self.misses}>"
