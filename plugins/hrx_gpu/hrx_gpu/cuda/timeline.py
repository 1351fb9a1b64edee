"""Timelines: 64-bit counters in pinned host memory that CUDA streams write.

A queue signals ``value`` with ``cuStreamWriteValue64`` (a memory fence, then the
write, in stream order) on the counter's device address and waits with
``cuStreamWaitValue64(GEQ)``. :meth:`CudaTimeline.completed` is one load through a
cffi pointer: no driver call.

:meth:`CudaTimeline.wait` spins briefly, then sleeps with a bounded backoff
(10 us doubling to 200 us) and every few milliseconds asks the streams that signal
this timeline (``cuStreamQuery``) whether the context failed. A sticky error -- a
trapped kernel, an illegal address -- means the counter will never move again: the
failure is recorded (:meth:`error` returns it for every value above the last one
reached), the counter is advanced on the host to the highest value encoded so that
nothing polls forever, and the wait raises :class:`~hrx_gpu.cuda.errors.CudaError`
(a ``DeviceError``).
"""

from __future__ import annotations

import array
import threading
import time
from typing import TYPE_CHECKING, Any

from hrx_core.engine import Timeline
from hrx_core.timeouts import spin_u64

from ._driver import EXIT
from .errors import CUDA_ERROR_NOT_READY, CudaError

if TYPE_CHECKING:
    from .device import CudaDevice
    from .queue import CudaQueue

# Spin this long before sleeping (hrx_core.timeouts.spin_u64: in C, the GIL released):
# time.sleep() of a few microseconds -- time.sleep(0) too -- oversleeps by the timer
# slack, 50-85 us on Linux, which would add that latency to every short wait.
_SPIN_S = 2e-3
_SLEEP_MIN_S = 10e-6
_SLEEP_MAX_S = 200e-6
_CHECK_EVERY_S = 0.002


class CudaTimeline(Timeline):
    """A monotonic counter signalled by CUDA streams."""

    def __init__(self, device: CudaDevice) -> None:
        self.device = device
        counter, dptr = device._counters.acquire()
        self._counter = counter
        #: Host address of the counter (what the compiled spin polls); 0 for a counter
        #: that is not C memory (a stand-in driver's), which the spin reads from Python.
        try:
            self._address = int(device.driver.ffi.cast("uintptr_t", counter))
        except TypeError:
            self._address = 0
        # for the compiled paths (Timeline.c_completed, c_failed): the counter itself,
        # and a flag set before a recorded failure shows
        self.c_completed = self._address
        self._failed_word = array.array("Q", [0])
        self.c_failed = self._failed_word.buffer_info()[0]
        #: Device address of the counter (what stream memory operations use).
        self.dptr = dptr
        #: Highest value any queue has encoded a signal for.
        self.max_signaled = 0
        self._signalers: dict[int, CudaQueue] = {}
        #: Queues that encoded a wait on this timeline (the slot is recycled only
        #: once they are idle or closed).
        self.waiters: dict[int, CudaQueue] = {}
        self._lock = threading.Lock()
        self._next_check = 0.0
        self._failure: CudaError | None = None
        self._last_good = 0
        # Fallback without stream memory operations: (value, CUevent) in signal order.
        self.events: list[tuple[int, Any]] = []
        self.closed = False

    def completed(self) -> int:
        return int(self._counter[0])

    # -- bookkeeping by queues --------------------------------------------------------

    def note_signal(self, queue: CudaQueue, value: int) -> None:
        """Called by a queue after encoding a signal of ``value``."""
        if value > self.max_signaled:
            self.max_signaled = value
        key = id(queue)
        if key not in self._signalers:
            with self._lock:
                self._signalers[key] = queue
            queue._signaled_timelines.add(self)

    def forget_queue(self, queue: CudaQueue) -> None:
        with self._lock:
            self._signalers.pop(id(queue), None)

    # -- waiting ------------------------------------------------------------------------

    def wait(self, value: int, timeout: float | None) -> bool:
        counter = self._counter
        if counter[0] >= value:
            if self._failure is not None and value > self._last_good:
                raise self._failure_error(value)
            return True
        if self._failure is not None:
            raise self._failure_error(value)
        now = time.monotonic()
        deadline = None if timeout is None else now + max(0.0, timeout)
        # spin first (hrx_core.timeouts.spin_u64: in C with the GIL released where
        # compiled), then sleep, backing off
        if spin_u64(self._address, value, min(_SPIN_S, timeout if timeout is not None else _SPIN_S),
                    lambda: counter[0]):
            return True
        sleep = _SLEEP_MIN_S
        while True:
            if counter[0] >= value:
                break
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + _CHECK_EVERY_S
                self.poll_failure()
                if self._failure is not None:
                    raise self._failure_error(value)
            if deadline is not None and now >= deadline:
                return counter[0] >= value
            pause = sleep if deadline is None else min(sleep, max(deadline - now, 0.0))
            time.sleep(pause)
            sleep = min(sleep * 2, _SLEEP_MAX_S)
        if self._failure is not None and value > self._last_good:
            raise self._failure_error(value)
        return True

    def poll(self) -> int:
        """The completed value, after asking the signalling streams about failures."""
        self.poll_failure()
        return self.completed()

    def poll_failure(self) -> CudaError | None:
        """Query the signalling streams; record a sticky failure if there is one."""
        if self._failure is not None:
            return self._failure
        failure = self.device.failure
        if failure is None:
            with self._lock:
                queues = list(self._signalers.values())
            if not queues:
                queues = self.device._live_queues()
            for queue in queues:
                code = queue.query()
                if code and code != CUDA_ERROR_NOT_READY:
                    failure = self.device._record_failure(code, "cuStreamQuery", queue.name)
                    break
        if failure is not None:
            self._fail(failure)
        return self._failure

    def _fail(self, failure: CudaError) -> None:
        with self._lock:
            if self._failure is not None:
                return
            self._last_good = int(self._counter[0])
            self._failed_word[0] = 1
            self._failure = failure
            # The device will never write again: advance so that nothing polls forever.
            if self.max_signaled > self._last_good:
                self._counter[0] = self.max_signaled

    def _failure_error(self, value: int) -> CudaError:
        failure = self._failure
        assert failure is not None
        return type(failure)(
            f"timeline value {value} will not be reached: {failure}",
            cuda_error=failure.cuda_error,
            call=failure.call,
            code=failure.code,
        )

    def error(self, value: int) -> BaseException | None:
        failure = self._failure
        if failure is not None and value > self._last_good:
            return failure
        return None

    def has_errors(self) -> bool:
        return self._failure is not None

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with self._lock:
            signalers = list(self._signalers.values())
            self._signalers.clear()
        waiters = list(self.waiters.values())
        self.waiters = {}
        for queue in signalers:
            queue._signaled_timelines.discard(self)
        events, self.events = self.events, []
        device = self.device
        counter, dptr = self._counter, self.dptr
        # From now on completed() reads a host-owned snapshot: the pinned slot may be
        # recycled or freed with the device, and reading it then must not crash.
        snapshot = device.driver.ffi.new("uint64_t *", int(counter[0]))
        try:
            address = int(device.driver.ffi.cast("uintptr_t", snapshot))
        except TypeError:
            address = 0
        # (the addresses first: a compiled path or a spin never reads the old slot)
        self._address = self.c_completed = address
        self._counter = snapshot
        if device.closed or EXIT.exiting:
            return
        lib = device.driver.lib
        for _, event in events:
            lib.cuEventDestroy_v2(event)
        if self._failure is None:
            # Recycle once no encoded signal or wait can still touch the slot.
            device._counters.retire(counter, dptr, self.max_signaled, signalers + waiters)
        device._forget_timeline(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return f"<CudaTimeline completed={self.completed()} signaled={self.max_signaled}>"


__all__ = ["CudaTimeline"]
