"""Event timing: ``stream.record_event(timing=True)`` and ``Event.elapsed_time(end)``
in milliseconds, measured by the engine (the host clock on the host engine, CUDA
events on cuda)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import open_device
from .kernels import SLEEPY

TIMED_ENGINES = ("host", "cuda")


def _sleep(s, flag, seconds):
    return s.dispatch(SLEEPY, 1, [flag], scalars=(int(seconds * 1e9),))


def test_elapsed_time_measures_the_work_between_two_events(dev):
    s = dev.stream()
    flag = s.allocate_from(np.zeros(4, np.uint32))
    if dev.info.engine not in TIMED_ENGINES:
        with pytest.raises(hrx.Unsupported, match="cannot time events"):
            s.record_event(timing=True)
        _sleep(s, flag, 0.001).wait()  # the stream still works
        return
    start = s.record_event(timing=True)
    _sleep(s, flag, 0.05)
    end = s.record_event(timing=True)
    t0 = time.perf_counter()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 45 <= ms <= 50 + 1000 * (time.perf_counter() - t0) + 1000, ms  # at least the sleep; bounded by the wall
    assert end.elapsed_time(start) == pytest.approx(-ms)
    assert start.elapsed_time(start) == 0.0
    # back to back on another stream of the device: a small, non-negative interval
    other = dev.stream()
    a = other.record_event(timing=True)
    b = other.record_event(timing=True)
    b.synchronize()
    assert 0 <= a.elapsed_time(b) < 1000
    assert "timed" in repr(a)


def test_elapsed_time_errors(dev):
    if dev.info.engine not in TIMED_ENGINES:
        pytest.skip(f"{dev.info.engine} queues cannot time events")
    s = dev.stream()
    flag = s.allocate_from(np.zeros(4, np.uint32))
    timed = s.record_event(timing=True)
    untimed = s.record_event()
    untimed.synchronize()
    with pytest.raises(hrx.InvalidArgument, match=r"end: recorded without timing; use stream.record_event\(timing=True\)"):
        timed.elapsed_time(untimed)
    with pytest.raises(hrx.InvalidArgument, match="event: recorded without timing"):
        untimed.elapsed_time(timed)
    with pytest.raises(hrx.InvalidArgument, match="expected an Event"):
        timed.elapsed_time(1.0)  # type: ignore[arg-type]
    with pytest.raises(hrx.InvalidArgument, match="timing: expected a bool"):
        s.record_event(timing=1)  # type: ignore[arg-type]
    _sleep(s, flag, 0.3)
    pending = s.record_event(timing=True)
    with pytest.raises(hrx.InvalidArgument, match=r"end: not complete yet; call event.synchronize\(\) first"):
        timed.elapsed_time(pending)
    pending.synchronize()
    assert timed.elapsed_time(pending) >= 250
    foreign = hrx.open_device("host").stream().record_event(timing=True)  # another device
    foreign.synchronize()
    with pytest.raises(hrx.InvalidArgument, match="events are timed on one device"):
        timed.elapsed_time(foreign)


def test_elapsed_time_raises_the_failure_of_the_work_it_covers():
    dev = hrx.open_device("host")
    s = dev.stream()
    flag = s.allocate_from(np.zeros(4, np.uint32))
    start = s.record_event(timing=True)
    boom = hrx.Kernel("boom_timed", buffers=("write",), host=lambda b: 1 / 0)
    s.dispatch(boom, 1, [flag])
    end = s.record_event(timing=True)
    with pytest.raises(hrx.HRXError):
        end.synchronize()
    with pytest.raises(hrx.HRXError):
        start.elapsed_time(end)


@pytest.mark.gpu
def test_cuda_events_time_device_work():
    dev = open_device("cuda")
    s = dev.stream()
    flag = s.allocate(4)
    start = s.record_event(timing=True)
    _sleep(s, flag, 0.02)  # spins about 20 ms of GPU clock
    end = s.record_event(timing=True)
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 5 <= ms <= 2000, ms
    a, b = s.record_event(timing=True), s.record_event(timing=True)
    b.synchronize()
    assert 0 <= a.elapsed_time(b) < 5
