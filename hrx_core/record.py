"""Launch records: validate once, launch many times.

A :class:`LaunchRecord` is what a prepared launch, a graph's default bindings (and
so every runtime region and TensorOps/ImageOps slot built on them) keep between
launches: the allocations they bind, each with the byte range and whether it is
written. It is validated when made and again only when the process-wide
:data:`~hrx_core.buffer.EPOCH` moved (a handle closed, memory freed, a host mapping
opened or closed, host writes left unflushed or flushed): a launch whose record holds
the current epoch checks one integer and makes its native call.

Allocations are not retained and released per launch. A record registers itself
with every allocation it binds, and an allocation answers "busy?" from the latest
launch of each record (per queue: queues are FIFO). When the last owner of an
allocation lets go while records bind it, the queues with launches in flight each
keep one reference until those launches retire (:meth:`QueueSlot.retain_until`), and
records refuse the memory from then on -- a stale record never launches.

Closing a record (rebinding, closing the graph or prepared launch) hands the ranges
of its launches still in flight to the allocations' per-queue pending entries, so
host mappings and pools keep seeing them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .buffer import EPOCH, Allocation
from .errors import InvalidArgument

if TYPE_CHECKING:
    from .completion import Completion
    from .device import QueueSlot

Use = tuple[Allocation, int, int, bool]


def merge_uses(uses: Sequence[Use]) -> list[Use]:
    """One (allocation, first byte, end, writes) per allocation, in first-use order."""
    merged: dict[int, list[Any]] = {}
    for alloc, start, end, writes in uses:
        m = merged.get(id(alloc))
        if m is None:
            merged[id(alloc)] = [alloc, start, end, writes]
        else:
            m[1], m[2], m[3] = min(m[1], start), max(m[2], end), m[3] or writes
    return [tuple(m) for m in merged.values()]


class LaunchRecord:
    """Validated bindings of something launched repeatedly (see the module doc).

    ``uses`` are (allocation, start, end, writes), one per allocation. ``check``
    (an optional callable) adds the owner's own conditions (graphs: borrowed buffer
    handles still open) to validation.
    """

    __slots__ = ("uses", "epoch", "last", "check_extra", "closed", "__weakref__")

    def __init__(self, uses: Sequence[Use], *, check: Any = None) -> None:
        self.uses: tuple[Use, ...] = tuple(merge_uses(uses))
        self.epoch = -1
        #: QueueSlot -> Completion of the latest launch on that queue
        self.last: dict[QueueSlot, Completion] = {}
        self.check_extra = check
        self.closed = False
        for alloc, start, end, writes in self.uses:
            records = alloc.records
            span = records.get(self)
            if span is not None:  # an alias and its original share the dict
                start, end, writes = min(start, span[0]), max(end, span[1]), writes or span[2]
            records[self] = (start, end, writes)

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("current" if self.epoch == EPOCH.value else "stale")
        return f"<hrx.LaunchRecord {len(self.uses)} allocations, {state}>"

    @property
    def current(self) -> bool:
        """True when the last validation still holds (no launch-visible change since)."""
        return self.epoch == EPOCH.value

    def validate(self, what: str = "launch") -> None:
        """Check every bound allocation (memory not freed or dropped by its owners,
        no conflicting host mapping or unflushed host write) and the owner's extra
        check; on success the record is current. Raises and stays stale otherwise."""
        epoch = EPOCH.value  # read first: a change during the checks makes it stale again
        if self.closed:
            raise InvalidArgument(f"{what}: closed")
        if self.check_extra is not None:  # the owner's own rule first: it says more
            self.check_extra()
        for alloc, start, end, writes in self.uses:
            if alloc.freed or alloc.dropped:
                raise InvalidArgument(f"{what}: a bound buffer was freed")
            if alloc.host_maps or alloc.host_dirty:
                alloc.check_device_use(start, end, writes)
        self.epoch = epoch

    def launched(self, completion: Completion) -> None:
        """Note a launch (call under the queue's lock, right after the native call)."""
        self.last[completion.slot] = completion

    def close(self) -> None:
        """Unregister. Launches in flight become ordinary pending uses, and each of
        their queues holds a reference to the memory until they retire (as dynamic
        work does), so it outlives them whoever lets go first."""
        if self.closed:
            return
        self.closed = True
        self.epoch = -1  # never current again: a launch validates and refuses it
        last = self._in_flight()
        for use in self.uses:
            _hand_over(use, last)
            use[0].records.pop(self, None)
        self.last = {}

    def replace(self, uses: Sequence[Use]) -> None:
        """Bind ``uses`` from now on (a rebind), in place: each allocation no longer
        bound, or bound over another span, hands the launches in flight to its pending
        uses as :meth:`close` does; the others keep their entries. The record validates
        again at its next launch. Call under the owner's launch lock."""
        if self.closed:
            raise InvalidArgument("launch record: closed")
        new = tuple(merge_uses(uses))
        now = {id(u[0]): u for u in new}
        before = {id(u[0]): u for u in self.uses}
        last: list[Completion] | None = None
        touched: dict[int, dict[Any, tuple[int, int, bool]]] = {}
        for key, use in before.items():
            if now.get(key) == use:
                continue
            if last is None:
                last = self._in_flight()
            _hand_over(use, last)
            records = use[0].records
            records.pop(self, None)
            touched[id(records)] = records
        for key, use in now.items():
            records = use[0].records
            if before.get(key) == use and id(records) not in touched:
                continue  # unchanged, and no alias of it lost its entry
            alloc, start, end, writes = use
            span = records.get(self)
            if span is not None:  # an alias and its original share the dict
                start, end, writes = min(start, span[0]), max(end, span[1]), writes or span[2]
            records[self] = (start, end, writes)
        self.uses = new
        self.epoch = -1

    def _in_flight(self) -> list[Completion]:
        # finished launches need nothing; a launch not signalled yet counts as in flight
        # (done_now emits no signal: rebinding a slot per call must not cost a driver call)
        return [c for c in self.last.values() if not c.done_now()]


def _hand_over(use: Use, last: Sequence[Completion]) -> None:
    """The launches ``last`` of ``use`` become its allocation's pending uses, each queue
    holding a reference until they retire."""
    alloc, start, end, writes = use
    for c in last:
        alloc.note_use(c, start, end, writes)
        try:
            alloc.retain()
        except InvalidArgument:  # already freed: nothing left to hold
            continue
        c.slot.retain_until(c.value, alloc)


def inflight_launches(alloc: Allocation) -> list[tuple[QueueSlot, int]]:
    """(queue, value) of every record launch of ``alloc`` that may still be running.

    Call after the allocation was dropped and the epoch moved. Launches check their
    record under their queue's lock, so passing each queue's lock once is a barrier:
    every launch that accepted the record before has noted itself by then, and every
    later one sees the allocation dropped. A queue whose lock stays busy for a second
    (a thread that holds it is waiting for this one) is not waited for: the value its
    next work will get counts instead, which is never early."""
    out: dict[int, tuple[QueueSlot, int]] = {}

    def note(slot: QueueSlot, value: int) -> None:
        prev = out.get(id(slot))
        if prev is None or prev[1] < value:
            out[id(slot)] = (slot, value)

    for family in list(alloc.device._slots.values()):
        for slot in family:
            if not slot.created:
                continue
            if slot.lock.acquire(timeout=1.0):
                slot.lock.release()
            else:
                note(slot, slot.pending_value)
    for record in list(alloc.records):
        for slot, c in list(record.last.items()):
            if not c.is_complete:
                note(slot, c.value)
    return list(out.values())


__all__ = ["LaunchRecord", "inflight_launches", "merge_uses"]
