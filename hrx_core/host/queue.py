"""Host queues: one worker thread each, running encoded commands in order."""

from __future__ import annotations

import collections
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine import Access, BufferArg, Executable, GraphNode, KernelArg, NativeBuffer, NativeQueue, NativeTimestamp, Timeline
from ..errors import DeviceError, InvalidArgument
from .timeline import HostTimeline

if TYPE_CHECKING:
    from .engine import HostDevice

Command = Callable[[], None]


class HostExecutable(Executable):
    def __init__(self, name: str, fn: Callable[..., Any], wants_grid: bool, wants_block: bool) -> None:
        self.name = name
        self.target = "host"
        self.fn = fn
        self.wants_grid = wants_grid
        self.wants_block = wants_block


def _host(buffer: NativeBuffer) -> np.ndarray:
    view = buffer.host_view()
    if view is None:
        raise DeviceError("host engine: buffer has no host memory")
    return view


class _Worker:
    """What a host queue's worker thread uses. The thread holds only this, never the
    queue, so a queue nobody references (its device dropped) is collected and its
    finalizer stops the thread once the queued work is done."""

    def __init__(self, device: HostDevice, name: str) -> None:
        self.device = device
        self.name = name
        self.work: collections.deque[list[Command]] = collections.deque()
        self.cond = threading.Condition()
        self.closed = False
        self.failure: BaseException | None = None

    def stop(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.work and not self.closed:
                    self.cond.wait()
                if not self.work:
                    return
                batch = self.work.popleft()
            jitter = self.device.jitter_us
            for command in batch:
                try:
                    if jitter:
                        sleep_jitter(jitter)
                    command()
                except BaseException as exc:  # recorded at the next signal; never kills the worker
                    if self.failure is None:
                        self.failure = exc if isinstance(exc, Exception) else DeviceError(repr(exc))
            del batch, command  # drop references to finished work's buffers


class HostQueue(NativeQueue):
    def __init__(self, device: HostDevice, family: str, index: int) -> None:
        self.family = family
        self.device = device
        self.name = f"host-{family}{index}"
        self._pending: list[Command] = []
        self._worker = worker = _Worker(device, self.name)
        self._thread = threading.Thread(target=worker.run, name=f"hrx-{self.name}", daemon=True)
        self._thread.start()
        self._finalizer = weakref.finalize(self, worker.stop)

    @property
    def _closed(self) -> bool:
        return self._worker.closed

    # -- encoding (called under the core's per-queue lock) ---------------------

    def copy(self, src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> None:
        self._pending.append(copy_command(src, src_offset, dst, dst_offset, nbytes))

    def fill(self, dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> None:
        self._pending.append(fill_command(dst, offset, nbytes, pattern))

    def dispatch(self, executable: Executable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
        assert isinstance(executable, HostExecutable)
        self._pending.append(lambda: _run_kernel(executable, grid, block, args))

    def timestamp(self) -> HostTimestamp:
        stamp = HostTimestamp()
        self._pending.append(stamp.take)
        return stamp

    def enqueue(self, command: Command) -> None:
        """Encode an arbitrary host command (used by host graphs)."""
        self._pending.append(command)

    def wait(self, timeline: Timeline, value: int) -> None:
        worker = self._worker

        def wait_cmd() -> None:
            while not timeline.wait(value, 0.1):
                if worker.closed:
                    raise DeviceError(f"{worker.name}: closed while waiting for a timeline")
        self._pending.append(wait_cmd)

    def signal(self, timeline: Timeline, value: int) -> None:
        assert isinstance(timeline, HostTimeline)
        worker = self._worker

        def signal_cmd() -> None:
            error, worker.failure = worker.failure, None
            timeline.signal(value, error)
        self._pending.append(signal_cmd)

    def submit(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        self.device.faults.on_submit(self.name)  # may raise: the batch is dropped
        worker = self._worker
        with worker.cond:
            if worker.closed:
                raise DeviceError(f"{self.name}: queue is closed")
            worker.work.append(batch)
            worker.cond.notify()

    # -- lifetime ----------------------------------------------------------------

    def close(self) -> None:
        self._finalizer()  # stops the worker once its queued work is done
        self._thread.join(timeout=10)


class HostTimestamp(NativeTimestamp):
    """The host clock (``time.perf_counter_ns``) read by the queue's worker thread when
    it reaches the timestamp: after all earlier commands of the queue finished."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns: int | None = None

    def take(self) -> None:
        self.ns = time.perf_counter_ns()

    def elapsed_ms(self, end: NativeTimestamp) -> float:
        if not isinstance(end, HostTimestamp):
            raise InvalidArgument(f"end: a host timestamp is compared with another host timestamp, got {type(end).__name__}")
        if self.ns is None or end.ns is None:
            raise DeviceError("host timestamp: not taken (its queue failed before reaching it)")
        return (end.ns - self.ns) / 1e6


def sleep_jitter(jitter_us: int) -> None:
    time.sleep(random.random() * jitter_us * 1e-6)


def copy_command(src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> Command:
    s = _host(src)[src_offset : src_offset + nbytes]
    d = _host(dst)[dst_offset : dst_offset + nbytes]
    return lambda: np.copyto(d, s)


def fill_command(dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> Command:
    d = _host(dst)[offset : offset + nbytes]
    if len(pattern) == 1:
        byte = pattern[0]
        return lambda: d.fill(byte)
    dtype = np.uint16 if len(pattern) == 2 else np.uint32
    word = np.frombuffer(pattern, dtype=dtype)[0]
    return lambda: d.view(dtype).fill(word)


def command_for(node: GraphNode) -> Command | None:
    """The host command of a native graph node (None for an empty node)."""
    p = node.params
    if node.kind == "copy":
        return copy_command(p["src"], p["src_offset"], p["dst"], p["dst_offset"], p["nbytes"])
    if node.kind == "fill":
        return fill_command(p["dst"], p["offset"], p["nbytes"], p["pattern"])
    if node.kind == "dispatch":
        exe, grid, block, args = p["executable"], p["grid"], p["block"], p["args"]
        assert isinstance(exe, HostExecutable)
        return lambda: _run_kernel(exe, grid, block, args)
    if node.kind == "empty":
        return None
    raise InvalidArgument(f"unknown graph node kind {node.kind!r}")


def _run_kernel(exe: HostExecutable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
    values: list[Any] = []
    for arg in args:
        if isinstance(arg, BufferArg):
            view = _host(arg.buffer)[arg.offset : arg.offset + arg.length]
            if not arg.access & Access.WRITE:
                view = view.view()
                view.flags.writeable = False
            values.append(view)
        else:
            values.append(arg)
    kwargs = {}
    if exe.wants_grid:
        kwargs["grid"] = grid
    if exe.wants_block:
        kwargs["block"] = block
    exe.fn(*values, **kwargs)
