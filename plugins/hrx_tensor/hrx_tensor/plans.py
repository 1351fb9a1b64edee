"""Plans: prepared launch geometry plus a pool of output slots, kept in a PlanCache.

A plan is cached per (operation, shapes, dtypes). Each call takes a free output
slot (or allocates one when every slot is still held by a live tensor) and the
returned tensors keep the slot -- and a use of the plan -- until they are closed.
Work is ordered on the op's stream, so a released slot can be rewritten by the
next call without waiting.

Each op family keeps a plain dict of the plans it used in front of the (shared,
locked, LRU) PlanCache: a repeated call takes its plan from the dict and touches
the cache only now and then to keep the plan recent. Plans count their uses (calls
in progress and live outputs) themselves, so a plan the cache evicts while in use
stops handing out slots at once but frees its slots and constant buffers only when
the last use ends: eviction never pulls memory from under a call or a tensor.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from hrx_core.buffer import Buffer, View
from hrx_core.completion import Event
from hrx_core.errors import show

#: Idle output slots a plan keeps for reuse; more are freed when released.
MAX_IDLE_SLOTS = 2
#: Plans an op keeps in its own dict in front of the plan cache (cleared when full).
MAX_FRONT = 256
#: One call in this many served from that dict also leases from the cache (LRU order).
LRU_TOUCH = 64
#: Argument sets a slot keeps a prepared launch for besides the current one (see Launcher).
MAX_BINDINGS = 64


def _remember(obj: Any) -> Callable[[], Any]:
    """A weak reference where the object allows one (buffers, views), else a strong one."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class _Bound:
    """What a prepared launch's buffer argument was bound to: the Buffer or View
    object (weakly, so an idle slot never keeps a caller's tensor alive), and for a
    View its buffer and byte range at binding time. A launch reuses the binding only
    while the same object still names the same open buffer and range."""

    __slots__ = ("buffer", "length", "offset", "ref")

    def __init__(self, obj: Any) -> None:
        self.ref = _remember(obj)
        if type(obj) is View:
            self.buffer: Any = _remember(obj.buffer)
            self.offset, self.length = obj.offset, obj.length
        else:
            self.buffer, self.offset, self.length = None, 0, 0

    def holds(self, obj: Any) -> bool:
        """True if ``obj`` is what was bound and still names the same open bytes."""
        if self.ref() is not obj:
            return False
        if self.buffer is None:
            return type(obj) is Buffer and not obj.closed  # anything else is rebound (and checked)
        buffer = obj.buffer
        return self.buffer() is buffer and obj.offset == self.offset and obj.length == self.length and not buffer.closed


class Launcher:
    """Prepared launches of one slot and the arguments each is bound to.

    Prepared on first use on a stream (the plan fixes kernel, geometry and scalars).
    A call whose arguments are those of the current launch launches it as is. A call
    with other arguments -- eager decoding rotates through one weight per layer --
    switches to the launch prepared for that set of arguments, if the slot kept one
    (up to :data:`MAX_BINDINGS` sets, keyed by the identity of the argument objects and
    checked with :meth:`_Bound.holds`, so a reused ``id`` is never mistaken for its
    predecessor); only then is anything rebound. A new set is prepared while the slot
    keeps fewer than MAX_BINDINGS, after which the least recently used launch is
    rebound instead. Rebinding goes through ``PreparedLaunch.rebind``, which validates
    the argument (a closed buffer raises) -- an argument whose buffer was closed or
    whose view was modified since it was bound is always rebound, never launched.

    Each kept launch is a launch record on the memory it binds: it never keeps that
    memory alive (a freed buffer's records refuse it), and a buffer closed, freed or
    host-mapped makes every kept launch validate again before it launches.
    """

    __slots__ = ("bound", "ids", "others", "prepared", "stream")

    def __init__(self) -> None:
        self.prepared: Any = None
        self.stream: Any = None
        self.bound: list[_Bound] = []
        self.ids: tuple[int, ...] = ()
        #: argument ids -> (prepared launch, bindings), least recently used first
        self.others: dict[tuple[int, ...], tuple[Any, list[_Bound]]] = {}

    def launch(self, stream: Any, kernel: Any, grid: Any, block: Any, scalars: tuple[Any, ...],
               views: Sequence[Any], scalar: tuple[int, Any] | None = None) -> Any:
        """Launch over ``views``; ``scalar``: (index, value) given to the chosen prepared
        launch first (``PreparedLaunch.set_scalar``: a per-call value, such as a record
        of indices, that launches made before keep their own copy of)."""
        prepared = self.prepared
        if prepared is not None and self.stream is stream:
            bound = self.bound
            i = 0
            for v in views:
                if not bound[i].holds(v):
                    prepared = self._switch(stream, kernel, grid, block, scalars, views)
                    break
                i += 1
        else:
            self.close()
            prepared = stream.prepare(kernel, grid, views, block=block, scalars=scalars)
            self.prepared, self.stream, self.bound, self.ids = prepared, stream, [_Bound(v) for v in views], _ids(views)
        if scalar is not None:
            prepared.set_scalar(*scalar)
        return prepared.launch()

    def _switch(self, stream: Any, kernel: Any, grid: Any, block: Any, scalars: tuple[Any, ...],
                views: Sequence[Any]) -> Any:
        """The prepared launch over ``views``, which the current launch is not bound to."""
        ids = _ids(views)
        others = self.others
        entry = others.pop(ids, None)
        if entry is None and len(others) < MAX_BINDINGS:
            prepared = stream.prepare(kernel, grid, views, block=block, scalars=scalars)
            bound = [_Bound(v) for v in views]
        else:
            if entry is None:  # full: rebind the least recently used (or the current one)
                entry = others.pop(next(iter(others))) if others else (self.prepared, self.bound)
            prepared, bound = entry
            for i, v in enumerate(views):
                if not bound[i].holds(v):
                    try:
                        prepared.rebind(i, v)
                    except BaseException:
                        if prepared is not self.prepared:
                            others[ids] = entry  # still bound to what ``bound`` holds
                        raise
                    bound[i] = _Bound(v)
        if prepared is not self.prepared:
            others[self.ids] = (self.prepared, self.bound)
        self.prepared, self.bound, self.ids = prepared, bound, ids
        return prepared

    def close(self) -> None:
        """Unbind every kept launch (launches in flight keep what they use)."""
        others, self.others = self.others, {}
        for prepared, _ in others.values():
            prepared.close()
        if self.prepared is not None:
            self.prepared.close()
        self.prepared, self.stream, self.bound, self.ids = None, None, [], ()


def _ids(views: Sequence[Any]) -> tuple[int, ...]:
    return tuple([id(v) for v in views])


class Slot:
    """The buffers of one call: its output and any auxiliary (uploaded indices).

    ``launcher`` is the slot's prepared launch (see :class:`Launcher`); ``done`` is
    the completion of the slot's last use; ``outputs`` caches the views of the output
    buffer the op hands out.
    """

    __slots__ = ("allocs", "buffers", "done", "launcher", "outputs")

    def __init__(self, buffers: Sequence[Buffer]) -> None:
        self.buffers = tuple(buffers)
        self.allocs = tuple(b.allocation for b in self.buffers)
        self.launcher = Launcher()
        self.done: Any = None
        self.outputs: Any = None

    def order_after_users(self, stream: Any) -> None:
        """Make ``stream`` wait for work of other queues still using this slot's buffers
        (a consumer of the previous call's output on another stream) before the slot
        is rewritten; work on ``stream`` itself is ordered already. Pending uses are
        kept per queue: when only ``stream``'s queue has any, nothing is asked (no
        completion poll, which would emit a signal)."""
        mine = stream.slot
        for alloc in self.allocs:
            pending = alloc.pending
            if pending and (len(pending) > 1 or mine not in pending):
                for completion, *_ in alloc.pending_uses():
                    if completion.slot is not mine:
                        stream.wait_event(Event(completion))

    def launch(self, stream: Any, kernel: Any, grid: Any, block: Any, scalars: tuple[Any, ...],
               views: list[Any]) -> Any:
        """Launch ``kernel`` on ``stream`` over ``views`` through this slot's prepared
        launch, after work of other queues still using the slot's buffers."""
        self.order_after_users(stream)
        done = self.done = self.launcher.launch(stream, kernel, grid, block, scalars, views)
        return done

    def close(self) -> None:
        self.launcher.close()
        for b in self.buffers:
            b.close()


class Plan:
    """Launch geometry (grid, block, scalars) and output slots for one key."""

    def __init__(self, key: Any, grid: Any, block: Any, scalars: tuple[Any, ...],
                 make_slot: Callable[[], Slot], kernel: Any = None) -> None:
        self.key = key
        self.grid = grid
        self.block = block
        self.scalars = scalars
        #: the kernel it launches, where an op has variants (None: the op's one kernel)
        self.kernel = kernel
        self._make_slot = make_slot
        self._idle: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self._users = 0  # calls in progress and slots held by live outputs
        #: slots allocated over the plan's life (for tests and statistics)
        self.slots_made = 0

    @property
    def closed(self) -> bool:
        """True once evicted: the plan hands out no more slots."""
        return self._closed

    def take(self) -> Slot | None:
        """A free slot (made if none is idle) and one use of the plan; None once the
        plan was evicted. Give the slot back with :meth:`give`."""
        with self._lock:
            if self._closed:
                return None
            self._users += 1
            if self._idle:
                return self._idle.pop()
            self.slots_made += 1
        try:
            return self._make_slot()
        except BaseException:
            self._leave(None)
            raise

    def take_idle(self) -> Slot | None:
        """An idle slot and one use of the plan, or None (evicted, or no slot idle):
        never allocates."""
        with self._lock:
            if self._closed or not self._idle:
                return None
            self._users += 1
            return self._idle.pop()

    def give(self, slot: Slot) -> None:
        """End the use :meth:`take` began: keep the slot for reuse or free it."""
        self._leave(slot)

    def _leave(self, slot: Slot | None) -> None:
        with self._lock:
            self._users -= 1
            if slot is not None and not self._closed and len(self._idle) < MAX_IDLE_SLOTS:
                self._idle.append(slot)
                return
            finish = self._closed and self._users == 0
        if slot is not None:
            slot.close()
        if finish:
            self._finish()

    def close(self) -> None:
        """Called by the PlanCache on eviction: hand out no more slots, free the idle
        ones now and the rest of the plan (:meth:`_finish`) when its last use ends."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            finish = self._users == 0
        for slot in idle:
            slot.close()
        if finish:
            self._finish()

    def _finish(self) -> None:
        """Free what the plan's slots share (subclasses: constant tables)."""


class OpFamily:
    """What every op family (TensorOps, ImageOps, ...) sets up on a device: its kernels
    for the device's engine -- from the ``hrx_kernels`` hook when it provides all of
    them, else the family's own -- a plan cache and a stream.

    Subclasses set ``family`` (the name errors use), ``engines`` (where the family has
    kernels), ``kernel_names`` and ``own_kernels(engine) -> {name: Kernel}``.
    """

    family = "op family"
    engines: tuple[str, ...] = ()
    kernel_names: tuple[str, ...] = ()

    @staticmethod
    def own_kernels(engine: str) -> dict[str, Any]:
        return {}

    def __init__(self, device: Any, *, plan_cache: Any = None, stream: Any = None) -> None:
        from hrx_core.errors import InvalidArgument, Unsupported
        from hrx_core.execution.plan_cache import PlanCache
        from hrx_core.stream import Stream

        info = getattr(device, "info", None)
        engine = getattr(info, "engine", None)
        kernels = self._find_kernels(engine) if isinstance(engine, str) else {}
        if not kernels:
            raise Unsupported(
                f"device: {self.family} has no kernels for engine {engine!r} ({getattr(device, 'name', device)!r}); "
                f"implementations exist for: {', '.join(self.engines)}"
            )
        if plan_cache is not None and not isinstance(plan_cache, PlanCache):
            raise InvalidArgument(f"plan_cache: expected a PlanCache or None, got {type(plan_cache).__name__}")
        if stream is not None and (not isinstance(stream, Stream) or stream.device is not device):
            raise InvalidArgument(f"stream: expected a Stream of {device.name}, got {show(stream)}")
        self.device = device
        self.engine = engine
        self.plan_cache = plan_cache if plan_cache is not None else PlanCache(max_plans=64)
        self.stream = stream if stream is not None else device.stream()
        self._kernels: dict[str, Any] = kernels
        self._front: dict[Any, Plan] = {}
        self._front_hits = 0

    def _find_kernels(self, engine: str) -> dict[str, Any]:
        try:
            from hrx_core.plugins import kernels

            found: dict[str, Any] = kernels(engine)
        except Exception:  # noqa: BLE001 - a broken third-party hook must not hide ours
            found = {}
        if self.kernel_names and all(n in found for n in self.kernel_names):
            return {n: found[n] for n in self.kernel_names}
        return self.own_kernels(engine)

    def __repr__(self) -> str:
        return f"<{self.family}.{type(self).__name__} on {self.device.name}>"

    def _take_idle(self, key: Any, prepare: Callable[[], Any]) -> tuple[Any, Slot | None]:
        """The plan of ``key`` from the op's own dict and an idle slot of it, or
        (None, None): nothing is prepared or allocated (for checks that can only run
        on a slot's memory but must refuse a call before anything is allocated)."""
        plan = self._front.get(key)
        slot = plan.take_idle() if plan is not None else None
        if slot is None:
            return None, None
        self._front_hits += 1
        if self._front_hits % LRU_TOUCH == 0:
            self.plan_cache.lease(key, prepare).close()
        return plan, slot

    def _take(self, key: Any, prepare: Callable[[], Any]) -> tuple[Any, Slot]:
        """The plan of ``key`` (built by ``prepare`` on a miss) and a free slot of it.

        From the op's own dict when the plan is there and not evicted; otherwise
        through a lease of the plan cache (which prepares it on a miss). One call in
        LRU_TOUCH served from the dict also leases, to keep the plan recent in the
        cache's order."""
        front = self._front
        plan = front.get(key)
        if plan is not None:
            slot = plan.take()
            if slot is not None:
                self._front_hits += 1
                if self._front_hits % LRU_TOUCH == 0:
                    self.plan_cache.lease(key, prepare).close()
                return plan, slot
        for _ in range(2):  # a plan evicted right after it was leased: lease again
            with self.plan_cache.lease(key, prepare) as lease:
                plan = lease.plan
                slot = plan.take()
            if slot is not None:
                if len(front) >= MAX_FRONT:
                    front.clear()
                front[key] = plan
                return plan, slot
        raise RuntimeError(f"{self.family}: plan {key!r} was evicted while leased")  # pragma: no cover

    @staticmethod
    def _give_back(plan: Any, slot: Slot) -> None:
        plan.give(slot)
