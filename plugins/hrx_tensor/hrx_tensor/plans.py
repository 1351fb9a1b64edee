"""Plans: prepared launch geometry plus a pool of output slots, leased from a PlanCache.

A plan is cached per (operation, shapes, dtypes). Each call takes a free output
slot (or allocates one when every slot is still held by a live tensor) and the
returned tensors keep the slot -- and the plan lease, so the plan is not evicted
under them -- until they are closed. Work is ordered on the TensorOps stream, so a
released slot can be rewritten by the next call without waiting.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from hrx_core.buffer import Buffer
from hrx_core.completion import Event
from hrx_core.errors import show

#: Idle output slots a plan keeps for reuse; more are freed when released.
MAX_IDLE_SLOTS = 2


def _remember(obj: Any) -> Callable[[], Any]:
    """A weak reference where the object allows one (buffers, views), else a strong one."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


class Slot:
    """The buffers of one call: its output and any auxiliary (uploaded indices).

    ``launch`` is the slot's prepared launch (bound on first use, then only the
    inputs that changed are rebound); ``bound`` holds weak references to the input
    views it is bound to, so an idle slot never keeps a caller's tensor alive;
    ``done`` is the completion of the slot's last use.
    """

    __slots__ = ("buffers", "prepared", "bound", "done", "outputs")

    def __init__(self, buffers: Sequence[Buffer]) -> None:
        self.buffers = tuple(buffers)
        self.prepared: Any = None
        self.bound: list[Any] = []
        self.done: Any = None
        self.outputs: Any = None

    def order_after_users(self, stream: Any) -> None:
        """Make ``stream`` wait for work of other queues still using this slot's buffers
        (a consumer of the previous call's output on another stream) before the slot
        is rewritten; work on ``stream`` itself is ordered already."""
        mine = stream.slot
        for buf in self.buffers:
            for completion, *_ in buf.allocation.pending_uses():
                if completion.slot is not mine:
                    stream.wait_event(Event(completion))

    def wait_for_device(self, buffer: Buffer) -> None:
        """Block until no queued work uses ``buffer`` (before the host writes it)."""
        for completion, *_ in buffer.allocation.pending_uses():
            completion.wait_quiet()

    def launch(self, stream: Any, kernel: Any, grid: Any, block: Any, scalars: tuple[Any, ...],
               views: list[Any]) -> Any:
        """Launch ``kernel`` on ``stream`` over ``views`` through this slot's prepared
        launch: prepared on first use (the plan fixes kernel, geometry and scalars for
        the slot's life), afterwards only the views that changed are rebound."""
        self.order_after_users(stream)
        prepared = self.prepared
        if prepared is None:
            prepared = stream.prepare(kernel, grid, views, block=block, scalars=scalars)
            self.prepared, self.bound = prepared, [_remember(v) for v in views]
        else:
            bound = self.bound
            for i, v in enumerate(views):
                if bound[i]() is not v:
                    prepared.rebind(i, v)
                    bound[i] = _remember(v)
        done = self.done = prepared.launch()
        return done

    def close(self) -> None:
        for b in self.buffers:
            b.close()


class Plan:
    """Launch geometry (grid, block, scalars) and output slots for one key."""

    def __init__(self, key: Any, grid: Any, block: Any, scalars: tuple[Any, ...],
                 make_slot: Callable[[], Slot]) -> None:
        self.key = key
        self.grid = grid
        self.block = block
        self.scalars = scalars
        self._make_slot = make_slot
        self._idle: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        #: slots allocated over the plan's life (for tests and statistics)
        self.slots_made = 0

    def acquire(self) -> Slot:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self.slots_made += 1
        return self._make_slot()

    def release(self, slot: Slot) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE_SLOTS:
                self._idle.append(slot)
                return
        slot.close()

    def close(self) -> None:
        """Called by the PlanCache on eviction (no lease open): free the idle slots."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for slot in idle:
            slot.close()


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

    def _take(self, key: Any, prepare: Callable[[], Any]) -> tuple[Any, Any, Slot]:
        """Lease the plan of ``key`` (built by ``prepare`` on a miss) and take a free slot."""
        lease = self.plan_cache.lease(key, prepare)
        try:
            plan = lease.plan
            slot = plan.acquire()
        except BaseException:
            lease.close()
            raise
        return lease, plan, slot

    @staticmethod
    def _give_back(lease: Any, plan: Any, slot: Slot) -> None:
        plan.release(slot)
        lease.close()
