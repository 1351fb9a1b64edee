"""The pending-invocation limit of one NPU program.

A program accepts at most ``limit`` (128 on the reference hardware) invocations
that were launched and have not finished. The next launch waits for one to finish,
or, inside ``PendingLimit.mode(block=False)``, raises QueueFull before anything is
encoded. Engines take a slot when they encode an invocation and give it back when
it finishes (or when the encode is rejected).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

from hrx_core.errors import InvalidArgument, QueueFull, Timeout, show
from hrx_core.timeouts import check_timeout

DEFAULT_LIMIT = 128


class PendingLimit:
    """A counting limit with a per-thread non-blocking mode."""

    def __init__(self, limit: int = DEFAULT_LIMIT, name: str = "program") -> None:
        self.limit = limit
        self.name = name
        self._count = 0
        self._cond = threading.Condition()
        self._tls = threading.local()
        #: highest number of pending invocations seen (tests, stats)
        self.peak = 0

    @property
    def pending(self) -> int:
        return self._count

    @contextlib.contextmanager
    def mode(self, *, block: bool = True, timeout: float | None = None) -> Iterator[None]:
        """How launches on this thread take a slot: ``block=False`` raises QueueFull
        when none is free; ``timeout`` bounds the wait (then Timeout)."""
        if not isinstance(block, bool):
            raise InvalidArgument(f"block: expected a bool, got {show(block)}")
        timeout = check_timeout("timeout", timeout)
        old = getattr(self._tls, "mode", None)
        self._tls.mode = (block, timeout)
        try:
            yield
        finally:
            self._tls.mode = old

    def acquire(self, before_wait: Callable[[], None] | None = None) -> None:
        """Take a slot. When none is free: raise in non-blocking mode; otherwise call
        ``before_wait`` (the engine makes earlier encoded work runnable, so it can
        finish) and wait."""
        with self._cond:
            if self._count < self.limit:
                self._take()
                return
            block, timeout = getattr(self._tls, "mode", None) or (True, None)
            if not block:
                raise QueueFull(f"{self.name}: {self.limit} invocations are pending (the program's limit)")
        if before_wait is not None:
            before_wait()
        with self._cond:
            if not self._cond.wait_for(lambda: self._count < self.limit, timeout):
                raise Timeout(f"{self.name}: no free invocation slot within {timeout} s ({self.limit} pending)")
            self._take()

    def _take(self) -> None:
        self._count += 1
        self.peak = max(self.peak, self._count)

    def release(self) -> None:
        with self._cond:
            self._count -= 1
            self._cond.notify()


__all__ = ["DEFAULT_LIMIT", "PendingLimit"]
