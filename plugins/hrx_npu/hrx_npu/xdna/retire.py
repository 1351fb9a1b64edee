"""Retirement of NPU submissions: one thread per xdna device.

Every accepted submission asks its kernel queue for a one-shot eventfd notification
(libamdf's native wait); the thread sleeps on the eventfd, and on a credit reads each
busy program's retirement (``refresh``: the driver checks completed submissions) --
between credits it only reads the status snapshot, refreshing now and then so that a
failure that sends no notification is still seen. What it learns it applies:

* submissions that retired (or failed) give their program's pending-invocation slot
  back (the 128-invocation window);
* **fences** -- an hrx queue's timeline signal placed after its submissions -- signal
  their timeline, in order, once every submission before them settled, with the
  first failure among them as the value's error (the value still advances, so
  nothing waits forever on a failed queue);
* programs closed while busy are destroyed once proven idle.
"""

from __future__ import annotations

import collections
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hrx_core.errors import DeviceError

if TYPE_CHECKING:
    from .program import XdnaProgram

#: Seconds between status reads while submissions are pending and no credit came.
POLL = 0.02
#: Every this many polls without a credit, ask the driver (refresh) anyway.
REFRESH_EVERY = 10


class _Fence:
    __slots__ = ("timeline", "value", "points", "error")

    def __init__(self, timeline: Any, value: int, points: list[tuple[XdnaProgram, int]], error: BaseException | None) -> None:
        self.timeline = timeline
        self.value = value
        self.points = points
        self.error = error


class Retirement:
    """The retirement thread of one device (see the module docstring)."""

    def __init__(self, name: str) -> None:
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._cond = threading.Condition()
        self._busy: set[XdnaProgram] = set()
        self._closing: set[XdnaProgram] = set()
        self._fences: dict[int, collections.deque[_Fence]] = {}
        self._stop = False
        self.credits = 0
        self.scans = 0
        self._thread = threading.Thread(target=self._run, name=f"hrx-xdna-retire-{name}", daemon=True)
        self._thread.start()

    # -- producers ----------------------------------------------------------------

    def watch(self, program: XdnaProgram, point: int) -> None:
        """Track ``point`` of ``program`` (its pending slot is released when it settles)."""
        from hrx_amdf.errors import AmdfError

        with self._cond:
            idle = not self._busy
            program.watched.append(point)
            self._busy.add(program)
            self._cond.notify_all()
        try:
            program.queue.request_notification(point, self._efd)
        except AmdfError:
            pass  # status polling still sees it retire
        if idle:  # the thread may sleep its idle interval: wake it to poll at the busy rate
            self._nudge()

    def _nudge(self) -> None:
        try:
            os.eventfd_write(self._efd, 1)
        except OSError:
            pass

    def fence(self, timeline: Any, value: int, points: list[tuple[XdnaProgram, int]], error: BaseException | None) -> None:
        """Signal ``timeline`` to ``value`` once ``points`` settled (after earlier fences)."""
        with self._cond:
            self._fences.setdefault(id(timeline), collections.deque()).append(_Fence(timeline, value, points, error))
            ready = self._ready_fences_locked()
            self._cond.notify_all()
        self._signal(ready)

    def close_program(self, program: XdnaProgram) -> bool:
        """Destroy ``program`` now if idle; otherwise quarantine it until it is."""
        if program.destroy():
            return True
        with self._cond:
            self._closing.add(program)
            self._cond.notify_all()
        return False

    def quarantined(self) -> list[XdnaProgram]:
        with self._cond:
            return [p for p in self._closing if not p.destroyed]

    # -- waiters ---------------------------------------------------------------------

    def wait_settled(self, points: Sequence[tuple[XdnaProgram, int]], abort: Callable[[], bool]) -> None:
        """Block until every point settled (retired or failed); DeviceError if ``abort()``."""
        with self._cond:
            while not all(p.settled(point) for p, point in points):
                if abort() or self._stop:
                    raise DeviceError("xdna queue closed while waiting for NPU submissions")
                self._cond.wait(0.1)

    def wait_progress(self, program: XdnaProgram, abort: Callable[[], bool]) -> None:
        """Block until ``program``'s retirement moves (or it fails)."""
        with self._cond:
            retired = program.retired
            while program.retired == retired and program.failure is None:
                if abort() or self._stop:
                    raise DeviceError("xdna queue closed while waiting for the NPU window")
                self._cond.wait(0.1)

    # -- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        idle_polls = 0
        while True:
            with self._cond:
                if self._stop:
                    return
                busy = bool(self._busy or self._closing)
            ready, _, _ = select.select([self._efd], [], [], POLL if busy else 0.25)
            credit = False
            if ready:
                try:
                    self.credits += os.eventfd_read(self._efd)
                    credit = True
                except (BlockingIOError, OSError):
                    pass
            idle_polls = 0 if credit else idle_polls + 1
            with self._cond:  # work may have arrived while the thread slept
                busy = bool(self._busy or self._closing)
            if busy:
                self.scan(native=credit or idle_polls % REFRESH_EVERY == 0)

    def scan(self, native: bool = True) -> None:
        """Read retirement of every busy program and apply it."""
        self.scans += 1
        with self._cond:
            programs = [(p, list(p.watched)) for p in self._busy]
        for program, points in programs:
            program.refresh(native, points)
        released: list[XdnaProgram] = []
        with self._cond:
            for program, _ in programs:
                while program.watched and program.settled(program.watched[0]):
                    program.watched.popleft()
                    released.append(program)
                if not program.watched:
                    self._busy.discard(program)
            ready = self._ready_fences_locked()
            self._cond.notify_all()
        for program in released:
            program.pending.release()
        self._signal(ready)
        with self._cond:
            closing = [p for p in self._closing if p.idle()]
        for program in closing:
            try:
                done = program.destroy()
            except Exception:  # noqa: BLE001 - stays quarantined; reported by the device
                done = False
            if done:
                with self._cond:
                    self._closing.discard(program)

    def _ready_fences_locked(self) -> list[tuple[Any, int, BaseException | None]]:
        out = []
        for queue in self._fences.values():
            while queue and all(p.settled(point) for p, point in queue[0].points):
                fence = queue.popleft()
                error = fence.error
                for p, point in fence.points:
                    error = error or p.error_for(point)
                out.append((fence.timeline, fence.value, error))
        return out

    @staticmethod
    def _signal(ready: list[tuple[Any, int, BaseException | None]]) -> None:
        for timeline, value, error in ready:
            timeline.signal(value, error)

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._nudge()
        self._thread.join(timeout)
        try:
            os.close(self._efd)
        except OSError:
            pass

    def drain(self, timeout: float) -> bool:
        """Wait (scanning) until nothing is busy; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                if not self._busy and not any(not p.destroyed for p in self._closing):
                    return True
            time.sleep(POLL)
        return False


__all__ = ["Retirement"]
