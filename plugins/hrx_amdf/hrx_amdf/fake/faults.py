"""Failures on demand, so engine error paths are exercised.

``provider.faults`` (a :class:`Faults`) injects:

* :meth:`queue_fault` -- a user queue fails before it executes a later packet;
* :meth:`memory_fault` -- every device access to an address range faults;
* :meth:`hang` -- a user queue's waits never complete (a host timeout must handle it);
* :meth:`device_lost` -- a device's queues go DEVICE_LOST and its waits end;
* :meth:`npu_error` / :meth:`hang_npu` -- an NPU submission fails / never completes.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import FakeProvider


class Faults:
    def __init__(self, provider: FakeProvider) -> None:
        self._provider = provider
        self._lock = threading.Lock()
        self._queue_faults: dict[Any, list[int | str]] = {}
        self._memory: list[tuple[int, int, str]] = []
        self._hung: set[Any] = set()
        self._npu_errors: dict[Any, list[int | str]] = {}
        self._npu_hung: set[Any] = set()

    # -- injection ------------------------------------------------------------------------

    def queue_fault(self, queue: Any, *, after: int = 0, detail: str = "injected queue fault") -> None:
        """Fail ``queue`` when it is about to execute the packet ``after`` packets from now."""
        with self._lock:
            self._queue_faults[queue] = [after, detail]

    def memory_fault(self, address: int, nbytes: int, detail: str = "injected memory fault") -> None:
        """Device accesses overlapping [address, address + nbytes) fault."""
        with self._lock:
            self._memory.append((address, address + nbytes, detail))

    def hang(self, queue: Any) -> None:
        """``queue``'s waits (WAIT_REG_MEM, POLL_REGMEM, barriers) stop completing."""
        with self._lock:
            self._hung.add(queue)

    def release_hang(self, queue: Any) -> None:
        with self._lock:
            self._hung.discard(queue)
        self._provider._wake_waiters()

    def device_lost(self, device: Any) -> None:
        """The device stops: its queues report DEVICE_LOST and blocked waits end."""
        device._lose()
        self._provider._wake_waiters()

    def npu_error(self, queue: Any, *, after: int = 0, detail: str = "injected firmware error") -> None:
        """The NPU submission ``after`` submissions from now completes with a firmware error."""
        with self._lock:
            self._npu_errors[queue] = [after, detail]

    def hang_npu(self, queue: Any) -> None:
        with self._lock:
            self._npu_hung.add(queue)

    def release_npu(self, queue: Any) -> None:
        with self._lock:
            self._npu_hung.discard(queue)

    def clear(self) -> None:
        with self._lock:
            self._queue_faults.clear()
            self._memory.clear()
            self._hung.clear()
            self._npu_errors.clear()
            self._npu_hung.clear()
        self._provider._wake_waiters()

    # -- hooks the simulation calls --------------------------------------------------------

    def before_packet(self, queue: Any) -> None:
        from .queues import InjectedFault

        with self._lock:
            entry = self._queue_faults.get(queue)
            if entry is None:
                return
            if entry[0] == 0:
                del self._queue_faults[queue]
                raise InjectedFault(str(entry[1]))
            entry[0] = int(entry[0]) - 1

    def check_address(self, address: int, nbytes: int, what: str) -> None:
        from .memory import MemoryFault

        with self._lock:
            for start, end, detail in self._memory:
                if address < end and start < address + max(nbytes, 1):
                    raise MemoryFault(f"{what} at {address:#x}: {detail}")

    def hangs(self, queue: Any) -> bool:
        with self._lock:
            return queue in self._hung

    def before_npu(self, queue: Any) -> None:
        from .npu import STATUS_NPU_FIRMWARE, NpuFault

        with self._lock:
            entry = self._npu_errors.get(queue)
            if entry is None:
                return
            if entry[0] == 0:
                del self._npu_errors[queue]
                raise NpuFault(str(entry[1]), STATUS_NPU_FIRMWARE)
            entry[0] = int(entry[0]) - 1

    def npu_hangs(self, queue: Any) -> bool:
        with self._lock:
            return queue in self._npu_hung
