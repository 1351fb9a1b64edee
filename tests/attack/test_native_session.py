"""NativeSession under attack: stale failures of other submissions, Ctrl-C and exit
inside the stage, and the quarantine of borrowed inputs when completion is uncertain."""

from __future__ import annotations

import time

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions

from ..kernels import SLEEPY
from .tally import tried


def _boom(buf):
    raise RuntimeError("injected kernel failure")


BOOM = hrx.Kernel("boom_session", buffers=1, host=_boom)


def _runtime():
    return Runtime(hrx.open_device("host"), RuntimeOptions(observe=False))


def test_a_session_does_not_report_another_submissions_failure():
    # NativeSession.run raised another submission's stale failure and quarantined its own inputs
    rt = _runtime()
    x, y = rt.allocate(64), rt.allocate(64)
    bad = rt.graph("bad")
    bad.compute("boom", lambda g: g.dispatch(BOOM, 1, [x]))
    with pytest.raises(hrx.DeviceError, match="injected"):
        rt.submit(bad).wait(10)

    def model(ns, buf):
        ns.stream.fill(buf, pattern=5)
        return ns.stream.download(buf)

    with rt.native_session("clean") as ns:
        tried("faults", "NativeSession.run (stale failure)")
        out = ns.run(model, y, timeout=10)
    assert (out == 5).all()
    assert rt.quarantined == []
    rt.close()


def test_a_sessions_own_failure_is_reported():
    rt = _runtime()
    x = rt.allocate(64)
    with rt.native_session() as ns:
        tried("faults", "NativeSession.run (own failure)")
        with pytest.raises(hrx.DeviceError, match="injected"):
            ns.run(lambda s, b: s.stream.dispatch(BOOM, 1, [b]), x, timeout=10)
        assert ns.run(lambda s: 42) == 42  # the session stays usable
    rt.close()


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupts_propagate_out_of_a_session(exc):
    # inside a NativeSession they became CallbackError and Ctrl-C was swallowed
    rt = _runtime()
    x = rt.allocate(64)

    def raise_it(*_):
        raise exc()

    def model(ns, buf):
        ns.stream.fill(buf, pattern=1)
        ns.progress(1)
        raise AssertionError("the model must stop at the interrupt")

    with rt.native_session() as ns:
        tried("faults", "NativeSession.progress (interrupt)")
        with pytest.raises(exc):
            ns.run(model, x, progress=raise_it, timeout=10)
        tried("faults", "NativeSession.run (interrupt)")
        with pytest.raises(exc):
            ns.run(raise_it, timeout=10)
        ok = ns.run(lambda s: "still usable", timeout=10)
    assert ok == "still usable"
    # the lane reservation was released: other submissions run
    g = rt.graph()
    g.compute("c", lambda r: r.fill(x, pattern=2))
    rt.submit(g).wait(10)
    rt.close()


def test_uncertain_completion_quarantines_borrowed_inputs_until_idle():
    rt = _runtime()
    x = rt.allocate(64)
    live = rt.device.stats.live_bytes

    def model(ns, buf):
        ns.stream.dispatch(SLEEPY, 1, [buf.slice(0, 4)], scalars=(300_000_000,))

    with rt.native_session() as ns:
        tried("faults", "NativeSession.run (timeout)")
        with pytest.raises(hrx.Timeout):
            ns.run(model, x, timeout=0.02)
    assert rt.quarantined and "native session" in rt.quarantined[0][1]
    x.close()  # the kernel may still write it: the quarantine keeps the memory
    assert rt.device.stats.live_bytes == live
    deadline = time.monotonic() + 10
    while rt.quarantined and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rt.quarantined == []  # proven idle once the kernel finished: released
    assert rt.device.stats.live_bytes == live - 64
    rt.close()


def test_session_arguments_are_checked():
    rt = _runtime()
    ns = rt.native_session()
    tried("bad-arguments", "NativeSession.run", 4)
    with pytest.raises(hrx.InvalidArgument, match="context manager"):
        ns.run(lambda s: None)
    with ns:
        with pytest.raises(hrx.InvalidArgument, match="model"):
            ns.run(None)
        with pytest.raises(hrx.InvalidArgument, match="timeout"):
            ns.run(lambda s: None, timeout=float("nan"))
        with pytest.raises(hrx.InvalidArgument, match="progress"):
            ns.run(lambda s: None, progress=3)
    np.testing.assert_equal(rt._reservations, {})
    rt.close()
