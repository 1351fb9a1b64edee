"""Pending limits, columns, per-invocation state, immutable bindings, C and numpy programs."""

from __future__ import annotations

import threading
import time

import hrx_npu
import ml_dtypes
import numpy as np
import pytest
from conftest import add_one, numpy_artifact, rw_contract

import hrx_core as hrx

GATE = threading.Event()


def gated(x, *, scratch, column, columns):
    GATE.wait(30)
    x.view(np.uint32)[:] += 1


def test_128_pending_then_wait_or_raise(npu):
    GATE.clear()
    prog = npu.load_artifact(numpy_artifact(gated), columns=1, contract=rw_contract(4))
    assert prog.max_pending == 128
    s = npu.stream()
    x = s.allocate_from(np.zeros(1, np.uint32))
    inv = prog.invocation([x])
    try:
        for _ in range(128):
            inv.launch(s, block=False)
        assert prog.pending == 128
        dispatches = npu.stats.dispatches
        with pytest.raises(hrx.QueueFull, match="128"):
            inv.launch(s, block=False)
        with pytest.raises(hrx.Timeout):
            inv.launch(s, timeout=0.05)
        assert prog.pending == 128 and npu.stats.dispatches == dispatches  # rejected: nothing encoded
        done = []
        t = threading.Thread(target=lambda: done.append(inv.launch(s)))   # waits for a slot
        t.start()
        time.sleep(0.1)
        assert not done
    finally:
        GATE.set()
    t.join(10)
    assert done
    s.synchronize()
    assert prog.pending == 0
    assert s.download(x).view(np.uint32)[0] == 129
    assert prog.executable.pending.peak == 128


def test_a_graph_with_more_invocations_than_slots_does_not_deadlock(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(4))
    s = npu.stream()
    x = s.allocate_from(np.zeros(1, np.uint32))
    g = s.graph()
    node = None
    for _ in range(200):
        node = g.dispatch(prog.kernel, 1, [x], deps=[node] if node else [])
    g.launch().wait(30)
    assert s.download(x).view(np.uint32)[0] == 200 and prog.pending == 0


def test_column_accounting_and_time_sharing(npu):
    art = numpy_artifact(add_one)
    progs = [npu.load_artifact(art, columns=3, contract=rw_contract(4)) for _ in range(2)]
    assert [p.start_column for p in progs] == [0, 3]
    assert npu.columns_free == 2
    third = npu.load_artifact(art, columns=3, contract=rw_contract(4))   # array full: time-shares
    assert npu.npu_stats()["occupancy"].count(2) == 3
    third.close()
    assert npu.columns_free == 2
    progs[0].close()
    assert npu.columns_free == 5 and npu.npu_stats()["programs"] == 1
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        progs[0].invocation([npu.allocate(4)])


def leaky(x, *, scratch, column, columns):
    """Reports what the scratch held at entry, then dirties it."""
    x.view(np.uint32)[column] = int(scratch.view(np.uint32).sum())
    scratch.view(np.uint32)[:] = 0xDEADBEEF


def test_no_state_leaks_between_invocations_or_contexts(npu):
    art = numpy_artifact(leaky)
    c = rw_contract(16, scratch=256)
    p1 = npu.load_artifact(art, columns=4, contract=c)
    p2 = npu.load_artifact(art, columns=4, contract=c)
    p3 = npu.load_artifact(art, columns=4, contract=c)   # shares columns with p1 or p2
    s = npu.stream()
    x = s.allocate_from(np.full(4, 7, np.uint32))
    before = npu.npu_stats()
    for p in (p1, p3, p1, p2, p3, p3):
        p.invoke([x], stream=s).wait()
        assert (s.download(x).view(np.uint32) == 0).all()   # scratch was re-established
    after = npu.npu_stats()
    assert after["invocations"] - before["invocations"] == 6
    assert after["state_resets"] - before["state_resets"] == 24
    assert after["context_switches"] > before["context_switches"]


def test_invocation_bindings_are_immutable(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(4))
    x = npu.allocate(4)
    inv = prog.invocation([x])
    assert isinstance(inv.bindings, tuple)
    with pytest.raises(AttributeError):
        inv.bindings = ()  # type: ignore[misc]


@pytest.mark.parametrize("c_build", [True, False], ids=["c", "numpy"])
@pytest.mark.parametrize("columns", [1, 3])
def test_matmul8x8_exact(npu, monkeypatch, c_build, columns):
    if not c_build:
        monkeypatch.setenv("HRX_NPU_C", "0")
    m = 37
    prog = hrx_npu.load_matmul8x8(npu, m, columns=columns)
    assert prog.target == ("npu-host-c" if c_build else "host")
    rng = np.random.default_rng(columns)
    a = rng.standard_normal(64 * m).astype(ml_dtypes.bfloat16).view(np.uint16)
    b = rng.standard_normal(64 * m).astype(ml_dtypes.bfloat16).view(np.uint16)
    s = npu.stream()
    bufs = [s.allocate_from(a), s.allocate_from(b), s.allocate(256 * m)]
    prog.invoke(bufs, stream=s).wait()
    got = s.download(bufs[2]).view(np.float32).reshape(-1, 8, 8)
    ref = hrx_npu.matmul8x8_reference(a, b)
    assert np.array_equal(got, ref)
    np.testing.assert_allclose(ref, a.view(ml_dtypes.bfloat16).reshape(-1, 8, 8).astype(np.float64)
                               @ b.view(ml_dtypes.bfloat16).reshape(-1, 8, 8).astype(np.float64), rtol=1e-5, atol=1e-5)


def test_c_compile_errors_are_typed():
    with pytest.raises(hrx.CompileError):
        hrx.compile("HRX_NPU_PROGRAM(broken) { this is not C }", target="npu-host-c", entry="broken")
    with pytest.raises(hrx.CompileError, match="identifier"):
        hrx.compile("", target="npu-host-c", entry="no good")


def test_failures_inside_programs_are_reported_not_fatal(npu):
    def boom(x, *, scratch, column, columns):
        raise RuntimeError("program fault")

    prog = npu.load_artifact(numpy_artifact(boom), columns=2, contract=rw_contract(4))
    s = npu.stream()
    x = s.allocate_from(np.zeros(1, np.uint32))
    with pytest.raises(hrx.HRXError):
        prog.invoke([x], stream=s).wait()
    assert prog.pending == 0
    ok = npu.load_artifact(numpy_artifact(add_one), columns=2, contract=rw_contract(4))
    ok.invoke([x], stream=s).wait()


def test_runtime_npu_lane(npu):
    from hrx_core.execution import Runtime

    gpu = hrx.device("host")
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(64))
    with Runtime(gpu, npu=npu) as rt:
        x = npu.stream().allocate_from(np.zeros(16, np.uint32))
        g = rt.graph()
        g.compute("add", lambda r: prog.record(r, [x]), lane="npu")
        down = g.compute("add again", lambda r: prog.record(r, [x]), lane="npu")
        assert down.deps == (0,)
        for _ in range(3):
            rt.submit(g).wait()
        assert npu.name in rt.lane("npu").queue
    assert (npu.stream().download(x).view(np.uint32) == 6).all()


def test_device_selection_and_doctor_note():
    assert hrx_npu.best_npu_engine() == "npu-host"
    assert hrx.device().info.engine != "npu-host"      # never the default compute device
    dev = hrx_npu.device()
    assert dev is hrx_npu.device() and dev.info.kind == "npu"
    assert "not NPU hardware" in dev.info.properties["reference"]
    with pytest.raises(hrx.InvalidArgument):
        hrx_npu.open_device("npu-host", bogus=1)
    with pytest.raises(hrx.EngineNotFound):
        hrx_npu.device("host")
