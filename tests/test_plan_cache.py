"""PlanCache: bounded concurrent preparation, single preparation per key, LRU of idle plans."""

from __future__ import annotations

import threading
import time

import pytest

import hrx_core as hrx
from hrx_core.execution.plan_cache import PlanCache, PlanLease

from .conftest import run_threads


class Plan:
    """A plan that records its closing."""

    def __init__(self, key, log=None):
        self.key = key
        self.closed = False
        self._log = log

    def close(self):
        self.closed = True
        if self._log is not None:
            self._log.append(self.key)


def fill(cache, keys, log=None):
    """Lease and close a plan per key, in order (so the first is least recently used)."""
    for key in keys:
        with cache.lease(key, lambda k=key: Plan(k, log)):
            pass


def test_hit_and_miss():
    cache = PlanCache()
    calls = []
    with cache.lease(("linear", 4, 8), lambda: calls.append(1) or Plan("a")) as first:
        assert isinstance(first, PlanLease) and first.plan.key == "a"
        with cache.lease(("linear", 4, 8), lambda: calls.append(1) or Plan("b")) as second:
            assert second.plan is first.plan
    assert calls == [1]
    s = cache.stats
    assert (s.hits, s.misses, s.plans, s.leased) == (1, 1, 1, 0)
    assert ("linear", 4, 8) in cache and len(cache) == 1 and ("linear", 4, 9) not in cache


def test_lease_without_with_and_closed_lease():
    cache = PlanCache()
    lease = cache.lease("k", lambda: Plan("k"))
    assert cache.stats.leased == 1 and not lease.closed
    lease.close()
    lease.close()  # idempotent
    assert lease.closed and cache.stats.leased == 0
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        _ = lease.plan


def test_concurrent_preparations_are_bounded():
    cache = PlanCache(max_plans=16, max_concurrent=2)
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def prepare():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return Plan("p")

    def worker(i):
        cache.lease(("shape", i), prepare).close()

    run_threads(8, worker)
    assert peak[0] == 2
    s = cache.stats
    assert s.peak_preparing == 2 and s.preparing == 0 and s.misses == 8 and len(cache) == 8


def test_same_key_is_prepared_once():
    cache = PlanCache(max_concurrent=1)
    calls = []
    barrier = threading.Barrier(5)
    plans = [None] * 5

    def prepare():
        calls.append(1)
        time.sleep(0.15)
        return Plan("shared")

    def worker(i):
        barrier.wait()
        with cache.lease("same", prepare) as lease:
            plans[i] = lease.plan

    run_threads(5, worker)
    assert len(calls) == 1
    assert all(p is plans[0] for p in plans)
    s = cache.stats
    assert s.misses == 1 and s.hits == 4 and s.leased == 0


def test_failure_propagates_to_every_waiter_and_caches_nothing():
    cache = PlanCache()
    barrier = threading.Barrier(5)
    calls = []
    errors = [None] * 5

    def prepare():
        calls.append(1)
        time.sleep(0.15)
        raise hrx.CompileError("shape rejected")

    def worker(i):
        barrier.wait()
        try:
            cache.lease("bad", prepare)
        except hrx.CompileError as exc:
            errors[i] = exc

    run_threads(5, worker)
    assert len(calls) == 1
    assert all(isinstance(e, hrx.CompileError) for e in errors)
    assert "bad" not in cache and len(cache) == 0
    assert cache.stats.failures == 1 and cache.stats.preparing == 0
    with cache.lease("bad", lambda: Plan("ok")) as lease:  # a later lease prepares again
        assert lease.plan.key == "ok"


def test_idle_plans_are_evicted_lru_and_closed():
    cache = PlanCache(max_plans=3)
    closed = []
    fill(cache, ["a", "b", "c"], closed)
    fill(cache, ["a"], closed)  # a is now the most recently used
    fill(cache, ["d"], closed)
    assert closed == ["b"]
    fill(cache, ["e"], closed)
    assert closed == ["b", "c"]
    assert sorted(k for k in "abcde" if k in cache) == ["a", "d", "e"]
    assert cache.stats.evictions == 2


def test_leased_plan_is_never_evicted():
    cache = PlanCache(max_plans=2)
    closed = []
    leases = [cache.lease(k, lambda k=k: Plan(k, closed)) for k in "abcd"]
    assert len(cache) == 4 and closed == []  # over max_plans while leased
    fill(cache, ["x", "y"], closed)  # pressure: only the idle newcomers can go
    assert closed == ["x", "y"] and all(k in cache for k in "abcd")
    leases[2].close()
    leases[0].close()
    assert closed == ["x", "y", "c", "a"]  # evicted as soon as they are idle, LRU first
    assert len(cache) == 2 and "b" in cache and "d" in cache
    for lease in leases:
        lease.close()
    assert len(cache) == 2


def test_evict_idle_and_clear_keep_leased_plans():
    cache = PlanCache()
    closed = []
    fill(cache, ["a", "b"], closed)
    held = cache.lease("c", lambda: Plan("c", closed))
    assert cache.evict_idle() == 2 and sorted(closed) == ["a", "b"]
    assert "c" in cache and cache.clear() == 0
    held.close()
    assert cache.clear() == 1 and len(cache) == 0 and closed[-1] == "c"


def test_plans_without_close_and_failing_close():
    cache = PlanCache(max_plans=1)
    fill(cache, ["plain"])
    with cache.lease("tuple", lambda: (1, 2)):
        pass  # evicting "plain" (an object without close) is fine
    assert "plain" not in cache

    class Broken:
        def close(self):
            raise RuntimeError("boom")

    cache.clear()
    with cache.lease("broken", Broken):
        pass
    with pytest.warns(RuntimeWarning, match="boom"):
        cache.evict_idle()
    assert len(cache) == 0


def test_argument_validation():
    for bad in (0, -1, "2", True, 1.5):
        with pytest.raises(hrx.InvalidArgument, match="max_plans"):
            PlanCache(max_plans=bad)
        with pytest.raises(hrx.InvalidArgument, match="max_concurrent"):
            PlanCache(max_concurrent=bad)
    cache = PlanCache()
    with pytest.raises(hrx.InvalidArgument, match="key"):
        cache.lease(["unhashable"], lambda: 1)
    with pytest.raises(hrx.InvalidArgument, match="prepare"):
        cache.lease("k", "not callable")
    assert cache.stats.misses == 0 and len(cache) == 0
    assert [1] not in cache


def test_repr():
    cache = PlanCache(max_plans=8, max_concurrent=3)
    fill(cache, ["a"])
    text = repr(cache)
    assert "1/8 plans" in text and "/3 preparing" in text and "misses=1" in text
    with cache.lease("a", lambda: None) as lease:
        assert "'a'" in repr(lease) and "open" in repr(lease)
