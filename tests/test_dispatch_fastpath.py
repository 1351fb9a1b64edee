"""The stream's compiled eager dispatch (hrx_core.fastpath.Dispatcher) against the Python path.

Every engine present. After a stream's first dispatch made its native queue,
``Stream.dispatch`` of whole Buffer objects with plain geometry (ints, or tuples of 1 to
3 ints) and a kernel already loaded on the device runs in one C call: the same checks,
launch, retained allocations, commit, completion, buffer-use notes and counters as the
Python path. The engine launches through its C entry where it offers one
(``NativeQueue.fast_dispatch``: cuda) and through its Python ``dispatch`` otherwise.
Everything else -- views and bindings, host-mapped or unflushed buffers, closed
buffers or queues, another device's buffers, odd geometry, an unloaded kernel, the
queue's lock held by another thread -- is left to the Python path, which then raises
or waits exactly as before. Each test runs both ways.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hrx_core as hrx
from hrx_core.stream import Stream

from .conftest import compiled_or_python, lock_held_elsewhere, run_threads
from .kernels import _XOR_BYTES_CUDA, ADD_U32, INC_BYTES, XOR_BYTES, _xor_bytes

MODES = ["compiled", "python"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the compiled dispatch, then with the Python path only."""
    return compiled_or_python(request.param, monkeypatch, lambda mp: mp.setattr(
        Stream, "_make_fast_dispatch", lambda self: setattr(self, "_fast_dispatch", None)))


def _fast(s: hrx.Stream, mode: str) -> Any:
    """The stream's dispatcher (made by its first dispatch); None in Python mode."""
    fast = s._fast_dispatch
    if mode == "python":
        assert fast is None
    else:
        assert fast is not None and fast is not False
    return fast


def _started(dev: hrx.Device, mode: str) -> tuple[hrx.Stream, hrx.Buffer]:
    """A stream whose first dispatch (adding 1 to a zeroed buffer) made its queue and
    its dispatcher (None in Python mode), and that buffer."""
    s = dev.stream()
    buf = dev.allocate(256)
    s.upload(buf, np.zeros(64, np.uint32))
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    _fast(s, mode)
    return s, buf


def _u32(s: hrx.Stream, buf: hrx.Buffer) -> np.ndarray:
    return s.download(buf).view(np.uint32)


def _scenario(dev: hrx.Device, mode: str) -> dict[str, Any]:
    # a kernel object of its own, so that its first dispatch here loads it whatever
    # other tests dispatched before on this device (the shared XOR_BYTES may be loaded)
    xor = hrx.Kernel("xor_bytes", buffers=("read", "write"), scalars=(np.uint8, np.uint32), host=_xor_bytes,
                     cuda=_XOR_BYTES_CUDA)
    s = dev.stream()
    a, b = dev.allocate(256), dev.allocate(256)
    src, dst = dev.allocate(64), dev.allocate(64)
    s.upload(a, np.arange(64, dtype=np.uint32))
    s.upload(b, np.zeros(64, np.uint32))
    s.upload(src, np.arange(64, dtype=np.uint8))
    before = dev.stats.dispatches
    completions = []
    for i in range(70):  # across an automatic signal (every 64 operations)
        completions.append(s.dispatch(ADD_U32, 1, [a if i % 2 else b], block=64, scalars=(i, 64)))
    completions.append(s.dispatch(ADD_U32, (1,), (b,), block=(64, 1), scalars=[np.uint32(5), 32]))
    completions.append(s.dispatch(xor, (1, 1, 1), [src, dst], block=64, scalars=(0x5A, 64)))
    fast = _fast(s, mode)
    completions[-1].wait(60)
    out = {
        "a": _u32(s, a).tolist(),
        "b": _u32(s, b).tolist(),
        "dst": s.download(dst).tolist(),
        "dispatches": dev.stats.dispatches - before,
        # launches between two signals share one completion, as on the Python path
        "distinct": len({id(c) for c in completions}),
        "values": [c.value - completions[0].value for c in completions],
    }
    if fast is not None:
        out["hits"], out["misses"] = fast.hits, fast.misses
    return out


_RESULTS: dict[tuple[str, str], dict[str, Any]] = {}


def test_same_results_both_ways(dev: hrx.Device, mode: str) -> None:
    got = _scenario(dev, mode)
    a = np.arange(64, dtype=np.uint32)
    b = np.zeros(64, np.uint32)
    for i in range(70):
        (a if i % 2 else b)[:64] += i
    b[:32] += 5
    assert got["a"] == a.tolist() and got["b"] == b.tolist()
    assert got["dst"] == (np.arange(64, dtype=np.uint8) ^ 0x5A).tolist()
    assert got["dispatches"] == 72
    if mode == "compiled":
        # all but the first (it made the queue) and the xor kernel's first (it loaded it)
        assert (got.pop("hits"), got.pop("misses")) == (70, 1)
    _RESULTS[(dev.info.engine, mode)] = got
    other = _RESULTS.get((dev.info.engine, "python" if mode == "compiled" else "compiled"))
    if other is not None:
        assert got == other


def test_compiled_entry_where_the_engine_offers_one(dev: hrx.Device, mode: str) -> None:
    s = dev.stream()
    buf = dev.allocate(256)
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    fast = _fast(s, mode)
    if fast is not None:
        offered = s.slot._native.fast_dispatch() is not None
        assert fast.compiled_entry == offered
        if dev.info.engine == "cuda":
            assert offered
    s.synchronize(60)


def _misses(s: hrx.Stream, mode: str) -> int:
    fast = _fast(s, mode)
    return 0 if fast is None else fast.misses


def _raises_same(s: hrx.Stream, mode: str, exc: type[BaseException], match: str, fn: Any) -> None:
    """``fn()`` raises ``exc`` (matching) both ways; the compiled dispatch left it to
    the Python path (one miss) or raised the same error itself."""
    before = _misses(s, mode)
    hits = 0 if mode == "python" else s._fast_dispatch.hits
    with pytest.raises(exc, match=match):
        fn()
    if mode == "compiled":
        assert s._fast_dispatch.hits == hits  # nothing was launched by it
        assert s._fast_dispatch.misses in (before, before + 1)


def test_invalid_calls_raise_the_python_errors(dev: hrx.Device, mode: str) -> None:
    s, buf = _started(dev, mode)
    limits = dev.info.limits
    _raises_same(s, mode, hrx.InvalidArgument, "grid", lambda: s.dispatch(ADD_U32, 0, [buf], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "grid", lambda: s.dispatch(ADD_U32, True, [buf], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "grid", lambda: s.dispatch(ADD_U32, 1.0, [buf], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "grid", lambda: s.dispatch(ADD_U32, (1, 1, 1, 1), [buf], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "grid", lambda: s.dispatch(ADD_U32, limits.max_grid[0] + 1, [buf], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "block", lambda: s.dispatch(ADD_U32, 1, [buf], block=limits.max_block[0] + 1, scalars=(1, 64)))
    if limits.max_block[0] * limits.max_block[1] > limits.max_threads_per_block:
        _raises_same(s, mode, hrx.InvalidArgument, "threads",
                     lambda: s.dispatch(ADD_U32, 1, [buf], block=(limits.max_block[0], limits.max_block[1]), scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "takes 1 buffers", lambda: s.dispatch(ADD_U32, 1, [buf, buf], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "bindings", lambda: s.dispatch(ADD_U32, 1, buf, block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "bindings", lambda: s.dispatch(ADD_U32, 1, [np.zeros(4)], block=64, scalars=(1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "outside the range", lambda: s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(-1, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "takes 2 scalars", lambda: s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1,)))
    _raises_same(s, mode, hrx.InvalidArgument, "scalars", lambda: s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(True, 64)))
    _raises_same(s, mode, hrx.InvalidArgument, "kernel", lambda: s.dispatch("add_u32", 1, [buf], block=64, scalars=(1, 64)))
    # a buffer of another device
    other = hrx.device("host") if dev.info.engine != "host" else None
    if other is not None:
        foreign = other.allocate(256)
        _raises_same(s, mode, hrx.InvalidArgument, "belongs to", lambda: s.dispatch(ADD_U32, 1, [foreign], block=64, scalars=(1, 64)))
    # a closed buffer
    gone = dev.allocate(256)
    gone.close()
    _raises_same(s, mode, hrx.InvalidArgument, "closed", lambda: s.dispatch(ADD_U32, 1, [gone], block=64, scalars=(1, 64)))
    # nothing above changed the buffer
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    assert _u32(s, buf)[:2].tolist() == [2, 2]


def test_host_mapped_buffers_take_the_python_path(dev: hrx.Device, mode: str) -> None:
    """A live host mapping, or a host write not flushed, is checked by the Python path."""
    s = dev.stream()
    buf = dev.allocate_shared(256)
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(0, 64))
    s.synchronize(60)
    _fast(s, mode)
    with buf.map("read_write") as host:
        host.view(np.uint32)[:] = 7
        _raises_same(s, mode, hrx.AccessConflict, "mapped for the host",
                     lambda: s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64)))
    misses = _misses(s, mode)
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    assert _misses(s, mode) == misses  # mapping closed: compiled again
    s.synchronize(60)
    with buf.map("read") as host:
        assert host.view(np.uint32)[:3].tolist() == [8, 8, 8]


def test_views_and_bindings_take_the_python_path(dev: hrx.Device, mode: str) -> None:
    s, buf = _started(dev, mode)
    misses = _misses(s, mode)
    s.dispatch(ADD_U32, 1, [buf.slice(128, 128)], block=64, scalars=(10, 32))
    s.dispatch(ADD_U32, 1, [buf.binding()], block=64, scalars=(100, 16))
    if mode == "compiled":
        assert _misses(s, mode) == misses + 2
    with pytest.raises(hrx.InvalidArgument, match="read"):
        s.dispatch(ADD_U32, 1, [buf.slice(0, 64).read()], block=64, scalars=(1, 16))
    got = _u32(s, buf)
    assert got[:16].tolist() == [101] * 16 and got[16:32].tolist() == [1] * 16 and got[32:].tolist() == [11] * 32


def test_buffer_uses_are_noted_and_held(dev: hrx.Device, mode: str) -> None:
    """A dispatch notes its buffer's use (host mappings see the work pending) and
    retains the allocation until the work retires (dropping the buffer frees later)."""
    s = dev.stream()
    buf = dev.allocate_shared(256)
    s.upload(buf, np.zeros(64, np.uint32))
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(0, 64))
    s.synchronize(60)
    fast = _fast(s, mode)
    alloc = buf.allocation
    refs = alloc.refs
    c = s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    if fast is not None:
        assert fast.misses == 0
    pending = [entry for entry in alloc.pending.values()]
    assert pending and pending[0][0] is c and pending[0][1:] == [0, 256, True]
    if not c.is_complete:
        assert alloc.refs == refs + 1
    c.wait(60)
    with buf.map("read") as host:
        assert host.view(np.uint32)[0] == 1


def test_an_unloaded_kernel_is_refused(dev: hrx.Device, mode: str) -> None:
    s, buf = _started(dev, mode)
    s.synchronize(60)
    exe = ADD_U32.executable(dev)
    exe.unloaded = True
    try:
        _raises_same(s, mode, hrx.InvalidArgument, "unloaded", lambda: s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64)))
    finally:
        object.__setattr__(exe, "unloaded", False)  # (the kernel is shared with other tests)
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    assert _u32(s, buf)[0] == 2


def test_a_closed_device_is_refused(engine: str, mode: str) -> None:
    from hrx_core.testing import open_device

    dev = open_device(engine)
    s = dev.stream()
    buf = dev.allocate(256)
    s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
    s.synchronize(60)
    _fast(s, mode)
    dev.close()
    with pytest.raises(hrx.HRXError, match="closed"):
        s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))


def test_a_busy_queue_waits_on_the_python_path(dev: hrx.Device, mode: str) -> None:
    """Another thread holding the queue's lock: the compiled dispatch does nothing and
    the Python path waits for the lock, as every dispatch did before."""
    s, buf = _started(dev, mode)
    misses = _misses(s, mode)
    with lock_held_elsewhere(s.slot.lock) as release:
        timer = threading.Timer(0.2, release.set)
        timer.start()
        t0 = time.perf_counter()
        s.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))
        assert time.perf_counter() - t0 >= 0.15
        timer.join(60)
    if mode == "compiled":
        assert _misses(s, mode) == misses + 1
    assert _u32(s, buf)[0] == 2


def test_threads_dispatching_on_one_stream(dev: hrx.Device, mode: str) -> None:
    s = dev.stream()
    bufs = [dev.allocate(256) for _ in range(4)]
    for b in bufs:
        s.upload(b, np.zeros(64, np.uint32))
    s.dispatch(ADD_U32, 1, [bufs[0]], block=64, scalars=(0, 64))
    fast = _fast(s, mode)

    def work(k: int) -> None:
        for _ in range(50):
            s.dispatch(ADD_U32, 1, [bufs[k]], block=64, scalars=(1, 64))

    run_threads(4, work, timeout=120)
    s.synchronize(60)
    for b in bufs:
        assert _u32(s, b).tolist() == [50] * 64
    if fast is not None:
        assert fast.hits + fast.misses == 200


@st.composite
def _whole_programs(draw: Any) -> tuple[int, list[tuple[Any, ...]], int]:
    """Ops on three whole buffers of one size over two streams: xor copies, in-place
    increments, uploads, and refused calls (a key out of uint8's range)."""
    size = draw(st.sampled_from([64, 200, 1024]))
    ops: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["xor", "xor", "inc", "inc", "upload", "refused"]))
        stream = draw(st.integers(0, 1))
        if kind == "xor":
            sb, db = draw(st.permutations([0, 1, 2]))[:2]
            ops.append(("xor", stream, sb, db, draw(st.integers(0, 255))))
        elif kind == "inc":
            ops.append(("inc", stream, draw(st.integers(0, 2))))
        elif kind == "upload":
            ops.append(("upload", stream, draw(st.integers(0, 2)), draw(st.integers(0, 2**32 - 1))))
        else:
            ops.append(("refused", stream, draw(st.integers(0, 2))))
    return size, ops, draw(st.integers(0, 2**32 - 1))


def _buffers_of(op: tuple[Any, ...]) -> set[int]:
    return {op[2], op[3]} if op[0] == "xor" else {op[2]}


@settings(max_examples=int(os.environ.get("HRX_PROPERTY_EXAMPLES", "2000")) // 10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=_whole_programs())
def test_random_whole_buffer_programs_match_serial_reference(engine: str, program: Any) -> None:
    """Random programs over whole buffers on two streams (events where two ops share a
    buffer) give the bytes of running them one by one in numpy, with the compiled
    dispatch and with the Python path; refused calls raise the same error both ways
    and change nothing."""
    from hrx_core.testing import open_device

    size, ops, seed = program
    rng = np.random.default_rng(seed)
    initial = [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(3)]
    expect = [x.copy() for x in initial]
    for op in ops:
        if op[0] == "xor":
            expect[op[3]] = expect[op[2]] ^ np.uint8(op[4])
        elif op[0] == "inc":
            expect[op[2]] = expect[op[2]] + np.uint8(1)
        elif op[0] == "upload":
            expect[op[2]] = np.random.default_rng(op[3]).integers(0, 256, size, dtype=np.uint8)
    results = {}
    for mode in MODES:
        dev = open_device(engine, **({"jitter_us": 50} if engine == "host" else {}))
        streams = [dev.stream(), dev.stream()]
        bufs = [streams[0].allocate_from(x) for x in initial]
        for s in streams:  # the first dispatch makes the queue (and the dispatcher)
            s.dispatch(INC_BYTES, 1, [bufs[0]], block=64, scalars=(0,))
            if mode == "python":
                s._fast_dispatch = None
        errors = []
        events: list[Any] = []
        for i, op in enumerate(ops):
            s = streams[op[1]]
            for j in range(i):
                if ops[j][1] != op[1] and _buffers_of(ops[j]) & _buffers_of(op) and events[j] is not None:
                    s.wait_event(events[j])
            if op[0] == "xor":
                s.dispatch(XOR_BYTES, -(-size // 64), [bufs[op[2]], bufs[op[3]]], block=64, scalars=(op[4], size))
            elif op[0] == "inc":
                s.dispatch(INC_BYTES, -(-size // 64), [bufs[op[2]]], block=64, scalars=(size,))
            elif op[0] == "upload":
                s.upload(bufs[op[2]], np.random.default_rng(op[3]).integers(0, 256, size, dtype=np.uint8))
            else:
                with pytest.raises(hrx.InvalidArgument) as info:
                    s.dispatch(XOR_BYTES, 1, [bufs[op[2]], bufs[(op[2] + 1) % 3]], block=64, scalars=(256, size))
                errors.append(str(info.value))
            events.append(None if op[0] == "refused" else s.record_event())
        for s in streams:
            s.synchronize(60)
        got = [streams[0].download(b) for b in bufs]
        for k in range(3):
            np.testing.assert_array_equal(got[k], expect[k], err_msg=f"{mode}: buffer {k}")
        if mode == "compiled":  # every dispatch went through C but XOR_BYTES' first (it loaded the kernel)
            launched = sum(op[0] in ("xor", "inc") for op in ops)
            assert sum(s._fast_dispatch.hits for s in streams) == launched - any(op[0] == "xor" for op in ops)
        results[mode] = errors
        dev.close()
    assert results["compiled"] == results["python"]
