"""Timelines of the amdgpu engine: 64-bit counters in coherent system memory.

Each timeline is one 64-byte ``amd_signal_t``-shaped record in a slab of coherent GTT:
kind USER (1) at byte 0, so AQL barrier-value packets can wait on it; the 64-bit
value at byte 8; at byte 16 a 32-bit saturated mirror ``min(value, 2**32 - 1)`` that
SDMA's 32-bit POLL_REGMEM compares exactly.

* Signals: PM4/AQL write the value with RELEASE_MEM (64-bit data, after the system
  release of caches) and the mirror with a second RELEASE_MEM; SDMA writes the low
  dword, then the high dword, then the mirror with FENCE packets. A reader can see the
  low dword before the high one, a value *below* the one being written, never above it,
  so no wait is satisfied early; :meth:`completed` never goes backwards.
* Waits: PM4 WAIT_REG_MEM64 (>=), AQL BARRIER_VALUE (>=), SDMA POLL_REGMEM on the
  mirror (values below 2**32 - 1; above it the queue holds later work until the host
  sees the value -- a host completion check, as the specification orders mixed
  PM4/AQL/SDMA regions).
* Host waits spin briefly, then block in the provider until the signalling queue has
  consumed its published work (``wait_consumed``), then poll with a bounded backoff;
  every few milliseconds they ask the signalling queues whether they failed.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from hrx_core.engine import Timeline
from hrx_core.errors import DeviceError
from hrx_core.timeouts import spin_u64

if TYPE_CHECKING:
    from .device import AmdgpuDevice
    from .queue import AmdgpuQueue

SLOT_BYTES = 64
VALUE_OFFSET = 8
MIRROR_OFFSET = 16
MIRROR_MAX = 0xFFFFFFFF
KIND_USER = 1

_SPIN_S = 2e-3
_SLEEP_MIN_S = 10e-6
_SLEEP_MAX_S = 500e-6
_CHECK_EVERY_S = 0.002


class SignalSlab:
    """Fixed 64-byte records in coherent memory, handed out and recycled."""

    def __init__(self, device: AmdgpuDevice, slots: int = 1024) -> None:
        self.memory = device._create_memory(slots * SLOT_BYTES, coherent=True)
        self.mapping = self.memory.map()
        self.base = self.memory.address()
        self.records = self.mapping.array.view(np.int64).reshape(slots, SLOT_BYTES // 8)
        self._free = list(range(slots - 1, -1, -1))
        self._lock = threading.Lock()

    def acquire(self) -> int | None:
        with self._lock:
            if not self._free:
                return None
            slot = self._free.pop()
        self.records[slot, :] = 0
        self.records[slot, 0] = KIND_USER
        return slot

    def release(self, slot: int) -> None:
        with self._lock:
            self._free.append(slot)

    def destroy(self) -> None:
        self.mapping.destroy()
        self.memory.destroy()


class AmdgpuTimeline(Timeline):
    """A monotonic 64-bit counter that the engine's queues signal and wait on."""

    def __init__(self, device: AmdgpuDevice) -> None:
        self.device = device
        self._slab, self._slot = device._signal_slot()
        self.address = self._slab.base + self._slot * SLOT_BYTES
        self.value_address = self.address + VALUE_OFFSET
        self.mirror_address = self.address + MIRROR_OFFSET
        record = self._slab.records[self._slot]
        self._value = record[VALUE_OFFSET // 8 : VALUE_OFFSET // 8 + 1].view(np.uint64)
        #: Host address of the value (what the compiled spin polls).
        self._address = int(self._value.ctypes.data)
        self._seen = 0
        #: Highest value any queue encoded a signal for.
        self.max_signaled = 0
        self._signalers: dict[int, AmdgpuQueue] = {}
        self._lock = threading.Lock()
        self._failure: DeviceError | None = None
        self._last_good = 0
        self._next_check = 0.0
        self.closed = False

    # -- reading -----------------------------------------------------------------------------

    def completed(self) -> int:
        value = int(self._value[0])
        if value < self._seen:
            return self._seen  # the high dword of an SDMA signal has not landed yet
        self._seen = value
        return value

    def note_signal(self, queue: AmdgpuQueue, value: int) -> None:
        if value > self.max_signaled:
            self.max_signaled = value
        if id(queue) not in self._signalers:
            with self._lock:
                self._signalers[id(queue)] = queue

    # -- waiting ---------------------------------------------------------------------------------

    def wait(self, value: int, timeout: float | None) -> bool:
        if self.completed() >= value:
            return self._checked(value)
        if self._failure is not None:
            raise self._failure_error(value)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        # spin first (hrx_core.timeouts.spin_u64: in C with the GIL released where
        # compiled), then sleep, backing off
        if spin_u64(self._address, value, _SPIN_S if timeout is None else min(_SPIN_S, timeout), self.completed) \
                and self.completed() >= value:
            return self._checked(value)
        sleep = _SLEEP_MIN_S
        while True:
            if self.completed() >= value:
                return self._checked(value)
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + _CHECK_EVERY_S
                if self.poll_failure() is not None:
                    raise self._failure_error(value)
            if deadline is not None and now >= deadline:
                return self.completed() >= value
            remaining = None if deadline is None else deadline - now
            # Block in the provider until the signalling queues consumed what they
            # published (a native wait), then back off polling the value.
            for queue in self._queues():
                slice_s = 0.005 if remaining is None else min(0.005, max(remaining, 0.0))
                queue.wait_published(slice_s)
                if self.completed() >= value:
                    return self._checked(value)
            pause = sleep if remaining is None else min(sleep, max(remaining, 0.0))
            time.sleep(pause)
            sleep = min(sleep * 2, _SLEEP_MAX_S)

    def _checked(self, value: int) -> bool:
        if self._failure is not None and value > self._last_good:
            raise self._failure_error(value)
        return True

    def _queues(self) -> list[AmdgpuQueue]:
        with self._lock:
            return list(self._signalers.values())

    def poll(self) -> int:
        self.poll_failure()
        return self.completed()

    def poll_failure(self) -> DeviceError | None:
        """Ask the signalling queues whether they failed; record the first failure."""
        if self._failure is not None:
            return self._failure
        queues = self._queues() or self.device._live_queues()
        for queue in queues:
            failure = queue.check()
            if failure is not None:
                self.fail(failure)
                break
        return self._failure

    def fail(self, failure: DeviceError) -> None:
        """Record ``failure`` for every value beyond the last one reached, and advance
        the counter to the highest value encoded so that nothing waits forever."""
        with self._lock:
            if self._failure is not None:
                return
            self._last_good = self.completed()
            self._failure = failure
            if self.max_signaled > self._last_good:
                record = self._slab.records[self._slot]
                record[MIRROR_OFFSET // 8] = min(self.max_signaled, MIRROR_MAX)
                self._value[0] = self.max_signaled

    def _failure_error(self, value: int) -> DeviceError:
        failure = self._failure
        assert failure is not None
        error = DeviceError(f"timeline value {value} will not be reached: {failure}")
        error.__cause__ = failure
        return error

    def error(self, value: int) -> BaseException | None:
        failure = self._failure
        if failure is not None and value > self._last_good:
            return failure
        return None

    def has_errors(self) -> bool:
        return self._failure is not None

    # -- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        final = self.completed()
        self._value = np.array([final], dtype=np.uint64)  # later reads see a snapshot
        self.device._retire_signal_slot(self._slab, self._slot, self.max_signaled, self._queues())

    def __repr__(self) -> str:
        return f"<AmdgpuTimeline completed={self.completed()} signaled={self.max_signaled}>"


__all__ = ["AmdgpuTimeline", "SignalSlab", "SLOT_BYTES", "VALUE_OFFSET", "MIRROR_OFFSET", "MIRROR_MAX"]
