"""Completions: cheap is_complete, refresh, wait with timeouts, asyncio, callbacks."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import count_calls, live_bytes

from .kernels import SLEEPY


def _slow(s, dev, ns=300_000_000):
    flag = dev.allocate(8)
    return flag, s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(ns,))


def test_refresh_of_finished_work_asks_the_driver_nothing(dev, monkeypatch):
    """A completion the timeline already shows finished refreshes without a poll (on
    cuda a cuStreamQuery per signalling stream); unfinished work still polls."""
    s = dev.stream()
    flag, done = _slow(s, dev, 50_000_000)
    polls = count_calls(monkeypatch, type(done.slot.timeline), "poll")
    if not done.refresh_quiet():
        assert polls[0] >= 1  # unfinished: the driver was asked
    done.wait()
    polls[0] = 0
    assert done.refresh_quiet() and done.refresh()
    assert polls[0] == 0
    flag.close()


def test_is_complete_refresh_wait(dev):
    s = dev.stream()
    flag, done = _slow(s, dev, 100_000_000)
    assert done.is_complete is False
    assert done.refresh() is False
    done.wait()
    assert done.is_complete and done.refresh()
    assert "complete" in repr(done)


def test_is_complete_is_cheap(dev):
    s = dev.stream()
    buf = dev.allocate(64)
    done = s.fill(buf, pattern=1)
    done.wait()
    t0 = time.perf_counter()
    for _ in range(10000):
        done.is_complete  # noqa: B018
    per_call = (time.perf_counter() - t0) / 10000
    assert per_call < 50e-6, f"is_complete costs {per_call * 1e6:.1f} us"  # a memory read, no waiting


def test_timeout_keeps_work_and_storage_alive(dev):
    s = dev.stream()
    flag = dev.allocate(8)
    s.fill(flag, 0)
    done = s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(1_000_000_000,))
    live = live_bytes(dev)
    flag.close()  # only the pending work holds it now
    with pytest.raises(hrx.Timeout) as info:
        done.wait(timeout=0.01)
    assert "stay alive" in str(info.value)
    assert isinstance(info.value, TimeoutError)
    now = live_bytes(dev)
    # still allocated while the kernel runs. On a loaded machine the 1 s kernel can end
    # between the timeout and the count (a garbage collection can take that long); the
    # count is only a claim about running work if the work is still running after it.
    if not done.is_complete:
        assert now == live
    done.wait(timeout=30)
    assert live_bytes(dev) == live - 8


def test_wait_validates_timeout(dev):
    s = dev.stream()
    done = s.fill(dev.allocate(4), 0)
    with pytest.raises(hrx.InvalidArgument):
        done.wait(timeout=-1)
    with pytest.raises(hrx.InvalidArgument):
        done.wait(timeout="soon")  # type: ignore[arg-type]


def test_done_callbacks(dev):
    s = dev.stream()
    flag, done = _slow(s, dev, 50_000_000)
    fired = threading.Event()
    seen = []

    def cb(c):
        seen.append(c)
        fired.set()

    done.add_done_callback(cb)
    done.add_done_callback(lambda c: 1 / 0)  # a failing callback does not break others
    assert fired.wait(10)
    assert seen == [done] and done.is_complete
    # registering on a complete completion calls back at once
    later = []
    done.add_done_callback(later.append)
    assert later == [done]
    with pytest.raises(hrx.InvalidArgument):
        done.add_done_callback(42)  # type: ignore[arg-type]


def test_await_from_asyncio(dev):
    s = dev.stream()

    async def main():
        flag = dev.allocate(8)
        done = s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(50_000_000,))
        other = asyncio.create_task(asyncio.sleep(0.001, result="ran"))
        await done
        assert done.is_complete
        return await other, s.download(flag).view(np.uint32)[0]

    result, value = asyncio.run(main())
    assert result == "ran" and value == 1


def test_await_raises_failure(dev):
    if dev.kind != "host":
        pytest.skip("host fault model")
    s = dev.stream()

    def fail() -> None:
        raise ValueError("nope")

    bad = hrx.Kernel("bad_async", buffers=0, host=fail)

    async def main():
        await s.dispatch(bad, 1, [])

    with pytest.raises(hrx.DeviceError, match="nope"):
        asyncio.run(main())


def test_stream_completion_covers_everything(dev):
    s = dev.stream()
    flag = dev.allocate(8)
    s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(50_000_000,))
    s.fill(flag.slice(4, 4), pattern=3)
    c = s.completion()
    c.wait()
    out = s.download(flag).view(np.uint32)
    assert out[0] == 1 and out[1] == 0x03030303


def test_the_resident_backoff_yields_without_sleeping_until_its_ceiling_phase(monkeypatch):
    """The resident exchange's Backoff spins with timeouts.yield_thread (no timer slack:
    ``time.sleep(0)`` sleeps 50-85 us on Linux), and sleeps only after 256 idle polls."""
    from hrx_core.resident import protocol

    yields, sleeps = [], []
    monkeypatch.setattr(protocol, "yield_thread", lambda: yields.append(1))
    monkeypatch.setattr(protocol.time, "sleep", sleeps.append)
    spinning = protocol.Backoff(spin_ns=10**12)  # within its spin: every pause yields
    for _ in range(300):
        spinning.pause()
    assert (len(yields), sleeps) == (300, [])
    idle = protocol.Backoff()
    for _ in range(255):
        idle.pause()
    assert len(yields) == 300 + (255 - 63) and sleeps == []  # 63 bare polls, then yields
    idle.pause()
    assert sleeps == [pytest.approx(1e-6)]
