"""A timeline wait spins with ``hrx_core.timeouts.yield_thread`` before it sleeps: work
that finishes within the spin is noticed within a system call, not a timer slack.

``time.sleep(0)`` sleeps the kernel's timer slack on Linux (56 us on the H100 host, 85
us on the CI machine), which made every short wait poll only every 50-85 us:
``bench/tools/d2d_probe.py`` had a 2 GiB copy's ``wait()`` 3% slower than the driver's
own synchronize. These tests hold both engines' waits to the spin and the spin to a
bare yield; they run without a GPU (the timelines' counters are stand-ins).
"""

from __future__ import annotations

import os
import time

import pytest

from hrx_core import timeouts
from hrx_gpu.amdgpu import timeline as amdgpu_timeline
from hrx_gpu.cuda import timeline as cuda_timeline


class Counter:
    """A counter that reads ``value`` from its ``after``-th read on, 0 before."""

    def __init__(self, value: int, after: int) -> None:
        self.value, self.after, self.reads = value, after, 0

    def __getitem__(self, index: int) -> int:
        self.reads += 1
        return self.value if self.reads > self.after else 0


@pytest.fixture
def no_sleep(monkeypatch):
    """time.sleep refused and yields counted, for the spin under test."""
    yields = []

    def refuse(seconds):
        raise AssertionError(f"time.sleep({seconds}) in a spin: a timer slack per poll")

    monkeypatch.setattr(time, "sleep", refuse)
    for module in (cuda_timeline, amdgpu_timeline):
        monkeypatch.setattr(module, "yield_thread", lambda: yields.append(1))
    return yields


def cuda_stand_in(counter: Counter) -> cuda_timeline.CudaTimeline:
    tl = cuda_timeline.CudaTimeline.__new__(cuda_timeline.CudaTimeline)
    tl._counter, tl._failure, tl._last_good, tl._next_check = counter, None, 0, 0.0
    return tl


def amdgpu_stand_in(counter: Counter) -> amdgpu_timeline.AmdgpuTimeline:
    tl = amdgpu_timeline.AmdgpuTimeline.__new__(amdgpu_timeline.AmdgpuTimeline)
    tl._value, tl._seen, tl._failure, tl._last_good, tl._next_check = counter, 0, None, 0, 0.0
    return tl


@pytest.mark.parametrize("make", [cuda_stand_in, amdgpu_stand_in], ids=["cuda", "amdgpu"])
def test_a_wait_that_ends_within_the_spin_yields_and_never_sleeps(no_sleep, make):
    counter = Counter(5, after=40)
    assert make(counter).wait(5, timeout=1.0) is True
    # a first read before the spin, then polls until the value came, one yield between
    assert counter.reads == 41
    assert len(no_sleep) == 39


def test_a_thread_yield_is_a_bare_system_call_where_there_is_one():
    if hasattr(os, "sched_yield"):
        assert timeouts.yield_thread is os.sched_yield
    else:
        assert timeouts.yield_thread is timeouts._sleep0
    timeouts.yield_thread()
