"""Failure propagation through the runtime's data dependencies.

A region that reads bytes another region wrote depends on that region's result.
The runtime records, per submitted region, the events whose output it reads
(:attr:`~hrx_core.completion.Event.upstream`): regions of the same graph and of
graphs still in flight whose writes overlap its reads, and completed regions whose
failure poisoned the bytes it reads (see ``_Inflight`` in :mod:`.runtime`). A region's
*failure* is its own failure or any upstream failure, so every read of a result --
``Submission.wait``, ``DownloadRegion.read``, a model slot's outputs -- raises if
anything it depends on failed, never returning stale or uninitialised bytes.

Bytes written by failed work stay *poisoned* -- later readers inherit the failure --
until a successful write covers them or the failure is *delivered*: raised to the
application by a wait or a read. After that the application knows, and memory it
reuses is its to rewrite (a new request's inputs, a reset state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import DeviceError

if TYPE_CHECKING:
    from ..completion import Event

#: Event.resolved once an event completed without any failure upstream.
CLEAN = "clean"

# Delivered failures that cannot carry an attribute (exceptions with __slots__).
_delivered_ids: set[int] = set()


def own_failure(event: Event) -> BaseException | None:
    completion = event.completion
    slot = completion.slot
    return (slot._timeline or slot.timeline).error(completion.value)


def event_failure(event: Event) -> BaseException | None:
    """The failure ``event`` carries -- its own or one it read -- once complete, else None.

    Verdicts of complete events are cached and their upstream links dropped, so
    chains of dependent submissions stay short."""
    resolved = event.resolved
    if resolved is not None:
        return None if resolved is CLEAN else resolved
    if not event.completion.done_now():
        return None  # unknown yet; everything upstream of a complete event is complete
    if not event.upstream:  # the usual case: only its own work can have failed
        failure = own_failure(event)
        event.resolved = CLEAN if failure is None else failure
        return failure
    # post-order over unresolved upstream events (iterative: chains may be long)
    order: list[Event] = []
    stack: list[tuple[Event, bool]] = [(event, False)]
    seen: set[int] = set()
    while stack:
        ev, expanded = stack.pop()
        if expanded:
            order.append(ev)
            continue
        if ev.resolved is not None or id(ev) in seen:
            continue
        seen.add(id(ev))
        stack.append((ev, True))
        stack.extend((u, False) for u in ev.upstream if u.resolved is None)
    for ev in order:
        failure = own_failure(ev)
        if failure is None:
            for u in ev.upstream:
                if u.resolved is not None and u.resolved is not CLEAN:
                    failure = u.resolved
                    break
        ev.resolved = CLEAN if failure is None else failure
        ev.upstream = ()
    resolved = event.resolved
    return None if resolved is CLEAN else resolved


def pending_failure(event: Event) -> BaseException | None:
    """The failure of a complete ``event`` that was not delivered yet (poisons its writes)."""
    failure = event_failure(event)
    return None if failure is None or delivered(failure) else failure


def delivered(failure: BaseException) -> bool:
    return bool(getattr(failure, "_hrx_delivered", False)) or id(failure) in _delivered_ids


def mark_delivered(failure: BaseException) -> None:
    """The application has seen ``failure``: memory it poisoned is the application's to rewrite."""
    try:
        failure._hrx_delivered = True  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        if len(_delivered_ids) > 4096:
            _delivered_ids.clear()
        _delivered_ids.add(id(failure))


def raise_event_failure(event: Event, what: str) -> None:
    """Raise (and deliver) the failure ``event`` carries, if any: its own as its type,
    an inherited one as DeviceError naming ``what``."""
    failure = event_failure(event)
    if failure is None:
        return
    mark_delivered(failure)
    if failure is own_failure(event):
        event.completion._raise_failure()
    raise DeviceError(f"{what}: reads bytes written by failed work ({type(failure).__name__}: {failure})") from failure


__all__ = ["CLEAN", "delivered", "event_failure", "mark_delivered", "own_failure", "pending_failure", "raise_event_failure"]
