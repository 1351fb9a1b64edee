"""Finalizers that never run engine code inside the garbage collector.

A handle dropped without ``close()`` (a Buffer, Graph, PreparedLaunch, DeviceTensor) closes
itself in ``__del__``. When the last reference goes away in ordinary code that is
safe. When the handle is part of a reference cycle, though, the cyclic garbage
collector finalizes it -- and a collection starts at whatever allocation crosses its
threshold, which may be inside an engine or a provider while it holds a lock that
freeing memory needs again: a deadlock (a plain lock), or a lock re-entered halfway
through an update (a reentrant one). That happened on the simulated Strix Halo: an
address-space lock held while assigning addresses, a collection there, and a
Buffer's finalizer freeing memory through the same lock.

So a finalizer called during a collection does not close its handle there: it queues
the close, and the queue is drained at safe points --

* when the collection ends, if no frame of HRX code (a module whose top-level
  package starts with ``hrx``) is on the collecting thread's stack: a collection
  that user code triggered (``gc.collect()`` included) closes its handles before
  it returns, as before;
* otherwise on the next allocation, ``synchronize`` or device close, which run
  outside any lock of HRX's.

Outside a collection a finalizer closes at once, as before.
"""

from __future__ import annotations

import collections
import gc
import sys
import threading
from collections.abc import Callable
from types import FrameType

#: Closes queued by finalizers during a collection, oldest first.
_pending: collections.deque[Callable[[], object]] = collections.deque()
_collecting = False
#: One thread drains at a time (a close may drop handles whose finalizers append)
_draining = threading.Lock()


def _on_gc(phase: str, info: dict[str, int]) -> None:
    global _collecting
    if phase == "start":
        _collecting = True
        return
    _collecting = False
    if _pending and not _inside_hrx(sys._getframe(0).f_back):  # (None: no Python frame)
        drain()


def _inside_hrx(frame: FrameType | None) -> bool:
    """Whether a frame of HRX code is on the stack from ``frame`` down."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if isinstance(name, str) and name.startswith("hrx") and name != __name__:
            return True
        frame = frame.f_back
    return False


def close_later_if_collecting(close: Callable[[], object]) -> bool:
    """For a ``__del__``: queue ``close`` and return True during a collection;
    return False (the caller closes now) otherwise."""
    if _collecting:
        _pending.append(close)
        return True
    return False


def drain() -> None:
    """Run the closes finalizers queued (errors are swallowed, as in ``__del__``).
    Call it only where the calling thread holds no lock of HRX's."""
    if not _pending or not _draining.acquire(blocking=False):
        return  # nothing queued, or another thread drains (it takes what this one would)
    try:
        while True:
            try:
                close = _pending.popleft()
            except IndexError:
                return
            try:
                close()
            except Exception:  # noqa: BLE001 - a finalizer never raises
                pass
    finally:
        _draining.release()


def drain_at_entry() -> None:
    """Drain where a public method begins, if user code called it (no HRX frame below
    the method's): HRX holds none of its locks there. Costs one check when nothing is
    queued."""
    if _pending and not _inside_hrx(sys._getframe(1).f_back):
        drain()


def pending() -> int:
    """How many closes are queued (diagnostics and tests)."""
    return len(_pending)


if _on_gc not in gc.callbacks:
    gc.callbacks.append(_on_gc)

__all__ = ["close_later_if_collecting", "drain", "drain_at_entry", "pending"]
