"""Memory budgets: charge bytes before allocating, refuse when over.

A :class:`MemoryBudget` tracks *extents HRX allocated* (buffers, staging, pools),
not process RSS: native allocator rounding and compiler/code-object memory are not
counted. A charge is taken before the native allocation and released when the
allocation is freed (which pending work and owned graphs delay), so aliases and
pending work keep the backing owner's charge.
"""

from __future__ import annotations

import threading

from .errors import BudgetExceeded, InvalidArgument, show


class MemoryBudget:
    """A byte budget shared by everything charged to it."""

    def __init__(self, limit_bytes: int, *, name: str = "budget") -> None:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 0:
            raise InvalidArgument(f"limit_bytes: expected an int >= 0, got {show(limit_bytes)}")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a nonempty str, got {show(name)}")
        self.name = name
        self.limit_bytes = limit_bytes
        self._used = 0
        self._peak = 0
        # reentrant: a buffer finalizer may release a charge while this thread holds it
        self._lock = threading.RLock()

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def peak_bytes(self) -> int:
        return self._peak

    @property
    def available_bytes(self) -> int:
        return max(0, self.limit_bytes - self._used)

    def charge(self, nbytes: int, what: str = "allocation") -> Charge:
        """Charge ``nbytes`` or raise BudgetExceeded (nothing is charged then)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgument(f"nbytes: expected an int >= 0, got {show(nbytes)}")
        if not isinstance(what, str):
            raise InvalidArgument(f"what: expected a str, got {show(what)}")
        with self._lock:
            if self._used + nbytes > self.limit_bytes:
                raise BudgetExceeded(
                    f"{self.name}: {what} of {nbytes} bytes needs {self._used + nbytes} bytes, "
                    f"over the limit of {self.limit_bytes} ({self._used} in use)"
                )
            self._used += nbytes
            if self._used > self._peak:
                self._peak = self._used
        return Charge(self, nbytes, what)

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes

    def reservation(self, nbytes: int, what: str = "reservation") -> Reservation:
        """Charge ``nbytes`` now and hand out a budget that allocates within them.

        Allocations charged to the reservation are not charged here again: a declared
        reservation and the allocations made inside it count once.
        """
        return Reservation(self, nbytes, what)

    def __repr__(self) -> str:
        return f"<hrx.MemoryBudget {self.name}: {self._used}/{self.limit_bytes} bytes, peak {self._peak}>"


class Charge:
    """Bytes charged to a budget; released exactly once."""

    __slots__ = ("budget", "nbytes", "what", "_released")

    def __init__(self, budget: MemoryBudget, nbytes: int, what: str) -> None:
        self.budget = budget
        self.nbytes = nbytes
        self.what = what
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.budget._release(self.nbytes)

    @property
    def released(self) -> bool:
        return self._released


class Reservation(MemoryBudget):
    """Bytes set aside in a parent budget; allocate inside them with ``budget=reservation``.

    ``close()`` gives the bytes back to the parent once nothing charged inside the
    reservation is still held (pending work and quarantines keep their charges).
    """

    def __init__(self, parent: MemoryBudget, nbytes: int, what: str) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise InvalidArgument(f"nbytes: expected an int >= 0, got {show(nbytes)}")
        if not isinstance(what, str):
            raise InvalidArgument(f"what: expected a str, got {show(what)}")
        super().__init__(nbytes, name=f"{parent.name}/{what}")
        self.parent = parent
        self._parent_charge: Charge | None = parent.charge(nbytes, what)
        self._closed = False

    def charge(self, nbytes: int, what: str = "allocation") -> Charge:
        if self._closed:
            raise InvalidArgument(f"{self.name}: the reservation is closed")
        return super().charge(nbytes, what)

    def _release(self, nbytes: int) -> None:
        super()._release(nbytes)
        self._maybe_return()

    def _maybe_return(self) -> None:
        with self._lock:
            done = self._closed and self._used == 0 and self._parent_charge is not None
            charge, self._parent_charge = (self._parent_charge, None) if done else (None, self._parent_charge)
        if charge is not None:
            charge.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._maybe_return()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
