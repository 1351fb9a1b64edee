"""A timeline wait spins on its counter (``hrx_core.timeouts.spin_u64``) before it
sleeps: work that finishes within the spin is noticed at once, not a timer slack later.

``time.sleep(0)`` sleeps the kernel's timer slack on Linux (56 us on the H100 host, 85
us on the CI machine), which made every short wait poll only every 50-85 us:
``bench/tools/d2d_probe.py`` had a 2 GiB copy's ``wait()`` 3% slower than the driver's
own synchronize. The compiled spin polls in C with the GIL released. These tests run
without a GPU: the timelines' counters are numpy stand-ins that another thread sets.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from hrx_core import timeouts
from hrx_gpu.amdgpu import timeline as amdgpu_timeline
from hrx_gpu.cuda import timeline as cuda_timeline

COMPILED = timeouts._compiled_spin() is not False


def why_not() -> str:
    from hrx_core import hotpath

    return hotpath.load("spin_wait", timeouts._SPIN_CDEF, timeouts._SPIN_SOURCE).reason


def set_later(counter: np.ndarray, value: int, delay: float) -> threading.Thread:
    """A thread that sets ``counter[0] = value`` after ``delay`` seconds of busy waiting
    (no sleep: the tests below refuse time.sleep on the waiting thread only)."""
    def run() -> None:
        end = time.perf_counter() + delay
        while time.perf_counter() < end:
            pass
        counter[0] = value
    t = threading.Thread(target=run)
    t.start()
    return t


@pytest.fixture
def sleeps(monkeypatch):
    """Every time.sleep of the test's own thread, recorded (other threads sleep freely)."""
    me, seen, real = threading.get_ident(), [], time.sleep

    def sleep(seconds):
        if threading.get_ident() == me:
            seen.append(seconds)
        real(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return seen


def cuda_stand_in(counter: np.ndarray) -> cuda_timeline.CudaTimeline:
    tl = cuda_timeline.CudaTimeline.__new__(cuda_timeline.CudaTimeline)
    tl._counter, tl._address = counter, counter.ctypes.data
    tl._failure, tl._last_good, tl._next_check = None, 0, 0.0
    tl.poll_failure = lambda: None  # no device behind the stand-in: no failure to ask about
    return tl


def amdgpu_stand_in(counter: np.ndarray) -> amdgpu_timeline.AmdgpuTimeline:
    tl = amdgpu_timeline.AmdgpuTimeline.__new__(amdgpu_timeline.AmdgpuTimeline)
    tl._value, tl._address, tl._seen = counter, counter.ctypes.data, 0
    tl._lock, tl._signalers = threading.Lock(), {}
    tl._failure, tl._last_good, tl._next_check = None, 0, 0.0
    tl.poll_failure = lambda: None  # no device behind the stand-in: no failure to ask about
    return tl


@pytest.mark.parametrize("make", [cuda_stand_in, amdgpu_stand_in], ids=["cuda", "amdgpu"])
def test_a_wait_that_ends_within_the_spin_never_sleeps(sleeps, make, monkeypatch):
    if not COMPILED:
        pytest.skip(f"no compiled spin here: {why_not()}")
    for module in (cuda_timeline, amdgpu_timeline):  # a spin no busy CI machine outlasts
        monkeypatch.setattr(module, "_SPIN_S", 0.5)
    counter = np.zeros(1, dtype=np.uint64)
    setter = set_later(counter, 5, 0.3e-3)
    try:
        assert make(counter).wait(5, timeout=1.0) is True
    finally:
        setter.join()
    assert sleeps == []
    assert not make(counter).wait(6, timeout=0.0)  # not there: the timeout holds


@pytest.mark.parametrize("make", [cuda_stand_in, amdgpu_stand_in], ids=["cuda", "amdgpu"])
def test_a_wait_past_the_spin_sleeps_and_still_sees_the_value(make):
    counter = np.zeros(1, dtype=np.uint64)
    setter = set_later(counter, 3, 0.02)  # past the 2 ms spin: the backoff's sleeps find it
    try:
        t = time.perf_counter()
        assert make(counter).wait(3, timeout=5.0) is True
        assert time.perf_counter() - t < 2.0
    finally:
        setter.join()


def test_the_compiled_spin_sees_a_value_another_thread_writes_and_leaves_the_gil_free():
    if not COMPILED:
        pytest.skip(f"no compiled spin here: {why_not()}")
    counter = np.zeros(1, dtype=np.uint64)
    assert timeouts.spin_u64(counter.ctypes.data, 0, 0.0, lambda: int(counter[0])) is True
    t = time.perf_counter()
    assert timeouts.spin_u64(counter.ctypes.data, 1, 0.02, lambda: int(counter[0])) is False
    assert 0.02 <= time.perf_counter() - t < 1.0
    # a Python thread counts while this one spins 50 ms in C: the GIL is free meanwhile
    counts, stop = [0], threading.Event()

    def count() -> None:
        while not stop.is_set():
            counts[0] += 1
    other = threading.Thread(target=count)
    other.start()
    try:
        time.sleep(0.01)
        before = counts[0]
        assert timeouts.spin_u64(counter.ctypes.data, 1, 0.05, lambda: int(counter[0])) is False
        during = counts[0] - before
    finally:
        stop.set()
        other.join()
    assert during > 1000, f"the other thread counted {during} in 50 ms: the spin held the GIL"
    setter = set_later(counter, 7, 1e-3)
    try:
        assert timeouts.spin_u64(counter.ctypes.data, 7, 5.0, lambda: int(counter[0])) is True
    finally:
        setter.join()


def test_the_python_spin_polls_and_yields_without_a_timer_slack_when_alone(monkeypatch):
    """Without a compiled spin: yield_thread between polls when this is the only Python
    thread, sleep(0) when others may want the GIL."""
    monkeypatch.setattr(timeouts, "_spin_fn", False)
    pauses = []
    monkeypatch.setattr(timeouts, "yield_thread", lambda: pauses.append("yield"))
    monkeypatch.setattr(timeouts, "_sleep0", lambda: pauses.append("sleep0"))
    reads = iter([0, 0, 0, 4])
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    assert timeouts.spin_u64(0, 4, 5.0, lambda: next(reads)) is True
    assert pauses == ["yield"] * 3
    pauses.clear()
    reads = iter([0, 0, 9])
    monkeypatch.setattr(threading, "active_count", lambda: 3)
    assert timeouts.spin_u64(0, 4, 5.0, lambda: next(reads)) is True
    assert pauses == ["sleep0"] * 2
    assert timeouts.spin_u64(0, 4, 0.0, lambda: 0) is False


def test_a_thread_yield_is_a_bare_system_call_where_there_is_one():
    if hasattr(os, "sched_yield"):
        assert timeouts.yield_thread is os.sched_yield
    else:
        assert timeouts.yield_thread is timeouts._sleep0
    timeouts.yield_thread()


def test_a_counter_without_an_address_is_polled_from_python(monkeypatch):
    """Address 0 (a stand-in driver's counter, not C memory): never handed to the C spin."""
    def refuse(*args):
        raise AssertionError("the compiled spin was given address 0")

    monkeypatch.setattr(timeouts, "_spin_fn", refuse)
    reads = iter([0, 2])
    assert timeouts.spin_u64(0, 2, 5.0, lambda: next(reads)) is True


def test_doctor_reports_the_wait_spin(monkeypatch):
    from hrx_core.host import plugin

    monkeypatch.setenv("HRX_HOT_PATH", "0")
    rows = [r for r in plugin.hrx_doctor() if r[1] == "wait spin"]
    assert rows == [("core", "wait spin", "fallback (Python): disabled by HRX_HOT_PATH=0")]
    monkeypatch.delenv("HRX_HOT_PATH")
    (row,) = [r for r in plugin.hrx_doctor() if r[1] == "wait spin"]
    assert row[2].startswith("compiled, " if COMPILED else "fallback (Python): ")
