"""Completions and events: (timeline, value) pairs.

A :class:`Completion` is complete when its queue's timeline reaches its value.
``is_complete`` reads cached state (a memory read of the timeline); ``refresh()``
polls and retires finished work (releasing the buffers it retained); ``wait()``
drives progress and raises :class:`~hrx_core.errors.Timeout` -- the accepted work
and its storage stay alive. Completions are awaitable from asyncio and accept
done-callbacks.
"""

from __future__ import annotations

import _thread
import asyncio
import logging
import threading
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from .errors import DeviceError, HRXError, InvalidArgument, Timeout
from .timeouts import check_timeout

if TYPE_CHECKING:
    from .device import QueueSlot
    from .engine import NativeTimestamp

log = logging.getLogger("hrx")


class Completion:
    """Completion of everything a queue ran up to ``value``."""

    __slots__ = ("slot", "value", "__weakref__")

    def __init__(self, slot: QueueSlot, value: int) -> None:
        self.slot = slot
        self.value = value

    def __repr__(self) -> str:
        state = "complete" if self.is_complete else "pending"
        return f"<hrx.Completion {self.slot.name}@{self.value} {state}>"

    @property
    def is_complete(self) -> bool:
        """Cheap: reads the timeline's completed value (no retirement, no driver call)."""
        slot = self.slot
        if slot.signaled < self.value:
            slot.flush()
        return (slot._timeline or slot.timeline).completed() >= self.value

    def done_now(self) -> bool:
        """Complete, judged without emitting a signal (False if none was emitted yet)."""
        slot = self.slot
        return self.value <= slot.signaled and (slot._timeline or slot.timeline).completed() >= self.value

    def refresh_quiet(self) -> bool:
        """Poll (asking the driver about failures) and retire; never raises.

        Work the timeline already shows finished needs no question to the driver (a
        settled runtime submission, say): whatever fails later cannot change it, and
        a failure before it would have stopped the timeline short of it."""
        slot = self.slot
        if slot.signaled < self.value:
            slot.flush()
        timeline = slot._timeline or slot.timeline
        if timeline.completed() >= self.value:
            done = True
        else:
            try:
                done = timeline.poll() >= self.value
            except HRXError:
                done = True  # a failed device completes everything, with an error
        if done:
            slot.retire()
        return done

    def refresh(self) -> bool:
        """Poll the timeline, retire finished work; raise if this work failed."""
        done = self.refresh_quiet()
        if done:
            self._raise_failure()
        return done

    def wait(self, timeout: float | None = None) -> None:
        """Block until complete. Raises Timeout (work stays alive) or DeviceError."""
        self.wait_quiet(timeout)
        self._raise_failure()

    def wait_quiet(self, timeout: float | None = None) -> None:
        """Like :meth:`wait` but without raising this work's failure (Timeout still raises).

        ``timeout``: seconds >= 0, or None / inf for no limit (NaN and negatives raise
        InvalidArgument). The wait is sliced, so a KeyboardInterrupt or SystemExit
        raised by a done-callback registered on this thread surfaces here."""
        timeout = check_timeout("timeout", timeout)
        raise_pending_interrupt()
        slot = self.slot
        if slot.signaled < self.value:
            slot.flush()
        timeline = slot.timeline
        value = self.value
        if timeline.completed() < value:
            end = None if timeout is None else time.monotonic() + timeout
            while True:
                raise_pending_interrupt()
                left = None if end is None else max(0.0, end - time.monotonic())
                step = WAIT_SLICE_S if left is None else min(left, WAIT_SLICE_S)
                try:
                    reached = timeline.wait(value, step)
                except HRXError:
                    raise
                except Exception as exc:  # an engine bug must surface as an HRX error
                    raise DeviceError(f"{slot.name}: wait failed: {exc}") from exc
                if reached:
                    raise_pending_interrupt()
                    break
                if left is not None and left <= step:
                    raise Timeout(
                        f"{slot.name}: value {value} not reached within {timeout} s "
                        f"(completed {timeline.completed()}); the work and its buffers stay alive"
                    )
        slot.retire()

    def _raise_failure(self) -> None:
        error = self.slot.timeline.error(self.value)
        if error is not None:
            if isinstance(error, HRXError):
                raise type(error)(*error.args) from error
            raise DeviceError(f"{self.slot.name}: work failed: {error!r}") from error

    @property
    def failed(self) -> BaseException | None:
        """The failure of this work once complete, else None."""
        if not self.is_complete:
            return None
        return self.slot.timeline.error(self.value)

    def add_done_callback(self, callback: Callable[[Completion], Any]) -> None:
        """Call ``callback(self)`` once complete (from a notifier thread, or now)."""
        if not callable(callback):
            raise InvalidArgument(f"callback: expected a callable, got {type(callback).__name__}")
        slot = self.slot
        if slot.signaled < self.value:
            slot.flush()
        # work the timeline has not reached goes to the notifier without asking the
        # driver first (a failure found later advances the timeline, so the notifier
        # still sees it complete); finished work runs the callback now
        if slot.timeline.completed() >= self.value and self.refresh_quiet():
            _call(callback, self, threading.current_thread())
        else:
            slot.device._notifier().add(self, callback)

    def __await__(self) -> Generator[Any, None, None]:
        return self._async_wait().__await__()

    async def _async_wait(self) -> None:
        if not self.refresh_quiet():
            loop = asyncio.get_running_loop()
            future: asyncio.Future[None] = loop.create_future()

            def done(_: Completion) -> None:
                loop.call_soon_threadsafe(_settle, future)

            self.add_done_callback(done)
            await future
        self.wait(0)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


#: Longest single native wait of :meth:`Completion.wait_quiet` (it loops): bounds how
#: long an interrupt delivered by a done-callback waits to surface.
WAIT_SLICE_S = 0.25

# KeyboardInterrupt / SystemExit raised by done-callbacks, by the ident of the thread
# that registered the callback; raised at that thread's next HRX wait.
_interrupts: dict[int, BaseException] = {}
_interrupts_lock = threading.Lock()


def deliver_interrupt(exc: BaseException, thread: threading.Thread) -> None:
    """Hand a KeyboardInterrupt/SystemExit raised by user code that HRX ran on its own
    thread to the user's thread ``thread``: the main thread gets a KeyboardInterrupt
    as from Ctrl-C; otherwise the exception is raised at that thread's next HRX wait
    (the main thread's, if ``thread`` has ended)."""
    main = threading.main_thread()
    if not thread.is_alive():
        thread = main
    if isinstance(exc, KeyboardInterrupt) and thread is main:
        _thread.interrupt_main()
        return
    with _interrupts_lock:
        _interrupts.setdefault(thread.ident or 0, exc)


def raise_pending_interrupt() -> None:
    """Raise the interrupt a done-callback left for the calling thread, if any."""
    if _interrupts:
        with _interrupts_lock:
            exc = _interrupts.pop(threading.get_ident(), None)
        if exc is not None:
            raise exc


def _call(callback: Callable[[Completion], Any], completion: Completion, owner: threading.Thread) -> None:
    try:
        callback(completion)
    except Exception:  # a callback's failure must not kill the notifier
        log.exception("hrx: completion callback %r raised", callback)
    except BaseException as exc:  # KeyboardInterrupt, SystemExit: the user's, not the notifier's
        deliver_interrupt(exc, owner)


class Event:
    """A point on a stream's timeline, recorded with ``stream.record_event()``.

    ``upstream`` lists the events this one was ordered after by the runtime (its
    hazards); a failure of any of them is this event's failure too (see
    :func:`hrx_core.execution.runtime.event_failure`).
    """

    __slots__ = ("completion", "upstream", "resolved", "timestamp")

    def __init__(self, completion: Completion, timestamp: NativeTimestamp | None = None) -> None:
        # (hrx_core.fastpath's Submitter sets these fields without calling __init__:
        # change both; tests/test_submit_fastpath.py compares them)
        self.completion = completion
        self.upstream: tuple[Event, ...] = ()
        #: the runtime's cached verdict once complete (None until then)
        self.resolved: Any = None
        #: the engine's timestamp of an event recorded with ``timing=True`` (else None)
        self.timestamp = timestamp

    @property
    def is_complete(self) -> bool:
        return self.completion.is_complete

    def query(self) -> bool:
        """Poll (and retire): True once everything before the event finished."""
        return self.completion.refresh()

    def synchronize(self, timeout: float | None = None) -> None:
        self.completion.wait(timeout)

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end`` (like ``torch.cuda.Event.elapsed_time``):
        both recorded with ``stream.record_event(timing=True)`` on one device and both
        complete. The engine measures it: CUDA events on cuda, the host clock read by
        the queue's worker on the host engine. Raises InvalidArgument otherwise, or the
        failure of the work either event covers."""
        if not isinstance(end, Event):
            raise InvalidArgument(f"end: expected an Event, got {type(end).__name__}")
        for name, ev in (("event", self), ("end", end)):
            if ev.timestamp is None:
                raise InvalidArgument(f"{name}: recorded without timing; use stream.record_event(timing=True)")
        if end.completion.slot.device is not self.completion.slot.device:
            raise InvalidArgument(
                f"end: recorded on {end.completion.slot.device.name}, not {self.completion.slot.device.name}; "
                "events are timed on one device"
            )
        for name, ev in (("event", self), ("end", end)):
            if not ev.query():  # raises the failure of work it covers
                raise InvalidArgument(f"{name}: not complete yet; call event.synchronize() first")
        assert self.timestamp is not None and end.timestamp is not None
        return self.timestamp.elapsed_ms(end.timestamp)

    def __repr__(self) -> str:
        timed = " timed" if self.timestamp is not None else ""
        return f"<hrx.Event {self.completion!r}{timed}>"


def _sleep_until(completion: Completion, limit: float) -> None:
    """Wait up to ``limit`` seconds for ``completion`` by sleeping between cheap reads of
    its timeline. The notifier never spins: a spinning waiter on a second thread would
    contend for the GIL with the thread that actually waits for the work (on the H200 a
    replay observed through callbacks took 163 us against 85 us unobserved)."""
    timeline = completion.slot.timeline
    value = completion.value
    deadline = time.monotonic() + limit
    pause = 20e-6
    while timeline.completed() < value:
        if time.monotonic() >= deadline:
            try:  # asks the engine about failures (a failed device completes everything)
                timeline.wait(value, 0)
            except Exception:
                time.sleep(0.001)
            return
        time.sleep(pause)
        pause = min(pause * 2, 200e-6)


class Notifier:
    """One daemon thread per device that runs completion callbacks."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._pending: list[tuple[Completion, Callable[[Completion], Any], threading.Thread]] = []
        self._thread: threading.Thread | None = None

    def add(self, completion: Completion, callback: Callable[[Completion], Any]) -> None:
        with self._cond:
            self._pending.append((completion, callback, threading.current_thread()))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=f"hrx-notify-{self._name}", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    if not self._cond.wait(timeout=5.0):
                        if not self._pending:
                            self._thread = None
                            return
                first = self._pending[0][0]
            _sleep_until(first, 0.005)
            ready: list[tuple[Completion, Callable[[Completion], Any], threading.Thread]] = []
            with self._cond:
                keep: list[tuple[Completion, Callable[[Completion], Any], threading.Thread]] = []
                for item in self._pending:
                    try:
                        done = item[0].is_complete
                    except Exception:
                        done = True
                    (ready if done else keep).append(item)
                self._pending = keep
            for completion, callback, owner in ready:
                try:
                    completion.refresh_quiet()
                except Exception:  # noqa: BLE001 - retirement must not cost the batch its callbacks
                    log.exception("hrx: retiring %r failed", completion)
                _call(callback, completion, owner)
