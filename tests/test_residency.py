"""ResidencyManager on the host engine: real budgeted allocations, eviction, pins, workspaces."""

from __future__ import annotations

import gc
import random
import threading
import time

import pytest

import hrx_core as hrx
from hrx_core.execution.residency import ResidencyManager, UnitLease, Workspace

K = 1024


@pytest.fixture
def dev():
    return hrx.device("host")


def live(dev) -> int:
    gc.collect()
    return dev.stats.live_bytes


class Unit:
    """A unit made of host buffers; close() frees them (then runs ``on_close``)."""

    def __init__(self, buffers, name="unit", on_close=None):
        self.buffers = buffers
        self.name = name
        self.closed = False
        self.on_close = on_close

    def close(self):
        for b in self.buffers:
            b.close()
        self.closed = True
        if self.on_close is not None:
            self.on_close()


def loader(dev, *sizes, log=None, name="unit", on_close=None):
    """A loader allocating one buffer per size, charged to the budget it is given."""

    def load(budget):
        if log is not None:
            log.append(name)
        return Unit([dev.allocate(n, budget=budget) for n in sizes], name, on_close)

    return load


def touch(mgr, key, load):
    with mgr.load_budgeted(key, load) as lease:
        return lease.value


def test_hit_and_miss(dev):
    mgr = ResidencyManager(100 * K)
    log = []
    with mgr.load_budgeted("weights", loader(dev, 10 * K, 5 * K, log=log)) as first:
        assert isinstance(first, UnitLease) and first.nbytes == 15 * K
        with mgr.load_budgeted("weights", loader(dev, 1, log=log)) as second:
            assert second.value is first.value
    assert log == ["unit"]
    s = mgr.stats
    assert (s.hits, s.misses, s.units, s.leased_units, s.resident_bytes) == (1, 1, 1, 0, 15 * K)
    assert "weights" in mgr and len(mgr) == 1 and "other" not in mgr


def test_budget_is_exact_and_never_double_counts(dev):
    mgr = ResidencyManager(100 * K)
    budget = mgr.budget()
    start = live(dev)

    def with_scratch(b):
        scratch = dev.allocate(7 * K, budget=b)  # temporary: freed before the load ends
        unit = Unit([dev.allocate(12 * K, budget=b), dev.allocate(3 * K, budget=b)])
        scratch.close()
        return unit

    touch(mgr, "a", with_scratch)
    touch(mgr, "b", loader(dev, 20 * K))
    assert budget.used_bytes == mgr.stats.resident_bytes == 35 * K
    assert live(dev) == start + 35 * K  # the manager charged nothing of its own
    with mgr.load_budgeted("a", with_scratch) as lease:
        lease.workspace(4 * K)
        assert budget.used_bytes == 39 * K and mgr.stats.workspace_bytes == 4 * K
        assert mgr.stats.resident_bytes == 35 * K
    assert budget.used_bytes == 35 * K and mgr.stats.workspace_bytes == 0
    outside = dev.allocate(5 * K, budget=budget)  # not a unit: counts in the budget only
    assert budget.used_bytes == 40 * K and mgr.stats.resident_bytes == 35 * K
    outside.close()
    assert mgr.release_idle() == 2
    assert budget.used_bytes == 0 and live(dev) == start


def test_idle_units_are_evicted_lru(dev):
    mgr = ResidencyManager(100 * K, low_water=1.0)
    values = {k: touch(mgr, k, loader(dev, 30 * K)) for k in "abc"}
    touch(mgr, "a", loader(dev, 30 * K))  # a becomes the most recently used
    touch(mgr, "d", loader(dev, 30 * K))
    assert values["b"].closed and not values["a"].closed and not values["c"].closed
    touch(mgr, "e", loader(dev, 30 * K))
    assert values["c"].closed and not values["a"].closed
    assert sorted(k for k in "abcde" if k in mgr) == ["a", "d", "e"]
    assert mgr.stats.evictions == 2 and mgr.budget().used_bytes == 90 * K


def test_in_use_unit_is_never_evicted_and_refusal_allocates_nothing(dev):
    mgr = ResidencyManager(100 * K, name="weights")
    held = mgr.load_budgeted("a", loader(dev, 60 * K))
    used = mgr.budget().used_bytes
    start = live(dev)
    with pytest.raises(hrx.BudgetExceeded) as info:
        mgr.load_budgeted("b", loader(dev, 60 * K))
    message = str(info.value)
    assert "weights" in message and str(100 * K) in message and str(60 * K) in message
    assert live(dev) == start and mgr.budget().used_bytes == used
    assert "b" not in mgr and "a" in mgr and not held.value.closed
    assert mgr.stats.evictions == 0
    held.close()
    touch(mgr, "b", loader(dev, 60 * K))  # now a is idle and makes room
    assert "a" not in mgr and "b" in mgr


def test_hopeless_charge_evicts_nothing(dev):
    mgr = ResidencyManager(100 * K)
    held = mgr.load_budgeted("leased", loader(dev, 60 * K))
    idle = touch(mgr, "idle", loader(dev, 30 * K))
    with pytest.raises(hrx.BudgetExceeded, match="evicted 0 idle"):
        mgr.load_budgeted("big", loader(dev, 50 * K))  # 60 K leased + 50 K > 100 K anyway
    with pytest.raises(hrx.BudgetExceeded):
        mgr.reserve(200 * K)
    assert not idle.closed and "idle" in mgr and mgr.stats.evictions == 0
    assert mgr.budget().used_bytes == 90 * K
    held.close()


def test_pins_are_persistent(dev):
    mgr = ResidencyManager(100 * K)
    touch_pinned = mgr.load_budgeted("base", loader(dev, 60 * K), pin=True)
    touch_pinned.close()
    assert mgr.stats.pinned_bytes == 60 * K and mgr.stats.pinned_units == 1
    with pytest.raises(hrx.BudgetExceeded):
        touch(mgr, "other", loader(dev, 60 * K))
    assert mgr.release_idle() == 0 and "base" in mgr
    mgr.unpin("base")
    touch(mgr, "other", loader(dev, 60 * K))
    assert "base" not in mgr and mgr.stats.pinned_bytes == 0
    mgr.pin("other")
    mgr.pin("other")  # idempotent
    assert mgr.release_idle() == 0
    with mgr.load_budgeted("other", loader(dev, 1)) as lease:
        assert lease.nbytes == 60 * K
    with pytest.raises(hrx.InvalidArgument, match="not resident"):
        mgr.pin("missing")
    with pytest.raises(hrx.InvalidArgument, match="not resident"):
        mgr.unpin("base")


def test_workspace_grows_while_leased_evicting_idle_units(dev):
    mgr = ResidencyManager(100 * K)  # low water 90 K
    budget = mgr.budget()
    a = touch(mgr, "a", loader(dev, 40 * K))
    b = touch(mgr, "b", loader(dev, 40 * K))
    with mgr.load_budgeted("model", loader(dev, 10 * K)) as lease:
        ws = lease.workspace(20 * K)  # 110 K > 100 K: evict a (LRU) down to <= 90 K
        assert isinstance(ws, Workspace) and ws.nbytes == 20 * K
        assert a.closed and not b.closed and budget.used_bytes == 70 * K
        assert lease.workspace(30 * K) is ws and ws.nbytes == 30 * K  # grows in place
        assert lease.workspace(5 * K).nbytes == 30 * K  # never shrinks while leased
        assert not b.closed and budget.used_bytes == 80 * K
        with pytest.raises(hrx.BudgetExceeded):
            lease.workspace(100 * K)  # evicting b could not make room: nothing changes
        assert not b.closed and ws.nbytes == 30 * K and budget.used_bytes == 80 * K
    assert ws.released and budget.used_bytes == 50 * K and mgr.stats.workspace_bytes == 0
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        lease.workspace(1)
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        _ = lease.value


def test_any_charge_to_the_budget_makes_room(dev):
    mgr = ResidencyManager(100 * K)
    unit = touch(mgr, "a", loader(dev, 70 * K))
    scratch = dev.allocate(50 * K, budget=mgr.budget())  # a plain allocation
    assert unit.closed and "a" not in mgr
    charge = mgr.reserve(30 * K, "staging")
    assert mgr.budget().used_bytes == 80 * K
    with pytest.raises(hrx.BudgetExceeded, match="staging"):
        mgr.reserve(30 * K, "staging")
    charge.release()
    scratch.close()
    assert mgr.budget().used_bytes == 0


def test_low_water_hysteresis_evicts_past_the_bare_minimum(dev):
    mgr = ResidencyManager(100 * K, low_water=0.5)
    units = [touch(mgr, k, loader(dev, 20 * K)) for k in "abcd"]  # 80 K used
    touch(mgr, "e", loader(dev, 30 * K))  # bare minimum: 1 unit; to low water: 3
    assert [u.closed for u in units] == [True, True, True, False]
    assert mgr.budget().used_bytes == 50 * K
    touch(mgr, "f", loader(dev, 40 * K))  # fits now without evicting
    assert mgr.stats.evictions == 3


def test_two_units_that_do_not_fit_evict_each_other_once_per_switch(dev):
    mgr = ResidencyManager(100 * K)
    closes = {"a": 0, "b": 0}
    budget = mgr.budget()
    charges = []
    real_charge = budget.charge

    def counting_charge(nbytes, what="allocation"):
        charges.append(nbytes)
        return real_charge(nbytes, what)

    budget.charge = counting_charge  # type: ignore[method-assign]

    def load(key):
        def bump():
            closes[key] += 1

        return loader(dev, 60 * K, name=key, on_close=bump)

    switches = 6
    for i in range(switches):
        key = "ab"[i % 2]
        with mgr.load_budgeted(key, load(key)) as lease:
            assert lease.value.name == key
        other = "ab"[(i + 1) % 2]
        assert key in mgr and other not in mgr
        assert mgr.stats.evictions == sum(closes.values()) == i  # this switch evicted the other once
    s = mgr.stats
    assert s.misses == switches and s.evictions == switches - 1 and s.hits == 0
    assert closes == {"a": 3, "b": 2}
    assert charges == [60 * K] * switches  # one charge per load, each made room in one pass


def test_a_single_charge_never_loops(dev):
    """Units whose close() reloads the other one cannot ping-pong inside one charge."""
    mgr = ResidencyManager(100 * K)
    closes = []
    reloading = [True]

    def reload(key):
        def on_close():
            closes.append(key)
            if reloading[0]:
                other = "c" if key == "a" else "a"
                touch(mgr, other, loader(dev, 50 * K, name=other, on_close=reload(other)))

        return on_close

    touch(mgr, "a", loader(dev, 60 * K, name="a", on_close=reload("a")))
    with pytest.raises(hrx.BudgetExceeded, match="evicted 1 idle unit"):
        # b's charge evicts a; a's close() loads c (50 K) during that pass; the pass
        # must not evict c (whose close would reload a, and so on): it gives up.
        mgr.load_budgeted("b", loader(dev, 60 * K))
    assert closes == ["a"] and "c" in mgr and "b" not in mgr and "a" not in mgr
    assert mgr.stats.evictions == 1 and mgr.budget().used_bytes == 50 * K
    reloading[0] = False
    touch(mgr, "b", loader(dev, 60 * K))  # a new charge, a new pass: c may go now
    assert closes == ["a", "c"] and "b" in mgr and "c" not in mgr
    assert mgr.budget().used_bytes == 60 * K


def test_release_idle_keeps_leased_and_pinned_units(dev):
    mgr = ResidencyManager(100 * K)
    start = live(dev)
    idle = [touch(mgr, k, loader(dev, 10 * K)) for k in ("x", "y")]
    touch_pin = mgr.load_budgeted("pinned", loader(dev, 10 * K), pin=True)
    touch_pin.close()
    session = mgr.load_budgeted("session", loader(dev, 10 * K))
    session.workspace(5 * K)
    assert mgr.release_idle() == 2 and all(u.closed for u in idle)
    assert "pinned" in mgr and "session" in mgr and not session.value.closed
    assert live(dev) == start + 20 * K and mgr.budget().used_bytes == 25 * K
    session.workspace(8 * K)  # the session stays usable
    session.close()
    assert mgr.release_idle() == 1 and mgr.budget().used_bytes == 10 * K


def test_loader_errors_and_values_without_close(dev):
    mgr = ResidencyManager(100 * K)
    start = live(dev)

    def failing(budget):
        dev.allocate(10 * K, budget=budget)
        raise hrx.ArtifactError("truncated file")

    with pytest.raises(hrx.ArtifactError):
        mgr.load_budgeted("bad", failing)
    with pytest.raises(hrx.InvalidArgument, match="close"):
        mgr.load_budgeted("plain", lambda b: [dev.allocate(K, budget=b)])
    assert len(mgr) == 0 and mgr.stats.resident_bytes == 0
    gc.collect()
    assert live(dev) == start and mgr.budget().used_bytes == 0
    touch(mgr, "bad", loader(dev, K))  # a later load retries
    assert "bad" in mgr


def test_concurrent_loads_of_one_key_load_once(dev):
    mgr = ResidencyManager(100 * K)
    calls = []
    barrier = threading.Barrier(5)
    seen = []

    def slow(budget):
        calls.append(1)
        time.sleep(0.1)
        return Unit([dev.allocate(10 * K, budget=budget)])

    def worker():
        barrier.wait()
        with mgr.load_budgeted("shared", slow) as lease:
            seen.append(lease.value)

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 1 and len(seen) == 5 and all(v is seen[0] for v in seen)
    assert mgr.stats.hits == 4 and mgr.stats.misses == 1 and mgr.stats.resident_bytes == 10 * K


def test_threads_leasing_and_loading(dev):
    mgr = ResidencyManager(100 * K)
    start = live(dev)
    errors = []
    refused = [0]

    def worker(seed):
        rng = random.Random(seed)
        try:
            for _ in range(150):
                key = rng.randrange(12)
                try:
                    with mgr.load_budgeted(key, loader(dev, 10 * K, name=key)) as lease:
                        assert lease.value.name == key and not lease.value.closed
                        if rng.random() < 0.3:
                            lease.workspace(rng.randrange(1, 5) * K)
                        assert not lease.value.closed
                except hrx.BudgetExceeded:
                    refused[0] += 1  # a race for freshly freed room: allowed, but rare
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert refused[0] < 30
    s = mgr.stats
    assert s.evictions > 0 and s.leased_units == 0 and s.workspace_bytes == 0
    assert mgr.budget().used_bytes == s.resident_bytes == 10 * K * s.units
    mgr.release_idle()
    assert mgr.budget().used_bytes == 0 and live(dev) == start


def test_argument_validation(dev):
    for bad in (-1, "100", True, 1.5):
        with pytest.raises(hrx.InvalidArgument, match="limit_bytes"):
            ResidencyManager(bad)
    for bad in (0, -0.1, 1.5, True, "0.9"):
        with pytest.raises(hrx.InvalidArgument, match="low_water"):
            ResidencyManager(K, low_water=bad)
    with pytest.raises(hrx.InvalidArgument, match="name"):
        ResidencyManager(K, name="")
    mgr = ResidencyManager(K)
    with pytest.raises(hrx.InvalidArgument, match="key"):
        mgr.load_budgeted({"un": "hashable"}, loader(dev, 1))
    with pytest.raises(hrx.InvalidArgument, match="loader"):
        mgr.load_budgeted("k", None)
    with pytest.raises(hrx.InvalidArgument, match="nbytes"):
        mgr.reserve(-1)
    with mgr.load_budgeted("k", loader(dev, 1)) as lease, pytest.raises(hrx.InvalidArgument, match="nbytes"):
        lease.workspace(-5)
    assert mgr.stats.misses == 1 and [1] not in mgr


def test_repr(dev):
    mgr = ResidencyManager(100 * K, name="models")
    with mgr.load_budgeted("m", loader(dev, K), pin=True) as lease:
        assert "'m'" in repr(lease) and "open" in repr(lease)
        text = repr(mgr)
        assert "models" in text and "1 units" in text and "1 pinned" in text and f"/{100 * K} used" in text
