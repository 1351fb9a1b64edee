"""Memory the model layer holds: one handle per allocation, the charges that account
for it, and allocation inside the right budget.

A :class:`HeldMemory` owns a buffer handle and counts its holders (a session, the
definitions frozen from it). Budget charges are per budget, never twice: an
allocation already charged to a budget -- directly, or through a reservation of it
-- is not charged again when a session adopts it or a definition is frozen into that
budget. Charges taken for a holder are released when the last holder lets go.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..budget import Charge, MemoryBudget
from ..buffer import Buffer, View
from ..errors import InvalidArgument

if TYPE_CHECKING:
    from ..execution.runtime import Runtime


def charges_budget(charge: Charge | None, budget: MemoryBudget) -> bool:
    """True if ``charge`` (still held) counts against ``budget`` or a reservation of it."""
    if charge is None or charge.released:
        return False
    b: MemoryBudget | None = charge.budget
    while b is not None:
        if b is budget:
            return True
        b = getattr(b, "parent", None)
    return False


def whole_allocation(source: Buffer | View) -> Buffer:
    """A new buffer handle (retaining the allocation) over all of ``source``'s
    allocation: offsets in it are allocation offsets (``View.start``)."""
    buf = source if isinstance(source, Buffer) else source.buffer
    alloc = buf.allocation  # raises for closed buffers
    return Buffer(buf.device, alloc.retain(), 0, alloc.nbytes)


def allocate_tracked(runtime: Runtime, nbytes: int, budget: MemoryBudget | None, *, shared: bool = False) -> Buffer:
    """A buffer on the runtime's device, charged to ``budget`` and counted in the
    runtime's tracked memory."""
    dev = runtime.device
    buf = dev.allocate_shared(nbytes, budget=budget) if shared else dev.allocate(nbytes, budget=budget)
    runtime._track(buf)
    return buf


class HeldMemory:
    """A buffer handle shared by several holders, with the charges that account for it."""

    def __init__(self, buffer: Buffer, what: str) -> None:
        self.buffer = buffer
        self.what = what
        self._extra: list[Charge] = []
        self._holders = 1
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    @property
    def released(self) -> bool:
        return self._holders <= 0

    def charged_to(self, budget: MemoryBudget) -> bool:
        alloc = self.buffer._alloc
        return charges_budget(alloc.charge, budget) or any(charges_budget(c, budget) for c in self._extra)

    def charge(self, budget: MemoryBudget | None) -> int:
        """Charge ``budget`` for these bytes unless it already counts them; returns the
        bytes charged now (0 or the allocation's size). BudgetExceeded changes nothing."""
        if budget is None:
            return 0
        with self._lock:
            if self.charged_to(budget):
                return 0
            nbytes = self.buffer._alloc.nbytes
            self._extra.append(budget.charge(nbytes, self.what))
            return nbytes

    def drop_last_charge(self) -> None:
        """Undo the latest :meth:`charge` (a failed freeze rolls back)."""
        with self._lock:
            charge = self._extra.pop() if self._extra else None
        if charge is not None:
            charge.release()

    def retain(self) -> HeldMemory:
        with self._lock:
            if self._holders <= 0:
                raise InvalidArgument(f"{self.what}: already released")
            self._holders += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders != 0:
                return
            extra, self._extra = self._extra, []
        self.buffer.close()
        for c in extra:
            c.release()
