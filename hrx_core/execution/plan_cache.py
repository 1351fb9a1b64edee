"""PlanCache: prepared plans (compiled shapes, native graphs) shared under a bound.

``cache.lease(key, prepare)`` returns a :class:`PlanLease` on the plan cached for
``key``, running ``prepare()`` on a miss. Preparation is bounded: at most
``max_concurrent`` preparations run at once across all keys (others wait, blocked,
for a slot), and concurrent callers of one key wait for its single preparation
instead of preparing it twice. If ``prepare`` raises, that error propagates to
every caller waiting for the key and nothing is cached.

Idle plans (no open lease) are evicted least-recently-used once more than
``max_plans`` are cached; a leased plan is never evicted, so the cache may hold
more than ``max_plans`` while leases are open and shrinks as they close. Eviction
calls the plan's ``close()`` when it has one. ``prepare`` must not lease from the
same cache (a nested preparation could wait forever for a slot its caller holds).
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import attrs

from ..buffer import check_int
from ..errors import InvalidArgument

__all__ = ["PlanCache", "PlanCacheStats", "PlanLease"]

T = TypeVar("T")

_PREPARING = "preparing"
_READY = "ready"
_FAILED = "failed"


def check_key(key: Any) -> Hashable:
    """Validate that ``key`` is hashable (cache keys index a dict)."""
    try:
        hash(key)
    except TypeError:
        raise InvalidArgument(f"key: expected a hashable key, got {type(key).__name__} {key!r}") from None
    checked: Hashable = key
    return checked


def close_quietly(obj: Any, what: str) -> None:
    """Call ``obj.close()`` if it has one; a failure becomes a RuntimeWarning.

    Eviction runs inside other callers' operations, which must not fail because an
    evicted object could not close itself.
    """
    close = getattr(obj, "close", None)
    if callable(close):
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - reported, eviction goes on
            warnings.warn(f"{what}: close() failed during eviction: {exc!r}", RuntimeWarning, stacklevel=3)


class _Entry:
    """One key: its state, plan (or error) and open lease count."""

    __slots__ = ("error", "key", "leases", "plan", "state")

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.state = _PREPARING
        self.plan: Any = None
        self.error: BaseException | None = None
        # Open leases, including callers waiting for this key's preparation (their
        # lease is reserved up front so the plan cannot be evicted before they wake).
        self.leases = 0


@attrs.frozen
class PlanCacheStats:
    """A snapshot of a :class:`PlanCache`.

    ``hits`` counts leases served without preparing (including callers that waited
    for another caller's preparation of the same key); ``misses`` counts
    preparations started; ``failures`` counts preparations that raised.
    """

    plans: int
    leased: int
    hits: int
    misses: int
    failures: int
    evictions: int
    preparing: int
    peak_preparing: int
    max_plans: int
    max_concurrent: int


class PlanLease(Generic[T]):
    """An open lease on a cached plan; the plan is not evicted until it closes.

    Use it as a context manager or call :meth:`close`; closing twice is a no-op.
    """

    __slots__ = ("_cache", "_closed", "_entry")

    def __init__(self, cache: PlanCache, entry: _Entry) -> None:
        self._cache = cache
        self._entry = entry
        self._closed = False

    @property
    def key(self) -> Hashable:
        return self._entry.key

    @property
    def plan(self) -> T:
        """The prepared plan (only while the lease is open)."""
        if self._closed:
            raise InvalidArgument(f"plan lease for key {self._entry.key!r} is closed")
        return self._entry.plan  # type: ignore[no-any-return]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """End the lease; the plan becomes idle (evictable) when no lease remains."""
        if not self._closed:
            self._closed = True
            self._cache._release(self._entry)

    def __enter__(self) -> PlanLease[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<hrx.PlanLease {self._entry.key!r} ({state})>"


class PlanCache:
    """A thread-safe cache of prepared plans with bounded concurrent preparation."""

    def __init__(self, max_plans: int = 64, max_concurrent: int = 2) -> None:
        self.max_plans = check_int("max_plans", max_plans, minimum=1)
        self.max_concurrent = check_int("max_concurrent", max_concurrent, minimum=1)
        self._cond = threading.Condition(threading.Lock())
        self._plans: OrderedDict[Hashable, _Entry] = OrderedDict()  # ready; least recently used first
        self._pending: dict[Hashable, _Entry] = {}  # being prepared (or waiting for a slot)
        self._active = 0  # preparations running now
        self._peak_active = 0
        self._hits = 0
        self._misses = 0
        self._failures = 0
        self._evictions = 0

    # -- leases -------------------------------------------------------------------

    def lease(self, key: Hashable, prepare: Callable[[], T]) -> PlanLease[T]:
        """Lease the plan for ``key``, running ``prepare()`` if it is not cached.

        Blocks while another caller prepares the same key, and while
        ``max_concurrent`` preparations already run. Raises whatever ``prepare``
        raised (to every caller waiting for that key); nothing is cached then.
        """
        check_key(key)
        if not callable(prepare):
            raise InvalidArgument(f"prepare: expected a callable, got {type(prepare).__name__} {prepare!r}")
        with self._cond:
            entry = self._plans.get(key)
            if entry is not None:
                entry.leases += 1
                self._plans.move_to_end(key)
                self._hits += 1
                return PlanLease(self, entry)
            entry = self._pending.get(key)
            if entry is not None:
                entry.leases += 1
                while entry.state == _PREPARING:
                    self._cond.wait()
                if entry.state == _FAILED:
                    assert entry.error is not None
                    raise entry.error
                self._hits += 1
                return PlanLease(self, entry)
            entry = _Entry(key)
            entry.leases = 1
            self._pending[key] = entry
            self._misses += 1
        try:
            plan = self._prepare(prepare)
        except BaseException as exc:
            with self._cond:
                entry.state = _FAILED
                entry.error = exc
                del self._pending[key]
                self._failures += 1
                self._cond.notify_all()
            raise
        with self._cond:
            entry.plan = plan
            entry.state = _READY
            del self._pending[key]
            self._plans[key] = entry
            self._cond.notify_all()
            victims = self._take_victims()
        self._close(victims)
        return PlanLease(self, entry)

    def _prepare(self, prepare: Callable[[], T]) -> T:
        """Run ``prepare`` inside one of the ``max_concurrent`` preparation slots."""
        with self._cond:
            while self._active >= self.max_concurrent:
                self._cond.wait()
            self._active += 1
            self._peak_active = max(self._peak_active, self._active)
        try:
            return prepare()
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def _release(self, entry: _Entry) -> None:
        with self._cond:
            entry.leases -= 1
            if self._plans.get(entry.key) is entry:
                self._plans.move_to_end(entry.key)
            victims = self._take_victims()
        self._close(victims)

    # -- eviction -----------------------------------------------------------------

    def _take_victims(self, limit: int | None = None) -> list[_Entry]:
        """Remove idle plans, least recently used first, until ``limit`` remain.

        Called with the lock held; the victims are closed after it is released.
        """
        limit = self.max_plans if limit is None else limit
        excess = len(self._plans) - limit
        if excess <= 0:
            return []
        victims: list[Any] = []
        for entry in list(self._plans.values()):
            if len(victims) == excess:
                break
            if entry.leases == 0:
                del self._plans[entry.key]
                victims.append(entry)
        self._evictions += len(victims)
        return victims

    @staticmethod
    def _close(victims: list[_Entry]) -> None:
        for entry in victims:
            close_quietly(entry.plan, f"plan {entry.key!r}")

    def evict_idle(self) -> int:
        """Evict every idle plan (leased and preparing plans stay); returns how many."""
        with self._cond:
            victims = self._take_victims(limit=0)
        self._close(victims)
        return len(victims)

    def clear(self) -> int:
        """Drop every idle plan, as :meth:`evict_idle`; leased plans stay cached."""
        return self.evict_idle()

    # -- introspection ------------------------------------------------------------

    @property
    def stats(self) -> PlanCacheStats:
        with self._cond:
            return PlanCacheStats(
                plans=len(self._plans),
                leased=sum(1 for e in self._plans.values() if e.leases),
                hits=self._hits,
                misses=self._misses,
                failures=self._failures,
                evictions=self._evictions,
                preparing=self._active,
                peak_preparing=self._peak_active,
                max_plans=self.max_plans,
                max_concurrent=self.max_concurrent,
            )

    def __len__(self) -> int:
        """Number of prepared plans cached (leased or idle)."""
        return len(self._plans)

    def __contains__(self, key: object) -> bool:
        try:
            return key in self._plans
        except TypeError:
            return False

    def __repr__(self) -> str:
        s = self.stats
        return (
            f"<hrx.PlanCache {s.plans}/{s.max_plans} plans ({s.leased} leased), "
            f"{s.preparing}/{s.max_concurrent} preparing, hits={s.hits} misses={s.misses} "
            f"failures={s.failures} evictions={s.evictions}>"
        )
