"""Timeouts: NaN waited forever, inf and 1e10 raised DeviceError (time_t overflow).
Every wait takes seconds >= 0 or None; inf and absurdly long ones mean "forever"; the
rest is refused before anything happens."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.model import InferenceGraph, ModelContext

from .conftest import ATTACK
from .tally import tried

BAD = st.one_of(
    st.sampled_from([math.nan, -1, -1e-9, -math.inf, "1", True, False, [1], b"1", 1j, np.bool_(True)]),
    st.floats(max_value=-1e-12, allow_nan=False),
    st.floats(allow_nan=True).filter(lambda f: math.isnan(f)),
)
FOREVER = st.sampled_from([math.inf, 1e10, 1e300, 2**63, np.float64(1e12), np.int64(10**15)])


def _world():
    dev = hrx.open_device("host")
    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint8))
    rt = Runtime(dev, RuntimeOptions(observe=False))
    g = rt.graph()
    g.upload(rt.allocate(64), np.ones(64, np.uint8))
    return dev, s, buf, rt, g


def _entry_points(dev, s, buf, rt, g):
    """name -> call(timeout) for every public wait."""
    done = s.fill(buf, pattern=1)
    sub = rt.submit(g)
    ev = s.record_event()
    return {
        "Completion.wait": done.wait,
        "Completion.wait_quiet": done.wait_quiet,
        "Event.synchronize": ev.synchronize,
        "Stream.synchronize": s.synchronize,
        "Stream.upload_blocking": lambda t: s.upload_blocking(buf, np.zeros(64, np.uint8), timeout=t),
        "Device.synchronize": dev.synchronize,
        "Submission.wait": sub.wait,
        "Runtime.submit": lambda t: rt.submit(g, timeout=t),
        "Runtime.synchronize": rt.synchronize,
    }


@settings(ATTACK)
@given(bad=BAD)
def test_bad_timeouts_are_refused_before_anything_happens(bad):
    dev, s, buf, rt, g = _world()
    calls = _entry_points(dev, s, buf, rt, g)
    rt.synchronize(10)
    submissions = rt.stats.snapshot()["submissions"]
    uploads = dev.stats.upload_bytes
    for name, call in calls.items():
        tried("bad-arguments", f"{name}(timeout=)")
        with pytest.raises(hrx.InvalidArgument, match="timeout"):
            call(bad)
    assert rt.stats.snapshot()["submissions"] == submissions  # a refused submit changed nothing
    assert dev.stats.upload_bytes == uploads
    rt.close()


@settings(ATTACK, max_examples=6)
@given(forever=FOREVER)
def test_huge_timeouts_mean_forever(forever):
    dev, s, buf, rt, g = _world()
    for name, call in _entry_points(dev, s, buf, rt, g).items():
        tried("bad-arguments", f"{name}(timeout=huge)")
        call(forever)  # returns once the work is done, no DeviceError
    rt.close(timeout=forever)


def test_model_layer_and_npu_timeouts():
    dev = hrx.open_device("host")
    ctx = ModelContext(dev, RuntimeOptions(observe=False))
    session = ctx.session("m")
    session.weight("w", np.zeros(16, np.uint8))
    definition = session.freeze()

    def factory(b):
        x = b.tensor(16, np.uint8)
        b.graph.compute("c", lambda r: r.fill(x.write(), pattern=1))
        return InferenceGraph(inputs={"x": x}, outputs={"x": x}, graph=b.graph)

    model = definition.prepare(factory, slots=1)
    slot = model.slot(0)
    step = slot.submit({"x": np.zeros(16, np.uint8)})
    work = session.tensor("t", 4, np.uint8)
    calls = {
        "PreparedModel.acquire": model.acquire,
        "ModelSlot.submit": lambda t: slot.submit(None, timeout=t),
        "ModelSlot.run": lambda t: slot.run(None, timeout=t),
        "SlotSubmission.wait": step.wait,
        "SlotSubmission.read": lambda t: step.read("x", timeout=t),
        "ModelSession.read": lambda t: session.read(work, timeout=t),
    }
    for bad in (math.nan, -1.0, "2", True):
        for name, call in calls.items():
            tried("bad-arguments", f"{name}(timeout=)")
            with pytest.raises(hrx.InvalidArgument, match="timeout"):
                call(bad)
    assert slot.run(None, timeout=math.inf)["x"].tolist() == [1] * 16
    with model.acquire(timeout=1e10) as s2:
        assert s2 is slot
    model.close()
    ctx.close()


def test_npu_launch_timeouts():
    hrx_npu = pytest.importorskip("hrx_npu")
    from hrx_npu.contract import BufferContract, KernelContract

    npu = hrx_npu.open_device("npu-host")
    art = hrx.compile(lambda b, *, scratch, column, columns: None, target="host", entry="noop")
    prog = npu.load_artifact(art, columns=1, contract=KernelContract([BufferContract.read_write(256)]))
    buf = npu.allocate(256)
    inv = prog.invocation([buf])
    for bad in (math.nan, -1, "x"):
        tried("bad-arguments", "Invocation.launch(timeout=)")
        with pytest.raises(hrx.InvalidArgument, match="timeout"):
            inv.launch(timeout=bad)
    assert prog.pending == 0
    inv.launch(timeout=math.inf).wait(math.inf)
    prog.close()
