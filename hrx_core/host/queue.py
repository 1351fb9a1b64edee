"""Host queues: one worker thread each, running encoded commands in order."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine import Access, BufferArg, Executable, KernelArg, NativeBuffer, NativeQueue, Timeline
from ..errors import DeviceError
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


class HostQueue(NativeQueue):
    def __init__(self, device: HostDevice, family: str, index: int) -> None:
        self.family = family
        self.device = device
        self.name = f"host-{family}{index}"
        self._pending: list[Command] = []
        self._work: collections.deque[list[Command]] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"hrx-{self.name}", daemon=True)
        self._thread.start()

    # -- encoding (called under the core's per-queue lock) ---------------------

    def copy(self, src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> None:
        s = _host(src)[src_offset : src_offset + nbytes]
        d = _host(dst)[dst_offset : dst_offset + nbytes]
        self._pending.append(lambda: np.copyto(d, s))

    def fill(self, dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> None:
        d = _host(dst)[offset : offset + nbytes]
        if len(pattern) == 1:
            byte = pattern[0]
            self._pending.append(lambda: d.fill(byte))
        else:
            dtype = np.uint16 if len(pattern) == 2 else np.uint32
            word = np.frombuffer(pattern, dtype=dtype)[0]
            self._pending.append(lambda: d.view(dtype).fill(word))

    def dispatch(self, executable: Executable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
        assert isinstance(executable, HostExecutable)
        self._pending.append(lambda: _run_kernel(executable, grid, block, args))

    def wait(self, timeline: Timeline, value: int) -> None:
        def wait_cmd() -> None:
            while not timeline.wait(value, 0.1):
                if self._closed:
                    raise DeviceError(f"{self.name}: closed while waiting for a timeline")
        self._pending.append(wait_cmd)

    def signal(self, timeline: Timeline, value: int) -> None:
        assert isinstance(timeline, HostTimeline)

        def signal_cmd() -> None:
            error, self._failure = self._failure, None
            timeline.signal(value, error)
        self._pending.append(signal_cmd)

    def submit(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        self.device.faults.on_submit(self.name)  # may raise: the batch is dropped
        with self._cond:
            if self._closed:
                raise DeviceError(f"{self.name}: queue is closed")
            self._work.append(batch)
            self._cond.notify()

    # -- worker ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._work and not self._closed:
                    self._cond.wait()
                if not self._work:
                    return
                batch = self._work.popleft()
            for command in batch:
                try:
                    command()
                except BaseException as exc:  # recorded at the next signal; never kills the worker
                    if self._failure is None:
                        self._failure = exc if isinstance(exc, Exception) else DeviceError(repr(exc))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)


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
