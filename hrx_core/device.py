"""Devices and their pool of native queues.

Streams share up to 8 native queues per device by default (``set_stream_queue_count``
changes that before the first stream). Each stream stays on one queue; assignment is
round-robin; queues are created lazily, on first use.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .buffer import Allocation, Buffer, check_int
from .completion import Completion, Notifier
from .engine import DeviceInfo, Engine, EngineDevice, Limits, NativeQueue, QueueFamily, Timeline
from .errors import DeviceError, HRXError, InvalidArgument, Timeout, Unsupported
from .fastpath import TalliedCount
from .finalize import drain_at_entry
from .timeouts import check_timeout

if TYPE_CHECKING:
    from .budget import MemoryBudget
    from .pool import BufferPool
    from .stream import Stream

DEFAULT_STREAM_QUEUES = 8
#: Signal the timeline at least every this many encoded operations, so that
#: retained buffers are released even when nobody asks for a completion.
AUTO_FLUSH_OPS = 64


class _Hold:
    """Retains a plain Python object until retirement."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def release(self) -> None:
        self.obj = None


class QueueSlot:
    """One native queue with its timeline, lock and retained owners.

    Work is encoded without a signal; the value the next signal will write is
    ``pending_value``. A completion for value v is complete once the timeline reaches
    v, which any later signal on this FIFO queue implies. ``flush`` emits the signal.
    """

    # the attributes the compiled paths (hrx_core.fastpath) read and write on every
    # launch, as slots: they reach them at their offsets; the rest live in __dict__
    __slots__ = ("device", "lock", "_native", "_timeline", "pending_value", "signaled", "unsignaled_ops",
                 "retained", "closed", "__dict__", "__weakref__")

    def __init__(self, device: Device, family: str, index: int) -> None:
        self.device = device
        self.family = family
        self.index = index
        self.name = f"{device.name}/{family}{index}"
        self.lock = threading.RLock()
        self._native: NativeQueue | None = None
        # created with the native queue; hot paths read ``slot._timeline or slot.timeline``
        # (an attribute read once it exists, the property's lazy creation before)
        self._timeline: Timeline | None = None
        self.pending_value = 1
        self.signaled = 0
        self.unsignaled_ops = 0
        self.retained: collections.deque[tuple[int, Any]] = collections.deque()
        # owners popped from ``retained`` whose release is in progress (outside the
        # lock), by releasing thread: settle() waits for other threads' releases
        self._releasing: dict[int, int] = {}
        self._released = threading.Condition(threading.Lock())
        self.closed = False

    @property
    def created(self) -> bool:
        return self._native is not None

    @property
    def native(self) -> NativeQueue:
        native = self._native
        if native is None:
            with self.lock:
                if self._native is None:
                    if self.closed:
                        raise InvalidArgument(f"{self.name}: device is closed")
                    from .engine_rules import check_queue

                    timeline = self.device.native.create_timeline()
                    try:
                        queue = self.device.native.create_queue(self.family, self.index)
                        check_queue(self.device.info.engine, queue, timeline)
                    except BaseException:
                        if isinstance(timeline, Timeline):
                            timeline.close()
                        raise
                    self._native = queue
                    self._timeline = timeline
                native = self._native
        assert native is not None
        return native

    @property
    def timeline(self) -> Timeline:
        if self._timeline is None:
            self.native  # noqa: B018 - creates queue and timeline together
        assert self._timeline is not None
        return self._timeline

    def encode(self, fn: Callable[[NativeQueue], None], retain: Iterable[Any] = ()) -> int:
        """Encode with ``fn(native_queue)``, submit, retain owners; return the value.

        Owners in ``retain`` must already hold a reference; they are released at
        retirement, or at once if encoding or submission fails.
        """
        native = self._native or self.native
        with self.lock:
            try:
                if self.closed:
                    raise InvalidArgument(f"{self.name}: device is closed")
                fn(native)
                if native.needs_submit:
                    native.submit()
            except BaseException:
                for obj in retain:
                    obj.release()
                raise
            value, done = self.commit_locked(retain)
        if done:
            self.release_retired(done)
        return value

    def commit_locked(self, retain: Iterable[Any]) -> tuple[int, Sequence[Any]]:
        """After work was encoded and submitted under ``lock``: retain ``retain`` (which
        already hold a reference) until the value covering the work, count the
        operation and emit the signal every AUTO_FLUSH_OPS operations. Returns the
        value and the owners of retired work, to release after the lock."""
        value = self.pending_value
        append = self.retained.append
        for obj in retain:
            append((value, obj))
        self.unsignaled_ops += 1
        done = self._flush_locked() if self.unsignaled_ops >= AUTO_FLUSH_OPS else ()
        return value, done

    def mark_value(self) -> int:
        """The value covering everything encoded so far (no new work)."""
        with self.lock:
            return self.pending_value if self.unsignaled_ops else self.signaled

    def _flush_locked(self) -> list[Any]:
        """Signal; return owners of finished work, to release after the lock."""
        native = self._native or self.native
        value = self.pending_value
        timeline = self._timeline or self.timeline
        native.signal(timeline, value)
        native.submit()
        return self._signaled_locked(timeline, value)

    def _signaled_locked(self, timeline: Timeline, value: int) -> list[Any]:
        """After a signal of ``value`` (the pending value) was encoded and submitted
        under ``lock``: advance the values; return owners of finished work, to release
        after the lock."""
        self.signaled = value
        self.pending_value = value + 1
        self.unsignaled_ops = 0
        if self.retained and self.retained[0][0] <= timeline.completed():
            return self._retire_locked()
        return []

    def flush(self) -> None:
        """Emit the pending signal, if any work is unsignaled."""
        done: list[Any] = []
        with self.lock:
            if self.unsignaled_ops:
                done = self._flush_locked()
        if done:
            self.release_retired(done)

    def retain_until(self, value: int, obj: Any) -> None:
        """Release ``obj`` (which holds a reference for it) once the timeline reaches
        ``value``. Takes no lock (called where memory is released, possibly from a
        finalizer): the next retirement of this queue releases it."""
        self.retained.append((value, obj))
        if self.lock.acquire(blocking=False):
            try:
                done = self._retire_locked() if self._timeline is not None else []
            finally:
                self.lock.release()
            if done:
                self.release_retired(done)

    def _retire_locked(self) -> list[Any]:
        """Pop the owners of finished work. A non-empty result must be passed to
        :meth:`release_retired` (after the lock): until then :meth:`settle` waits."""
        completed = (self._timeline or self.timeline).completed()
        out = []
        retained = self.retained
        while retained and retained[0][0] <= completed:
            out.append(retained.popleft()[1])
        if out:
            me = threading.get_ident()
            with self._released:
                self._releasing[me] = self._releasing.get(me, 0) + 1
        return out

    def release_retired(self, done: Sequence[Any]) -> None:
        """Release owners popped by a retirement (outside the queue's lock)."""
        try:
            for obj in done:
                obj.release()
        finally:
            me = threading.get_ident()
            with self._released:
                left = self._releasing[me] - 1
                if left:
                    self._releasing[me] = left
                else:
                    del self._releasing[me]
                    self._released.notify_all()

    def retire(self) -> None:
        """Release owners of work the timeline has passed."""
        if not self.retained:
            return
        with self.lock:
            done = self._retire_locked()
        if done:
            self.release_retired(done)

    def settle(self, timeout: float | None = None) -> None:
        """Retire finished work, then wait (up to ``timeout`` seconds, else Timeout)
        until owners another thread popped in its retirement are released too: their
        memory freed and budget charges returned. The calling thread's own releases in
        progress are not waited for."""
        self.retire()
        if not self._releasing:
            return
        me = threading.get_ident()
        with self._released:
            if not self._released.wait_for(lambda: not any(t != me for t in self._releasing), timeout):
                raise Timeout(f"{self.name}: owners of finished work were still being released "
                              f"by another thread after {timeout} s")

    def completion(self) -> Completion:
        """Completion of everything encoded on this queue so far."""
        return Completion(self, self.mark_value())

    def close(self) -> None:
        with self.lock:
            self.closed = True
            native, timeline = self._native, self._timeline
        if native is None:
            return
        try:
            self.flush()
            self.completion().wait(timeout=30)
        except HRXError:
            pass
        self.retire()
        native.close()
        if timeline is not None:
            timeline.close()


class DeviceStats:
    """Live counters of one device (the runtime adds lanes and traces)."""

    #: the counters, in snapshot order (slots: the compiled paths add to them at their
    #: offsets); what the runtime adds lives in __dict__, after them
    COUNTERS = ("live_bytes", "peak_bytes", "allocations", "upload_bytes", "download_bytes", "copy_bytes",
                "fill_bytes", "dispatches", "graph_launches")
    __slots__ = (*COUNTERS[:-1], "_graph_launches", "_graph_launch_tallies", "__dict__")
    graph_launches = TalliedCount("_graph_launches", "_graph_launch_tallies", "Graph launches on the device.")

    def __init__(self) -> None:
        self.live_bytes = 0
        self.peak_bytes = 0
        self.allocations = 0
        self.upload_bytes = 0
        self.download_bytes = 0
        self.copy_bytes = 0
        self.fill_bytes = 0
        self.dispatches = 0
        # graph_launches: this plus what compiled replays counted in the tallies
        self._graph_launches = 0
        self._graph_launch_tallies: Any = None

    def graph_launch_tally(self, lib: Any) -> Any:
        """The ``hrx_core.fastpath.Tally`` compiled replays of the compiled module ``lib``
        count graph launches in (made with the first)."""
        return DeviceStats.graph_launches.tally(self, lib)

    def snapshot(self) -> dict[str, int]:
        return {**{name: getattr(self, name) for name in self.COUNTERS}, **vars(self)}

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v}" for k, v in self.snapshot().items())
        return f"<hrx.DeviceStats {body}>"


class Device:
    """An engine device as users see it: streams, buffers, pools, kernels."""

    def __init__(self, engine: Engine, native: EngineDevice) -> None:
        self.engine = engine
        self.native = native
        self.info: DeviceInfo = native.info
        self.name = f"{self.info.engine}:{self.info.index}"
        # Reentrant: garbage collection may free a buffer (and update stats) on a
        # thread that already holds it.
        self._lock = threading.RLock()
        self._stream_queue_count = DEFAULT_STREAM_QUEUES
        self._streams_created = False
        self._slots: dict[str, list[QueueSlot]] = {}
        self._round_robin: dict[str, int] = {}
        self._notifier_obj: Notifier | None = None
        self._streams: weakref.WeakSet[Stream] = weakref.WeakSet()
        self.stats = DeviceStats()
        self.closed = False
        #: First ordinary / shared allocation checked against the engine rules.
        self._allocations_checked = [False, False]

    def __repr__(self) -> str:
        return f"<hrx.Device {self.name} {self.info.name!r} ({self.info.kind})>"

    # -- identity ---------------------------------------------------------------

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def queue_families(self) -> tuple[QueueFamily, ...]:
        return self.info.queue_families

    @property
    def limits(self) -> Limits:
        return self.info.limits

    # -- queues -----------------------------------------------------------------

    def set_stream_queue_count(self, count: int) -> None:
        """Set how many native queues streams share (per family); before any stream."""
        count = check_int("count", count, minimum=1)
        with self._lock:
            if self._streams_created:
                raise InvalidArgument(
                    "set_stream_queue_count: streams already exist on "
                    f"{self.name}; call it before creating the first stream"
                )
            self._stream_queue_count = count

    @property
    def stream_queue_count(self) -> int:
        return self._stream_queue_count

    def _family(self, family: str) -> QueueFamily:
        if not isinstance(family, str):
            raise InvalidArgument(f"family: expected a queue family name (str), got {type(family).__name__}")
        found = self.info.family(family)
        if found is None:
            names = ", ".join(f.name for f in self.info.queue_families)
            raise InvalidArgument(f"family: {self.name} has no {family!r} queues (it has {names})")
        return found

    def _next_slot(self, family: str) -> QueueSlot:
        fam = self._family(family)
        with self._lock:
            if self.closed:
                raise InvalidArgument(f"{self.name} is closed")
            self._streams_created = True
            slots = self._slots.get(family)
            if slots is None:
                count = min(self._stream_queue_count, fam.count)
                slots = [QueueSlot(self, family, i) for i in range(count)]
                self._slots[family] = slots
            index = self._round_robin.get(family, 0)
            self._round_robin[family] = index + 1
            return slots[index % len(slots)]

    def created_queues(self) -> list[str]:
        """Names of the native queues created so far (queues are created lazily)."""
        return [s.name for slots in self._slots.values() for s in slots if s.created]

    def stream(self, family: str = "compute") -> Stream:
        """A new stream on the next queue of ``family`` (round-robin)."""
        from .stream import Stream

        stream = Stream(self, self._next_slot(family))
        self._streams.add(stream)
        return stream

    def _notifier(self) -> Notifier:
        with self._lock:
            if self._notifier_obj is None:
                self._notifier_obj = Notifier(self.name)
            return self._notifier_obj

    # -- memory -----------------------------------------------------------------

    def _allocate(self, nbytes: int, *, shared: bool, budget: MemoryBudget | None, what: str) -> Allocation:
        nbytes = check_int("nbytes", nbytes, minimum=1)
        if self.closed:
            raise InvalidArgument(f"{self.name} is closed")
        if budget is not None:
            from .budget import MemoryBudget

            if not isinstance(budget, MemoryBudget):
                raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(budget).__name__}")
        limit = self.info.limits.max_allocation_bytes
        if nbytes > limit:
            raise InvalidArgument(f"nbytes: {nbytes} exceeds the largest allocation of {self.name} ({limit})")
        if shared and not self.info.coherent_shared_memory:
            raise Unsupported(f"{self.name} has no coherent shared memory")
        charge = budget.charge(nbytes, what) if budget is not None else None
        try:
            native = self.native.allocate(nbytes, shared=shared)
        except HRXError:
            if charge is not None:
                charge.release()
            raise
        except MemoryError as exc:
            if charge is not None:
                charge.release()
            raise DeviceError(f"{self.name}: out of memory allocating {nbytes} bytes") from exc
        except BaseException:
            if charge is not None:
                charge.release()
            raise
        if not self._allocations_checked[shared]:
            from .engine_rules import check_allocation

            try:
                check_allocation(self.info.engine, self.info, native, nbytes, shared)
            except BaseException:
                if charge is not None:
                    charge.release()
                free = getattr(native, "free", None)
                if callable(free):
                    free()
                raise
            self._allocations_checked[shared] = True
        stats = self.stats
        with self._lock:
            stats.live_bytes += nbytes
            stats.allocations += 1
            stats.peak_bytes = max(stats.peak_bytes, stats.live_bytes)
        return Allocation(self, native, nbytes, shared=shared, charge=charge)

    def _allocation_freed(self, alloc: Allocation) -> None:
        if alloc.external is None:
            with self._lock:
                self.stats.live_bytes -= alloc.nbytes

    def allocate(self, nbytes: int, *, budget: MemoryBudget | None = None) -> Buffer:
        """Ordinary device memory (contents undefined)."""
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        return Buffer(self, self._allocate(nbytes, shared=False, budget=budget, what="buffer"))

    def allocate_shared(self, nbytes: int, *, budget: MemoryBudget | None = None) -> Buffer:
        """Coherent host-visible memory: map it without cache control."""
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        return Buffer(self, self._allocate(nbytes, shared=True, budget=budget, what="shared buffer"))

    def wrap(self, obj: Any) -> Buffer:
        """Wrap foreign memory (e.g. a torch or cupy tensor) as a buffer, retaining it."""
        if self.closed:
            raise InvalidArgument(f"{self.name} is closed")
        wrapped = self.native.wrap_external(obj)
        if wrapped is None:
            raise Unsupported(f"obj: {self.name} cannot wrap {type(obj).__name__} memory")
        native, nbytes = wrapped
        if nbytes <= 0:
            raise InvalidArgument("obj: wrapped memory is empty")
        return Buffer(self, Allocation(self, native, nbytes, shared=False, external=obj))

    def buffer_pool(self, *, max_free_bytes: int = 1 << 30, shared: bool = False,
                    budget: MemoryBudget | None = None) -> BufferPool:
        """A :class:`BufferPool` of this device."""
        from .pool import BufferPool

        return BufferPool(self, max_free_bytes=max_free_bytes, shared=shared, budget=budget)

    # -- synchronization --------------------------------------------------------

    def _retire_finished(self) -> None:
        """Release what every queue retained for work that has finished (deferred frees
        included), without waiting for anything."""
        for slots in list(self._slots.values()):
            for slot in slots:
                if slot.created:
                    slot.retire()

    def _settle(self, timeout: float | None = None) -> None:
        """Release what every queue retained for finished work and wait (``timeout`` for
        each) for releases other threads popped (:meth:`QueueSlot.settle`)."""
        for slots in list(self._slots.values()):
            for slot in slots:
                if slot.created:
                    slot.settle(timeout)

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for every queue of the device (``timeout`` for each). Failures of the
        work are reported by its completions and streams, not here."""
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        timeout = check_timeout("timeout", timeout)
        for slots in list(self._slots.values()):
            for slot in slots:
                if slot.created:
                    slot.completion().wait_quiet(timeout)
                    slot.settle(timeout)  # releases a completion callback's thread is making

    def close(self) -> None:
        """Drain and release every queue; the device cannot be used afterwards."""
        drain_at_entry()  # finalizers' closes queued in a collection (hrx_core.finalize)
        with self._lock:
            if self.closed:
                return
            self.closed = True
            slots = [s for ss in self._slots.values() for s in ss]
        for slot in slots:
            slot.close()
        self.native.close()
