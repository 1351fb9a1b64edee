"""ResidencyManager: units (model weights, kernel libraries) resident under one budget.

Everything resident charges one :class:`~hrx_core.budget.MemoryBudget`, the
manager's :meth:`ResidencyManager.budget`. Pass it to ``device.allocate(budget=...)``,
``RuntimeOptions.memory_budget`` or ``stream.with_memory_budget``: any charge to it
that does not fit first evicts idle units, so the budget makes room by itself.

Units
    ``load_budgeted(key, loader)`` leases the unit cached under ``key`` or runs
    ``loader(budget)``, which allocates the unit's buffers charged to that budget.
    Those allocations carry their own charges; the manager never charges the
    unit's bytes again. A unit's bytes are the charges taken *on the loader's
    thread while it ran* that are still held (so temporary buffers the loader
    freed do not count, and allocations the unit frees later stop counting).
    Charges taken on other threads during the load (concurrent loads, staging
    done by worker threads) are not attributed to the unit; they still count in
    the budget. The loaded value must have ``close()``, which eviction calls and
    which must free the unit's buffers (that releases their charges); a value
    without ``close()`` is rejected with InvalidArgument.

Eviction
    Only idle units go: not leased, not pinned (pins are persistent until
    ``unpin``). Order is least recently used (a lease touches its unit when it
    opens and when it closes). With hysteresis: a charge that does not fit evicts
    until the usage *including that charge* is at most ``low_water * limit``, so
    the next few charges fit without evicting again. Each charge makes at most one
    eviction pass, and a unit that finished loading after the pass began is not
    evicted by it, so units that do not fit together cannot evict each other in a
    loop within one charge; if the pass cannot make room the charge raises
    BudgetExceeded and nothing is charged. A charge that could not fit even with
    every idle unit gone evicts nothing. Memory that pending device work still
    retains is released when that work retires, not at eviction.

Workspaces
    ``lease.workspace(nbytes)`` gives each lease a private scratch reservation,
    charged to the budget, which may grow while leased (growing may evict idle
    units). It is released when the lease closes; it is not kept with the unit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import attrs

from ..budget import Charge, MemoryBudget
from ..buffer import check_int
from ..errors import BudgetExceeded, InvalidArgument, show
from .plan_cache import check_key, close_quietly

__all__ = ["ResidencyManager", "ResidencyStats", "UnitLease", "Workspace"]

T = TypeVar("T")

_LOADING = "loading"
_READY = "ready"
_FAILED = "failed"


class _Unit:
    """One key: state, value (or load error), leases, pin and attributed charges."""

    __slots__ = ("charges", "error", "key", "leases", "loaded_pass", "pinned", "state", "value")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.state = _LOADING
        self.value: Any = None
        self.error: BaseException | None = None
        # Open leases, including callers waiting for this unit's load (reserved up
        # front so the unit cannot be evicted before they wake).
        self.leases = 0
        self.pinned = False
        self.charges: list[Charge] = []
        self.loaded_pass = 0

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.charges if not c.released)

    @property
    def evictable(self) -> bool:
        return self.state == _READY and self.leases == 0 and not self.pinned


class _ResidencyBudget(MemoryBudget):
    """The manager's budget: a charge that does not fit first evicts idle units."""

    def __init__(self, manager: ResidencyManager, limit_bytes: int, name: str) -> None:
        super().__init__(limit_bytes, name=name)
        self._manager = manager

    def charge(self, nbytes: int, what: str = "allocation") -> Charge:
        """Charge ``nbytes``, evicting idle units first if needed; else BudgetExceeded."""
        return self._charge(nbytes, what, attribute=True)

    def _charge(self, nbytes: int, what: str, *, attribute: bool) -> Charge:
        try:
            charge = super().charge(nbytes, what)
        except BudgetExceeded:
            evicted = self._manager._make_room(nbytes)
            try:
                charge = super().charge(nbytes, what)
            except BudgetExceeded as again:
                raise BudgetExceeded(
                    f"{again}; evicted {evicted} idle unit(s), the rest is leased, pinned or not a unit"
                ) from None
        if attribute:
            self._manager._attribute(charge)
        return charge


class Workspace:
    """A lease's private scratch bytes, charged to the manager's budget.

    Grown through :meth:`UnitLease.workspace`; released when the lease closes.
    """

    __slots__ = ("_charges", "_released", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self._charges: list[Charge] = []
        self._released = False

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._charges if not c.released)

    @property
    def released(self) -> bool:
        """True once the lease closed and its bytes went back to the budget."""
        return self._released

    def _release(self) -> int:
        self._released = True
        freed = self.nbytes
        for c in self._charges:
            c.release()
        return freed

    def __repr__(self) -> str:
        return f"<hrx.Workspace {self.what}: {self.nbytes} bytes>"


@attrs.frozen
class ResidencyStats:
    """A snapshot of a :class:`ResidencyManager`.

    ``resident_bytes`` sums the units' attributed charges (pinned ones included);
    ``workspace_bytes`` the open leases' workspaces; ``used_bytes`` is everything
    charged to the budget (units, workspaces, and other users of the budget).
    """

    units: int
    leased_units: int
    pinned_units: int
    hits: int
    misses: int
    evictions: int
    resident_bytes: int
    pinned_bytes: int
    workspace_bytes: int
    used_bytes: int
    limit_bytes: int


class UnitLease(Generic[T]):
    """An open lease on a resident unit: while open, the unit is never evicted.

    Use it as a context manager or call :meth:`close`; closing twice is a no-op.
    A lease (and its workspace) belongs to one caller; do not share it between
    threads without your own locking.
    """

    __slots__ = ("_closed", "_lock", "_manager", "_unit", "_workspace")

    def __init__(self, manager: ResidencyManager, unit: _Unit) -> None:
        self._manager = manager
        self._unit = unit
        self._closed = False
        self._workspace = Workspace(f"workspace of {unit.key!r}")
        self._lock = threading.Lock()

    @property
    def key(self) -> Hashable:
        return self._unit.key

    @property
    def value(self) -> T:
        """The unit's value (only while the lease is open)."""
        self._check_open()
        return self._unit.value  # type: ignore[no-any-return]

    @property
    def nbytes(self) -> int:
        """The unit's resident bytes (its attributed charges still held)."""
        return self._unit.nbytes

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"unit lease for key {self._unit.key!r} is closed")

    def workspace(self, nbytes: int) -> Workspace:
        """This lease's private workspace, grown to at least ``nbytes``.

        Growing charges the difference to the budget, evicting idle units if
        needed; on BudgetExceeded the workspace keeps its previous size. It never
        shrinks while the lease is open and is released when the lease closes.
        """
        nbytes = check_int("nbytes", nbytes)
        with self._lock:
            self._check_open()
            grow = nbytes - self._workspace.nbytes
            if grow > 0:
                charge = self._manager._budget._charge(grow, self._workspace.what, attribute=False)
                self._workspace._charges.append(charge)
                self._manager._workspace_grew(grow)
            return self._workspace

    def close(self) -> None:
        """End the lease: release its workspace; the unit becomes idle if unleased."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            freed = self._workspace._release()
        self._manager._release(self._unit, freed)

    def __enter__(self) -> UnitLease[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<hrx.UnitLease {self._unit.key!r} {self._unit.nbytes} bytes ({state})>"


class ResidencyManager:
    """Units resident under one byte budget, with pins, leases and LRU eviction."""

    def __init__(self, limit_bytes: int, *, low_water: float = 0.9, name: str = "residency") -> None:
        limit_bytes = check_int("limit_bytes", limit_bytes)
        if isinstance(low_water, bool) or not isinstance(low_water, (int, float)) or not 0 < low_water <= 1:
            raise InvalidArgument(f"low_water: expected a fraction in (0, 1], got {show(low_water)}")
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name: expected a non-empty str, got {show(name)}")
        self.name = name
        self.low_water = float(low_water)
        self._budget = _ResidencyBudget(self, limit_bytes, name)
        self._lock = threading.RLock()  # reentrant: a unit's close() may call back in
        self._cond = threading.Condition(self._lock)
        self._units: OrderedDict[Hashable, _Unit] = OrderedDict()  # least recently used first
        self._local = threading.local()  # per thread: stack of units being loaded
        self._passes = 0
        self._workspace_bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    @property
    def limit_bytes(self) -> int:
        return self._budget.limit_bytes

    def budget(self) -> MemoryBudget:
        """The budget everything resident charges; full charges evict idle units."""
        return self._budget

    def reserve(self, nbytes: int, what: str = "reservation") -> Charge:
        """Charge ``nbytes`` to the budget directly (evicting idle units if needed).

        Inside a loader the reservation counts as the loading unit's bytes. Release
        it with ``Charge.release()``. Do not also allocate the same bytes charged to
        the budget: that would count them twice.
        """
        return self._budget.charge(nbytes, what)

    # -- units ----------------------------------------------------------------------

    def load_budgeted(self, key: Hashable, loader: Callable[[MemoryBudget], T], *, pin: bool = False) -> UnitLease[T]:
        """Lease the unit ``key``, loading it with ``loader(budget)`` on a miss.

        Concurrent callers of one key wait for a single load. ``pin=True`` also pins
        the unit (persistently, until :meth:`unpin`). Errors from ``loader``
        (BudgetExceeded among them) propagate to every waiter; nothing is cached.
        """
        check_key(key)
        if not isinstance(pin, bool):
            raise InvalidArgument(f"pin: expected a bool, got {type(pin).__name__}")
        if not callable(loader):
            raise InvalidArgument(f"loader: expected a callable, got {type(loader).__name__} {loader!r}")
        with self._cond:
            unit = self._units.get(key)
            if unit is not None:
                unit.leases += 1
                self._units.move_to_end(key)
                while unit.state == _LOADING:
                    self._cond.wait()
                if unit.state == _FAILED:
                    assert unit.error is not None
                    raise unit.error
                unit.pinned = unit.pinned or pin
                self._hits += 1
                return UnitLease(self, unit)
            unit = _Unit(key)
            unit.leases = 1
            self._units[key] = unit
            self._misses += 1
        try:
            value = self._run_loader(unit, loader)
            if not callable(getattr(value, "close", None)):
                raise InvalidArgument(
                    f"loader: returned {type(value).__name__}, which has no close(); "
                    "a unit must close() to free its buffers on eviction"
                )
        except BaseException as exc:
            with self._cond:
                unit.state = _FAILED
                unit.error = exc
                unit.charges = []
                del self._units[key]
                self._cond.notify_all()
            raise
        with self._cond:
            unit.value = value
            unit.state = _READY
            unit.pinned = pin
            unit.loaded_pass = self._passes
            self._cond.notify_all()
        return UnitLease(self, unit)

    def _run_loader(self, unit: _Unit, loader: Callable[[MemoryBudget], T]) -> T:
        stack = getattr(self._local, "loading", None)
        if stack is None:
            stack = self._local.loading = []
        stack.append(unit)
        try:
            return loader(self._budget)
        finally:
            stack.pop()

    def _attribute(self, charge: Charge) -> None:
        """Count a charge taken on a loader's thread as the loading unit's bytes."""
        stack = getattr(self._local, "loading", None)
        if stack:
            stack[-1].charges.append(charge)

    def _release(self, unit: _Unit, workspace_freed: int) -> None:
        with self._cond:
            unit.leases -= 1
            self._workspace_bytes -= workspace_freed
            if self._units.get(unit.key) is unit:
                self._units.move_to_end(unit.key)

    def _workspace_grew(self, nbytes: int) -> None:
        with self._lock:
            self._workspace_bytes += nbytes

    def _resident(self, key: Hashable) -> _Unit:
        check_key(key)
        unit = self._units.get(key)
        if unit is None or unit.state != _READY:
            raise InvalidArgument(f"key: {key!r} is not resident in {self.name!r}; load it with load_budgeted first")
        return unit

    def pin(self, key: Hashable) -> None:
        """Pin a resident unit: it is never evicted until :meth:`unpin`."""
        with self._lock:
            self._resident(key).pinned = True

    def unpin(self, key: Hashable) -> None:
        """Unpin a resident unit: once idle it may be evicted again."""
        with self._lock:
            self._resident(key).pinned = False

    # -- eviction -------------------------------------------------------------------

    def _make_room(self, nbytes: int) -> int:
        """One eviction pass for a charge of ``nbytes`` that did not fit.

        Evicts idle units, least recently used first, until usage plus ``nbytes``
        is at most the low-water mark or no candidate is left. Units that finished
        loading after this pass began are skipped, so the pass ends. If evicting
        every candidate (by their attributed bytes) could not make room, nothing is
        evicted: the refused charge changes nothing. Values are closed without the
        lock held (closing frees buffers, maybe slowly).
        """
        with self._lock:
            self._passes += 1
            this_pass = self._passes
            evictable = sum(u.nbytes for u in self._units.values() if u.evictable)
            if self._budget.used_bytes - evictable + nbytes > self._budget.limit_bytes:
                return 0
        target = int(self.low_water * self._budget.limit_bytes)
        evicted = 0
        while True:
            with self._lock:
                if self._budget.used_bytes + nbytes <= target:
                    break
                victim = next(
                    (u for u in self._units.values() if u.evictable and u.loaded_pass < this_pass),
                    None,
                )
                if victim is None:
                    break
                del self._units[victim.key]
                self._evictions += 1
            close_quietly(victim.value, f"{self.name}: unit {victim.key!r}")
            evicted += 1
        return evicted

    def release_idle(self) -> int:
        """Evict every idle, unpinned unit (leased and pinned ones stay); returns how many."""
        with self._lock:
            victims = [u for u in self._units.values() if u.evictable]
            for unit in victims:
                del self._units[unit.key]
            self._evictions += len(victims)
        for unit in victims:
            close_quietly(unit.value, f"{self.name}: unit {unit.key!r}")
        return len(victims)

    # -- introspection ------------------------------------------------------------

    @property
    def stats(self) -> ResidencyStats:
        with self._lock:
            ready = [u for u in self._units.values() if u.state == _READY]
            return ResidencyStats(
                units=len(ready),
                leased_units=sum(1 for u in ready if u.leases),
                pinned_units=sum(1 for u in ready if u.pinned),
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                resident_bytes=sum(u.nbytes for u in ready),
                pinned_bytes=sum(u.nbytes for u in ready if u.pinned),
                workspace_bytes=self._workspace_bytes,
                used_bytes=self._budget.used_bytes,
                limit_bytes=self._budget.limit_bytes,
            )

    def __len__(self) -> int:
        """Number of resident units (leased, pinned or idle)."""
        with self._lock:
            return sum(1 for u in self._units.values() if u.state == _READY)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            try:
                unit = self._units.get(key)
            except TypeError:
                return False
            return unit is not None and unit.state == _READY

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<hrx.ResidencyManager {self.name}: {s.units} units ({s.leased_units} leased, "
            f"{s.pinned_units} pinned), {s.resident_bytes} bytes resident ({s.pinned_bytes} pinned), "
            f"{s.workspace_bytes} workspace, {s.used_bytes}/{s.limit_bytes} used, "
            f"hits={s.hits} misses={s.misses} evictions={s.evictions}>"
        )
