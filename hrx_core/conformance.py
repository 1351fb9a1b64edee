"""The engine conformance suite that ships with hrx-core: the semantics every engine
must give the core, as pytest tests over the public API.

Run it on any installed engine, from any package::

    pytest --pyargs hrx_core.conformance --hrx-engine NAME

(``--hrx-plugin MODULE`` registers an engine that is not installed yet.) Each test
runs once per engine chosen with ``--hrx-engine`` (default:
:data:`hrx_core.testing.ENGINES`); an engine that is not installed or not available
here is skipped with the reason. The kernels have ``host`` and ``cuda`` sources: a
device runs them when it lists ``host`` among its targets, or has a compiler for one
of those sources; otherwise the dispatch tests skip, saying so. hrx-core's own test
suite (``tests/``) goes much further; this module is what a third-party engine must
pass before it is useful.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from . import testing
from .testing import ADD_U32, COPY_RECORD, record8
from .device import AUTO_FLUSH_OPS, Device
from .errors import HRXError, InvalidArgument, Unsupported
from .kernel import Kernel
from .stream import Stream

def _fail(data: np.ndarray) -> None:
    raise RuntimeError("conformance: this kernel fails on purpose")


#: Fails on every engine that runs host callables (the failure-propagation test).
FAILING = Kernel("conformance_fail", buffers=("write",), host=_fail)


@pytest.fixture(params=testing.engine_params())
def hrx_engine(request: pytest.FixtureRequest) -> str:
    """The engine under test (one test per engine chosen with ``--hrx-engine``)."""
    return str(request.param)


@pytest.fixture
def hrx_device(hrx_engine: str) -> Iterator[Device]:
    """A new device of the engine under test (skips when the engine is absent)."""
    testing.open_device(hrx_engine)  # skips with the reason when the engine is absent
    from .plugins import open_device

    dev = open_device(hrx_engine)
    yield dev
    dev.close()


def _stream(dev: Device, *operations: str) -> Stream:
    """A stream on the first queue family that encodes ``operations`` (default: copy
    and fill), or a skip naming what the device lacks."""
    wanted = operations or ("copy", "fill")
    for family in dev.info.queue_families:
        if all(family.supports(op) for op in wanted):
            return dev.stream(family.name)
    pytest.skip(f"{dev.name} has no queue family that encodes {', '.join(wanted)}")


def _needs_kernels(dev: Device, kernel: Kernel) -> None:
    if dev.info.kind == "npu":
        pytest.skip(f"{dev.name}: NPU devices run programs with contracts (hrx_npu's suite tests them)")
    if kernel.source_for(dev.info.targets) is None:
        pytest.skip(f"{dev.name} runs {', '.join(dev.info.targets)}: no source of {kernel.name} for it")


def _pattern(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("nbytes", [1, 255, 4096, 65537])
def test_upload_download_roundtrip(hrx_device: Device, nbytes: int) -> None:
    s = _stream(hrx_device)
    data = _pattern(nbytes, nbytes)
    buf = s.allocate_from(data)
    assert np.array_equal(s.download(buf), data)


def test_allocations_are_aligned(hrx_device: Device) -> None:
    alignment = hrx_device.info.limits.alignment
    assert alignment >= 1 and alignment & (alignment - 1) == 0
    for nbytes in (1, 3, 100, 4097, 1 << 20):
        buf = hrx_device.allocate(nbytes)
        pointer = buf.allocation.native.pointer()
        assert pointer is None or pointer % alignment == 0, (nbytes, hex(pointer))


def test_views_copy_and_fill(hrx_device: Device) -> None:
    s = _stream(hrx_device)
    src = s.allocate_from(_pattern(4096, 1))
    dst = s.allocate_from(np.zeros(4096, np.uint8))
    s.copyto(dst.slice(3000, 1000), src.slice(100, 1000))
    s.fill(dst.slice(0, 64), pattern=7)
    s.fill(dst.slice(64, 64), np.uint16(0xBEEF))
    s.fill(dst.slice(128, 64), np.uint32(0x01020304))
    out = s.download(dst)
    expect = np.zeros(4096, np.uint8)
    expect[3000:4000] = _pattern(4096, 1)[100:1100]
    expect[0:64] = 7
    expect[64:128] = np.full(32, 0xBEEF, np.uint16).view(np.uint8)
    expect[128:192] = np.full(16, 0x01020304, np.uint32).view(np.uint8)
    assert np.array_equal(out, expect)


def test_transfers_larger_than_the_limit_are_split(hrx_engine: str) -> None:
    """Engines accept ``max_transfer_bytes`` and report it; the core splits to it."""
    testing.open_device(hrx_engine)
    from .plugins import open_device

    dev = open_device(hrx_engine, max_transfer_bytes=4096)
    try:
        assert dev.info.limits.max_transfer_bytes == 4096
        s = _stream(dev)
        data = _pattern(3 * 4096 + 17, 2)
        src = s.allocate_from(data)
        dst = dev.allocate(data.nbytes)
        s.copyto(dst, src)
        s.fill(src, 0)
        assert np.array_equal(s.download(dst), data)
        assert not s.download(src).any()
    finally:
        dev.close()


def test_one_stream_is_ordered(hrx_device: Device) -> None:
    s = _stream(hrx_device)
    a = s.allocate_from(np.zeros(1024, np.uint8))
    b = hrx_device.allocate(1024)
    for value in range(1, AUTO_FLUSH_OPS + 10):  # past an automatic flush
        s.fill(a, pattern=value % 256)
        s.copyto(b, a)
    assert (s.download(b) == (AUTO_FLUSH_OPS + 9) % 256).all()


def test_events_order_work_across_streams(hrx_device: Device) -> None:
    s1, s2 = _stream(hrx_device), _stream(hrx_device)
    buf = s1.allocate_from(np.zeros(1 << 16, np.uint8))
    out = hrx_device.allocate(1 << 16)
    s1.fill(buf, pattern=9)
    s2.wait_event(s1.record_event())
    s2.copyto(out, buf)
    assert (s2.download(out) == 9).all()


def test_completions_complete(hrx_device: Device) -> None:
    s = _stream(hrx_device)
    buf = hrx_device.allocate(4096)
    done = s.fill(buf, pattern=1)
    done.wait(timeout=60)
    assert done.is_complete


def test_dispatch(hrx_device: Device) -> None:
    _needs_kernels(hrx_device, ADD_U32)
    s = _stream(hrx_device, "copy", "dispatch")
    data = np.arange(1000, dtype=np.uint32)
    buf = s.allocate_from(data)
    s.dispatch(ADD_U32, 4, [buf], block=256, scalars=(5, 1000))
    assert np.array_equal(s.download(buf).view(np.uint32), data + 5)


def test_record_scalars_travel_with_each_launch(hrx_device: Device) -> None:
    """A record scalar (a struct by value) reaches the kernel; a prepared launch's
    set_scalar changes later launches only: one launched before keeps its value."""
    _needs_kernels(hrx_device, COPY_RECORD)
    s = _stream(hrx_device, "copy", "dispatch")
    first, second, third = (hrx_device.allocate(32) for _ in range(3))
    s.dispatch(COPY_RECORD, 1, [first], block=32, scalars=(record8(range(1, 9)),))
    launch = s.prepare(COPY_RECORD, 1, [second], block=32, scalars=(record8(range(10, 18)),))
    launch.launch()
    launch.set_scalar(0, record8(range(20, 28)))
    launch.rebind(0, third)
    launch.launch()
    with pytest.raises(InvalidArgument):
        launch.set_scalar(0, 5)  # not a record: refused, the record stays
    launch.launch()
    got = [s.download(b).view(np.uint32).tolist() for b in (first, second, third)]
    assert got == [list(range(1, 9)), list(range(10, 18)), list(range(20, 28))]
    launch.close()
    g = s.access_graph()  # a recorded dispatch keeps its record through replays and rebinding
    g.input("out", first)
    g.dispatch(COPY_RECORD, 1, [first], block=32, scalars=(record8(range(30, 38)),))
    g.launch()
    g.launch(inputs={"out": second})
    got = [s.download(b).view(np.uint32).tolist() for b in (first, second)]
    assert got == [list(range(30, 38))] * 2
    g.close()


def test_a_failed_kernel_fails_what_depends_on_it(hrx_device: Device) -> None:
    _needs_kernels(hrx_device, FAILING)
    s = _stream(hrx_device, "copy", "dispatch")
    buf = hrx_device.allocate(64)
    done = s.dispatch(FAILING, 1, [buf])
    with pytest.raises(HRXError):
        done.wait(timeout=60)
    with pytest.raises(HRXError):
        s.download(buf)


def _c_word(address: int) -> int:
    import ctypes

    return int(ctypes.c_uint64.from_address(address).value)


def test_timeline_c_words_agree_with_the_methods(hrx_device: Device) -> None:
    """Timeline.c_completed / c_failed, where an engine publishes them (nonzero), are
    what the compiled paths read instead of calling completed() / has_errors(): the
    counter never leads completed() and shows every finished value; the failure flag
    is set whenever has_errors() is (and after a failed kernel, where one runs)."""
    s = _stream(hrx_device)
    buf = hrx_device.allocate(4096)
    tl = s.slot._timeline or s.slot.timeline
    assert isinstance(tl.c_completed, int) and isinstance(tl.c_failed, int)
    for i in range(3):
        done = s.fill(buf, pattern=i)
        done.wait(timeout=60)
        if tl.c_completed:
            assert _c_word(tl.c_completed) == tl.completed() >= done.value
        if tl.c_failed and tl.has_errors():
            assert _c_word(tl.c_failed) != 0
    if not any(f.supports("dispatch") for f in hrx_device.info.queue_families):
        return
    if hrx_device.info.kind == "npu" or FAILING.source_for(hrx_device.info.targets) is None:
        return
    k = _stream(hrx_device, "copy", "dispatch")
    tl = k.slot._timeline or k.slot.timeline
    done = k.dispatch(FAILING, 1, [buf])
    with pytest.raises(HRXError):
        done.wait(timeout=60)
    assert tl.has_errors()
    if tl.c_failed:
        assert _c_word(tl.c_failed) != 0
    if tl.c_completed:
        assert _c_word(tl.c_completed) == tl.completed()


def test_access_graph_replays(hrx_device: Device) -> None:
    s = _stream(hrx_device)
    buf = s.allocate_from(np.zeros(256, np.uint8))
    other = hrx_device.allocate(256)
    g = s.access_graph()
    g.fill(buf.slice(0, 128), pattern=3)
    g.fill(buf.slice(128, 128), pattern=4)
    g.copyto(other, buf.slice(0, 256))
    for _ in range(3):
        g.launch().wait(timeout=60)
    out = s.download(other)
    assert (out[:128] == 3).all() and (out[128:] == 4).all()


def adder_graph(rt: Any) -> tuple[Any, Any]:
    """A buffer of 64 zeroed uint32 on runtime ``rt``, and a tracked graph whose one
    compute region adds 1 to each (ADD_U32)."""
    x = rt.allocate(256)
    init = rt.graph("init")
    init.upload(x, np.zeros(64, np.uint32))
    rt.submit(init).wait(60)
    g = rt.graph("add")
    g.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=64, scalars=(1, 64)))
    return x, g


def test_runtime_resubmission_runs_each_submission_once(hrx_device: Device) -> None:
    """A tracked graph resubmitted on its lane (the replay and its signal under one hold
    of the queue: ``NativeGraph.launch_signaled`` on engines with native graphs) runs
    every submission once, in order, and each submission's completion covers its own
    work."""
    _needs_kernels(hrx_device, ADD_U32)
    from .execution import Runtime, RuntimeOptions

    rt = Runtime(hrx_device, RuntimeOptions(observe=False, signals="each"))
    try:
        x, g = adder_graph(rt)
        down = g.download(x)
        for i in range(1, 5):
            rt.submit(g).wait(60)
            assert (down.read(np.uint32) == i).all()
        subs = [rt.submit(g) for _ in range(20)]
        values = [s.events[0].completion.value for s in subs]
        assert values == sorted(set(values))  # one signal a submission, in order
        subs[-1].wait(60)
        assert all(s.is_complete for s in subs)
        assert (down.read(np.uint32) == 24).all()
    finally:
        rt.close()


def test_runtime_lazy_signals_run_each_submission_once(hrx_device: Device) -> None:
    """``RuntimeOptions(signals="lazy")`` (the default on devices whose failures are
    sticky): resubmissions share the lane's pending value until something waits, and
    every submission's work still runs once, in order; waiting on any of them covers
    it and everything before it."""
    _needs_kernels(hrx_device, ADD_U32)
    from .execution import Runtime, RuntimeOptions

    rt = Runtime(hrx_device, RuntimeOptions(observe=False, signals="lazy"))
    try:
        x, g = adder_graph(rt)
        subs = [rt.submit(g) for _ in range(20)]
        values = [s.events[0].completion.value for s in subs]
        assert values == sorted(values) and len(set(values)) < len(values)  # shared values
        subs[5].wait(60)
        assert all(s.is_complete for s in subs[:6])
        rt.synchronize()
        assert all(s.is_complete for s in subs)
        d = rt.graph("read")
        down = d.download(x)
        rt.submit(d).wait(60)
        assert (down.read(np.uint32) == 20).all()
    finally:
        rt.close()


def test_shared_memory_is_host_visible(hrx_device: Device) -> None:
    if not hrx_device.info.coherent_shared_memory:
        with pytest.raises(Unsupported):
            hrx_device.allocate_shared(64)
        return
    s = _stream(hrx_device)
    buf = hrx_device.allocate_shared(4096)
    with buf.map("write") as view:
        view[:] = 5
    out = hrx_device.allocate(4096)
    s.copyto(out, buf)
    assert (s.download(out) == 5).all()


def test_bad_arguments_change_nothing(hrx_device: Device) -> None:
    s = _stream(hrx_device)
    buf = s.allocate_from(np.full(64, 1, np.uint8))
    bad: list[Any] = [lambda: s.fill(buf.slice(1, 3), np.uint16(2)), lambda: hrx_device.allocate(-1),
                      lambda: s.copyto(hrx_device.allocate(32), buf)]
    for call in bad:
        with pytest.raises(InvalidArgument):
            call()
    assert (s.download(buf) == 1).all()
