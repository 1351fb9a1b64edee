"""xdna queues: the hrx native queues of an NPU device.

One worker thread per queue runs what was encoded, in order:

* an **invocation** is submitted to its program's kernel queue (the stream was
  built and checked when it was encoded). Consecutive invocations of one program
  stay in flight together, up to its window; an invocation of another program first
  waits until the earlier ones settled, since the kernel queues of two contexts do
  not order each other;
* **copies and fills** are done by the CPU on the NPU's system memory, "as the
  device": source bytes are read after a host cache invalidate and written bytes are
  published with a flush, so host-visible state follows the same cache-control
  protocol as the NPU's own writes. They wait for earlier invocations first;
* a **wait** blocks until the other timeline reaches its value (a host completion
  check: the NPU has no wait on another engine's timeline);
* a **signal** hands the submissions since the previous signal to the device's
  retirement thread, which advances the timeline once they settle.

Encoding checks each invocation's contract and bindings and takes one slot of the
program's pending window before anything is encoded; a rejected dispatch drops what
its encode call had encoded and gives the slots back (as npu-host does).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_core.engine import Executable, KernelArg, NativeBuffer, NativeQueue, Timeline
from hrx_core.errors import DeviceError

from ..errors import ContractViolation
from .program import XdnaProgram

if TYPE_CHECKING:
    from ..pending import PendingLimit
    from .engine import XdnaDevice


def _copy(src: Any, src_offset: int, dst: Any, dst_offset: int, nbytes: int) -> None:
    data = src.device_bytes(src_offset, nbytes)
    np.copyto(dst.device_target(dst_offset, nbytes), data)
    dst.device_wrote(dst_offset, nbytes)


def _fill(dst: Any, offset: int, nbytes: int, pattern: bytes) -> None:
    view = dst.device_target(offset, nbytes)
    if len(pattern) == 1:
        view.fill(pattern[0])
    else:
        dtype = np.uint16 if len(pattern) == 2 else np.uint32
        view.view(dtype).fill(np.frombuffer(pattern, dtype=dtype)[0])
    dst.device_wrote(offset, nbytes)


class XdnaQueue(NativeQueue):
    def __init__(self, device: XdnaDevice, family: str, index: int) -> None:
        self.family = family
        self.device = device
        self.name = f"xdna-{family}{index}"
        self._pending: list[tuple[Any, ...]] = []
        self._slots: list[PendingLimit] = []
        self._work: collections.deque[list[tuple[Any, ...]]] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        # worker state
        self._outstanding: dict[XdnaProgram, int] = {}
        self._unsignaled: list[tuple[XdnaProgram, int]] = []
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"hrx-{self.name}", daemon=True)
        self._thread.start()

    # -- encoding (under the core's per-queue lock) ---------------------------------------

    def copy(self, src: NativeBuffer, src_offset: int, dst: NativeBuffer, dst_offset: int, nbytes: int) -> None:
        self._pending.append(("host", lambda: _copy(src, src_offset, dst, dst_offset, nbytes)))

    def fill(self, dst: NativeBuffer, offset: int, nbytes: int, pattern: bytes) -> None:
        self._pending.append(("host", lambda: _fill(dst, offset, nbytes, pattern)))

    def dispatch(self, executable: Executable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
        try:
            if not isinstance(executable, XdnaProgram) or executable.device is not self.device:
                raise ContractViolation(
                    f"{executable.name!r} was loaded without a contract; load it with NpuDevice.load_artifact(artifact, columns=, contract=)"
                )
            executable.check_usable()
            stream = executable.stream_for(executable.contract.check_args(args))
            executable.pending.acquire(self.submit)
        except BaseException:
            self._drop_encoded()
            raise
        self._slots.append(executable.pending)
        self._pending.append(("dispatch", executable, stream))

    def wait(self, timeline: Timeline, value: int) -> None:
        self._pending.append(("wait", timeline, value))

    def signal(self, timeline: Timeline, value: int) -> None:
        self._pending.append(("signal", timeline, value))

    def _drop_encoded(self) -> None:
        self._pending = []
        slots, self._slots = self._slots, []
        for limit in slots:
            limit.release()

    def submit(self) -> None:
        batch, self._pending = self._pending, []
        slots, self._slots = self._slots, []
        if not batch:
            return
        with self._cond:
            if self._closed:
                for limit in slots:
                    limit.release()
                raise DeviceError(f"{self.name}: queue is closed")
            self._work.append(batch)
            self._cond.notify()

    # -- the worker ---------------------------------------------------------------------

    def _aborted(self) -> bool:
        return self._closed

    def _drain(self) -> None:
        if self._outstanding:
            points = list(self._outstanding.items())
            self.device.retirement.wait_settled(points, self._aborted)
            self._outstanding.clear()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._work and not self._closed:
                    self._cond.wait()
                if not self._work:
                    return
                batch = self._work.popleft()
            for i, command in enumerate(batch):
                try:
                    self._execute(command)
                except BaseException as exc:  # recorded at the next signal; never kills the worker
                    if self._failure is None:
                        self._failure = exc if isinstance(exc, Exception) else DeviceError(repr(exc))
                    if self._closed:  # give back the slots of invocations that will never be submitted
                        for later in batch[i + 1 :]:
                            if later[0] == "dispatch":
                                later[1].pending.release()
                        break

    def _execute(self, command: tuple[Any, ...]) -> None:
        kind = command[0]
        if kind == "dispatch":
            program, stream = command[1], command[2]
            try:
                if any(p is not program for p in self._outstanding):
                    self._drain()
                point = program.submit(stream, self._aborted)
            except BaseException:
                program.pending.release()  # never submitted: its slot is free again
                raise
            self._outstanding[program] = point
            self._unsignaled.append((program, point))
        elif kind == "host":
            self._drain()
            command[1]()
        elif kind == "wait":
            timeline, value = command[1], command[2]
            while not timeline.wait(value, 0.1):
                if self._closed:
                    raise DeviceError(f"{self.name}: closed while waiting for a timeline")
        else:  # signal
            points, self._unsignaled = self._unsignaled, []
            error, self._failure = self._failure, None
            self.device.retirement.fence(command[1], command[2], points, error)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=10)


__all__ = ["XdnaQueue"]
