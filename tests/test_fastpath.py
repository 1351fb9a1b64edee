"""The core's compiled replay (hrx_core.fastpath) against the Python replay path.

Every engine present: the compiled replay makes the same launches, values, completions
and counts as the Python path, and leaves to the Python path (doing nothing) every
case that path handles with more than a read: a stale launch record, a mapping of
inputs or a rebound graph's defaults without a current record, a closed graph or
queue, another thread holding the queue's lock, a changed plan.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import fastpath, hotpath
from hrx_core.device import AUTO_FLUSH_OPS

from .conftest import collector_off, lock_held_elsewhere
from .kernels import ADD_U32


@pytest.fixture
def compiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    mod = fastpath.module()
    if not mod.compiled:
        pytest.skip(f"compiled replay not built here: {mod.reason}")
    # (a free moves the launch records' epoch, and the hit and miss counts these tests
    # check would move with it)
    with collector_off():
        yield


def _counter_graph(dev: hrx.Device, owned: bool = False) -> tuple[hrx.Stream, hrx.Buffer, hrx.Graph]:
    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint32))
    g = s.owned_graph() if owned else s.graph()
    g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64), deps=[])
    return s, buf, g


def _replayed(dev: hrx.Device) -> tuple[hrx.Stream, hrx.Buffer, hrx.Graph]:
    """:func:`_counter_graph` replayed twice: by the Python path (which makes the
    compiled replay), then by the compiled replay (or the Python path, its lock busy)."""
    s, buf, g = _counter_graph(dev)
    g.launch()
    g.launch()
    return s, buf, g


def _input_graph(dev: hrx.Device) -> tuple[hrx.Stream, hrx.Buffer, hrx.Buffer, hrx.Graph]:
    """A graph adding 1 to its declared input "x" (bound to ``a``), and another buffer ``b``."""
    s = dev.stream()
    a = s.allocate_from(np.zeros(64, np.uint32))
    b = s.allocate_from(np.zeros(64, np.uint32))
    g = s.graph()
    g.input("x", a)
    g.dispatch(ADD_U32, 1, [a], block=64, scalars=(1, 64), deps=[])
    return s, a, b, g


def _hot_path(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Build what comes next with the compiled paths ("compiled") or without ("python")."""
    if mode == "python":
        monkeypatch.setenv("HRX_HOT_PATH", "0")
    else:
        monkeypatch.delenv("HRX_HOT_PATH")


def _value(s: hrx.Stream, buf: hrx.Buffer) -> int:
    out = s.download(buf).view(np.uint32)
    assert (out == out[0]).all()
    return int(out[0])


def test_replays_compiled_like_python(dev: hrx.Device, compiled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {}
    for mode in ("python", "compiled"):
        _hot_path(monkeypatch, mode)
        s, buf, g = _counter_graph(dev)
        before = dev.stats.graph_launches
        completions = [g.launch() for _ in range(2 * AUTO_FLUSH_OPS + 5)]  # past two automatic signals
        values = [c.value for c in completions]
        completions[-1].wait()
        assert all(c.is_complete for c in completions)
        runs[mode] = (values, _value(s, buf), g.launches, dev.stats.graph_launches - before)
        if mode == "compiled":
            fast = g._fast  # made by the first replay; a miss (the lock busy) ran the Python path
            assert fast is not None and fast.hits + fast.misses == 2 * AUTO_FLUSH_OPS + 4
            assert fast.hits >= AUTO_FLUSH_OPS
            assert g._fast.compiled_entry == (dev.info.engine == "cuda")
        else:
            assert g._fast is None
        g.close()
    python, compiled_ = runs["python"], runs["compiled"]
    assert compiled_[1:] == python[1:] == (2 * AUTO_FLUSH_OPS + 5, 2 * AUTO_FLUSH_OPS + 5, 2 * AUTO_FLUSH_OPS + 5)
    # the same values relative to the stream's first (an automatic signal every AUTO_FLUSH_OPS)
    rel = lambda vs: [v - vs[0] for v in vs]  # noqa: E731
    assert rel(compiled_[0]) == rel(python[0])


def test_completion_is_shared_between_signals_and_ordered(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _counter_graph(dev)
    g.launch()
    first = g.launch()
    second = g.launch()
    assert g._fast.hits + g._fast.misses == 2
    assert first is second  # launches between two signals share the stream's completion
    s.fill(buf, np.uint32(7))
    third = g.launch()
    assert third.value >= second.value
    s.synchronize()
    assert _value(s, buf) == 8
    assert g._record.last[s.slot] is third


def test_stale_record_takes_the_python_path(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _replayed(dev)
    fast = g._fast
    other = dev.allocate(256)
    other.close()  # moves the epoch: the record must be validated again
    misses = fast.misses
    g.launch()
    assert fast.misses == misses + 1 and g._record.current
    hits = fast.hits
    g.launch()  # validated: compiled again (unless the queue's lock was busy)
    assert fast.hits + fast.misses == hits + misses + 2
    s.synchronize()
    assert _value(s, buf) == 4


@pytest.mark.parametrize("start", [1_000_000, 2**30 - 1, 2**40, 2**64 + 7],
                         ids=["big", "last-one-digit", "wide", "past-long-long"])
def test_records_are_current_or_stale_at_any_epoch_magnitude(dev: hrx.Device, compiled: None,
                                                             monkeypatch: pytest.MonkeyPatch, start: int) -> None:
    """The compiled replay compares epochs as C integers where they fit a long long and
    by Python's comparison where they do not: a record validated at the epoch replays
    compiled, one the epoch moved past does not, whatever the epoch's size (2**30 - 1:
    the last int of one 30-bit digit, read directly, then one of two digits)."""
    from hrx_core import buffer

    monkeypatch.setattr(buffer.EPOCH, "_count", itertools.count(start))
    buffer.EPOCH.bump()
    s, buf, g = _replayed(dev)
    fast = g._fast
    hits, misses = fast.hits, fast.misses
    g.launch()
    assert (fast.hits, fast.misses) == (hits + 1, misses) and buffer.EPOCH.value >= start
    other = dev.allocate(256)
    other.close()  # moves the epoch past the record's
    g.launch()
    assert (fast.hits, fast.misses) == (hits + 1, misses + 1)
    s.synchronize()
    assert _value(s, buf) == 4


def test_closed_buffer_is_refused_not_launched(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _replayed(dev)
    s.synchronize()
    buf.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch()
    assert g.launches == 2


def test_rebound_inputs_and_defaults_again(dev: hrx.Device, compiled: None) -> None:
    s, a, b, g = _input_graph(dev)
    g.launch()
    g.launch()
    assert g._fast.hits + g._fast.misses == 1
    g.launch(inputs={"x": b})
    g.launch()  # the defaults again: bound back by the Python path (the first time)
    g.launch()
    s.synchronize()
    assert _value(s, a) == 4 and _value(s, b) == 1
    assert g.launches == 5


def _rebinds_in_c(g: hrx.Graph) -> bool:
    """Whether the engine prepares its patches (else a rebind runs patch_args: Python)."""
    from hrx_core.engine import NativeGraph

    return type(g._native).prepare_patches is not NativeGraph.prepare_patches


def test_defaults_again_after_rebinding_replays_are_compiled(dev: hrx.Device, compiled: None) -> None:
    """A plain launch() of a rebound graph binds the defaults again: the Python path
    the first time (it keeps the graph's restore record), the compiled replay after."""
    s, a, b, g = _input_graph(dev)
    g.launch()
    d = {"x": b}
    g.launch(inputs=d)
    g.launch()  # the Python path binds the defaults back and keeps the restore record
    assert g._restore is not None and not g._rebound
    fast = g._fast
    assert fast is not None
    misses = fast.misses
    for _ in range(10):
        g.launch(inputs=d)
        assert g._rebound
        g.launch()
        assert not g._rebound
    s.synchronize()
    assert _value(s, a) == 12 and _value(s, b) == 11
    assert g.launches == 23
    if _rebinds_in_c(g):
        assert fast.misses == misses  # every one compiled, rebinding and restoring


def test_a_stale_restore_record_is_not_replayed(dev: hrx.Device, compiled: None) -> None:
    """The restore record is current while EPOCH stands: a free elsewhere sends the next
    plain launch of a rebound graph to the Python path (which makes the record again),
    and a closed default is refused there, nothing launched."""
    s, a, b, g = _input_graph(dev)
    g.launch()
    d = {"x": b}
    g.launch(inputs=d)
    g.launch()
    first = g._restore
    g.launch(inputs=d)
    other = dev.allocate(256)
    other.close()  # moves the epoch: every record is stale
    g.launch()
    assert g._restore is not first and g._restore is not None and g._restore.epoch == hrx.buffer.EPOCH.value
    g.launch(inputs=d)
    s.synchronize()
    assert _value(s, a) == 3 and _value(s, b) == 3
    a.close()  # (a borrowed default: the graph refuses it)
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch()
    assert g.launches == 6
    s.synchronize()
    assert _value(s, b) == 3


def test_warm_compiled_paths_find_every_slot_offset_cached(dev: hrx.Device, compiled: None) -> None:
    """The compiled paths read and write attributes at slot offsets remembered per
    (class, name): once warm, replays, rebinding replays, restores of the defaults and
    runtime resubmissions look nothing up again. (With the earlier cache, three keys
    of a resubmission shared a bucket of two and evicted each other on every call: a
    type lookup per attribute each time.)"""
    from hrx_core.execution import Runtime, RuntimeOptions

    lib = fastpath.module().lib
    s, a, b, g = _input_graph(dev)
    d = {"x": b}
    rt = Runtime(dev, RuntimeOptions(observe=False, signals="lazy"))
    x = rt.allocate(256)
    tg = rt.graph("count")
    tg.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=64, scalars=(1, 64)))
    try:
        def calls() -> None:
            for _ in range(8):
                g.launch()
                g.launch(inputs=d)
                g.launch()
                rt.submit(tg)
            s.synchronize()
            rt.synchronize()

        for _ in range(3):
            calls()
        hits = (g._fast.hits, tg._fast_submit.hits)
        before = lib.slot_fills()
        calls()
        assert lib.slot_fills() == before
        assert g._fast.hits - hits[0] == (24 if _rebinds_in_c(g) else 16) and tg._fast_submit.hits - hits[1] == 8
    finally:
        tg.close()
        rt.close()


def test_a_class_changed_after_its_offsets_were_remembered_is_looked_up_again(dev: hrx.Device, compiled: None) -> None:
    """The remembered slot offsets (each call site's own entry, and the shared cache
    behind them) carry the class's version tag: a class changed afterwards -- here a
    graph's `_closed` slot shadowed by a property -- is read through the new attribute,
    never at the old offset, and its offsets are remembered again once restored."""
    from hrx_core.execution import Runtime, RuntimeOptions
    from hrx_core.execution.graph import TrackedGraph

    from hrx_core.conformance import adder_graph

    rt = Runtime(dev, RuntimeOptions(observe=False, signals="lazy"))
    x, tg = adder_graph(rt)
    slot = TrackedGraph.__dict__["_closed"]
    try:
        for _ in range(4):
            rt.submit(tg)
        fast = tg._fast_submit
        hits, misses = fast.hits, fast.misses
        TrackedGraph._closed = property(lambda self: True)  # type: ignore[assignment]
        try:
            with pytest.raises(hrx.InvalidArgument, match="closed"):
                rt.submit(tg)  # the compiled path sees the property, leaves it to Python's check
            assert (fast.hits, fast.misses) == (hits, misses + 1)
        finally:
            TrackedGraph._closed = slot  # type: ignore[assignment]
        before = fastpath.module().lib.slot_fills()
        for _ in range(3):
            rt.submit(tg)
        assert fast.hits == hits + 3 and fastpath.module().lib.slot_fills() > before  # looked up again
        rt.synchronize()
        assert rt.lane("compute").stream.download(x).view(np.uint32)[0] == 7
    finally:
        tg.close()
        rt.close()


def test_closed_graph_raises(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _replayed(dev)
    fast = g._fast
    hits = fast.hits
    g.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch()
    assert fast.hits == hits


def test_lock_held_by_another_thread_waits(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _replayed(dev)
    fast = g._fast
    misses = fast.misses
    done = []
    with lock_held_elsewhere(s.slot.lock, 10):
        launcher = threading.Thread(target=lambda: done.append(g.launch()))
        launcher.start()
        deadline = time.monotonic() + 10
        while fast.misses == misses and time.monotonic() < deadline:
            time.sleep(0.001)
        launcher.join(0.05)
        assert not done and fast.misses == misses + 1  # it left the call to the Python path, which waits
    launcher.join(10)
    assert done
    s.synchronize()
    assert _value(s, buf) == 3


def test_owned_graph_close_waits_for_compiled_replays(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _counter_graph(dev, owned=True)
    g.launch()
    last = g.launch()
    assert g._fast.hits + g._fast.misses == 1 and g._last_launch[s.slot] == last.value
    g.close()
    s.synchronize()
    assert _value(s, buf) == 2


def test_new_nodes_make_a_new_replayer(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _replayed(dev)
    first = g._fast
    g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(10, 64), deps=[])
    g.launch()
    g.launch()
    assert first.hits <= 1 and g._fast is not first and g._fast.hits + g._fast.misses == 1
    s.synchronize()
    assert _value(s, buf) == 2 + 2 * 11


def test_a_failing_launch_raises_and_releases_the_lock(dev: hrx.Device, compiled: None) -> None:
    s, buf, g = _replayed(dev)
    fast = g._fast
    real = fast.plan[2]

    class Boom(Exception):
        pass

    def failing(queue: object) -> None:
        raise Boom("native launch failed")

    replayer = fastpath.module().lib.Replayer(
        fast.plan, g._native, g._record, hrx.buffer.EPOCH, s.slot, s, dev.stats,
        failing, None, 0, 0, None, False, AUTO_FLUSH_OPS,
    )
    launches = g.launches
    with pytest.raises(Boom):
        replayer(g)
    assert g.launches == launches
    assert s.slot.lock.acquire(blocking=False)  # released
    s.slot.lock.release()
    assert real is fast.plan[2]
    g.launch()
    s.synchronize()
    assert _value(s, buf) == 3


def test_disabled_by_the_environment(dev: hrx.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HRX_HOT_PATH", "0")
    s, buf, g = _counter_graph(dev)
    for _ in range(3):
        g.launch()
    assert g._fast is None
    s.synchronize()
    assert _value(s, buf) == 3


def test_replayer_checks_its_arguments(compiled: None) -> None:
    R = fastpath.module().lib.Replayer
    slot = hrx.device("host").stream().slot
    with pytest.raises(TypeError):
        R()
    with pytest.raises(TypeError):  # the entry is an address
        R(None, None, None, None, slot, None, None, None, None, "entry", 0, None, False, 1)
    with pytest.raises(ValueError):
        R(None, None, None, None, slot, None, None, None, None, 0, 0, None, False, 0)


def test_status_names_the_extension(compiled: None) -> None:
    status = fastpath.status()
    assert status["compiled"] and status["path"] and "core_replay" in status["path"]
    assert hotpath.load_extension(fastpath.NAME, fastpath.SOURCE) is fastpath.module()


def test_doctor_reports_the_compiled_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    from hrx_core.host import plugin

    monkeypatch.setenv("HRX_HOT_PATH", "0")
    rows = [r for r in plugin.hrx_doctor() if r[1] == "compiled replay"]
    assert rows == [("core", "compiled replay", "fallback (Python): disabled by HRX_HOT_PATH=0")]
    monkeypatch.delenv("HRX_HOT_PATH")
    (row,) = [r for r in plugin.hrx_doctor() if r[1] == "compiled replay"]
    mod = fastpath.module()
    assert row[2].startswith("compiled, " if mod.compiled else "fallback (Python): ")


def test_threads_replaying_one_graph_count_every_launch(dev: hrx.Device, compiled: None) -> None:
    """Four threads replay one graph at once: every replay runs once (the compiled
    replay and the Python path it leaves busy queues to share the queue's lock)."""
    s, buf, g = _counter_graph(dev)
    g.launch()
    per_thread, threads = 200, 4
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(per_thread):
                g.launch()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(60)
    assert not errors
    s.synchronize()
    total = 1 + per_thread * threads
    assert _value(s, buf) == total
    assert g._fast.hits + g._fast.misses == per_thread * threads


def test_an_unloaded_kernel_is_refused_on_every_replay(dev: hrx.Device, compiled: None) -> None:
    """Unloading moves the epoch and the graph's record check refuses it: no replay
    after it launches, the compiled one included (the record never turns current)."""
    s, buf, g = _replayed(dev)
    s.synchronize()
    (exe,) = g._executables
    epoch = hrx.buffer.EPOCH.value
    exe.unloaded = True
    try:
        assert hrx.buffer.EPOCH.value != epoch
        for _ in range(3):
            with pytest.raises(hrx.InvalidArgument, match="unloaded"):
                g.launch()
        assert not g._record.current
    finally:
        object.__setattr__(exe, "unloaded", False)  # (the kernel is shared with other tests)
    g.launch()
    s.synchronize()
    assert _value(s, buf) == 3


def test_runtime_regions_replay_through_it(dev: hrx.Device, compiled: None) -> None:
    """A tracked graph resubmitted with lazy signals (the default on devices whose
    failures are sticky) re-encodes its region through the compiled replay."""
    from hrx_core.execution import Runtime, RuntimeOptions

    rt = Runtime(dev, RuntimeOptions(observe=False, signals="lazy"))
    buf = rt.allocate(256)
    rt.lane("compute").stream.upload(buf, np.zeros(64, np.uint32)).wait()
    g = rt.graph("count")
    region = g.compute("add", lambda r: [r.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64))])
    subs = [rt.submit(g) for _ in range(20)]
    subs[-1].wait()
    fast = region.device_graph._fast
    assert fast is not None and fast.hits + fast.misses >= 18 and fast.hits > 0
    assert _value(rt.lane("compute").stream, buf) == 20
    rt.close()


_ENTRY_CDEF = """
int hrx_test_entry(void *arg, long long *info);
extern int hrx_test_code;
extern int hrx_test_calls;
"""
_ENTRY_SOURCE = """
int hrx_test_code = 0;
int hrx_test_calls = 0;
int hrx_test_entry(void *arg, long long *info)
{
    (void)arg;
    hrx_test_calls++;
    if (hrx_test_code > 0) {
        info[0] = 2;
        info[1] = 7;
    }
    return hrx_test_code;
}
"""


def test_a_c_entry_launches_defers_or_fails_through_the_engine(dev: hrx.Device, compiled: None) -> None:
    """The replayer with an engine's C entry: 0 commits, -1 leaves the call to the
    Python path (nothing committed), a failure code goes to the engine's handler under
    the queue's lock -- a raise propagates with nothing committed, a return commits."""
    mod = hotpath.load("hrx_test_fast_entry", _ENTRY_CDEF, _ENTRY_SOURCE)
    if not mod.compiled:
        pytest.skip(f"cannot build the test entry: {mod.reason}")
    lib, ffi = mod.lib, mod.ffi
    s, buf, g = _replayed(dev)
    s.synchronize()
    handled: list[tuple[int, int, int, bool]] = []
    fail = [False]

    def on_failure(code: int, step: int, node: int) -> None:
        handled.append((code, step, node, s.slot.lock._is_owned()))
        if fail[0]:
            raise hrx.DeviceError("the engine's failure")

    address = int(ffi.cast("uintptr_t", ffi.addressof(lib, "hrx_test_entry")))
    fast = fastpath.module().lib.Replayer(
        g._plan, g._native, g._record, hrx.buffer.EPOCH, s.slot, s, dev.stats,
        g._plan[2], on_failure, address, 1, None, False, AUTO_FLUSH_OPS,
    )
    assert fast.compiled_entry
    launches, pending = g.launches, s.slot.pending_value
    lib.hrx_test_code = lib.hrx_test_calls = 0
    assert fast(g) is not None and lib.hrx_test_calls == 1 and g.launches == launches + 1
    lib.hrx_test_code = -1  # the engine's Python launch has work first
    assert fast(g) is None and g.launches == launches + 1 and fast.misses == 1
    lib.hrx_test_code = 33
    fail[0] = True
    with pytest.raises(hrx.DeviceError, match="engine's failure"):
        fast(g)
    assert handled == [(33, 2, 7, True)] and g.launches == launches + 1
    assert s.slot.lock.acquire(blocking=False)
    s.slot.lock.release()
    fail[0] = False
    completion = fast(g)  # handled: launched after all
    assert completion is not None and handled[-1] == (33, 2, 7, True) and g.launches == launches + 2
    assert s.slot.unsignaled_ops >= 0 and s.slot.pending_value >= pending
    lib.hrx_test_code = 0


def test_rebinding_replays_compiled_like_python(dev: hrx.Device, compiled: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """g.launch(inputs=d) with mappings replayed before: the compiled replay stages the
    rebind record's prepared patches and launches; the same results as the Python path,
    alternating mappings, the defaults between them, and records made stale."""
    runs = {}
    for mode in ("python", "compiled"):
        _hot_path(monkeypatch, mode)
        s = dev.stream()
        bufs = [s.allocate_from(np.zeros(64, np.uint32)) for _ in range(3)]
        g = s.graph()
        g.input("x", bufs[0])
        g.dispatch(ADD_U32, 1, [bufs[0]], block=64, scalars=(1, 64), deps=[])
        maps = [{"x": bufs[1]}, {"x": bufs[2]}]
        g.launch()
        for i in range(40):
            g.launch(inputs=maps[i & 1])
            if i % 7 == 3:
                g.launch()  # the defaults between them
        other = dev.allocate(256)
        other.close()  # moves the epoch: the records go stale, then are made again
        for i in range(6):
            g.launch(inputs=maps[i & 1])
        s.synchronize()
        runs[mode] = [_value(s, b) for b in bufs]
        if mode == "compiled":
            from hrx_core.engine import NativeGraph

            fast = g._fast
            assert fast is not None
            if type(g._native).prepare_patches is not NativeGraph.prepare_patches:
                assert fast.hits >= 30  # most rebinding replays were compiled
            if type(g._native).fast_stage is not NativeGraph.fast_stage:  # (cuda: staged in C)
                assert fast.compiled_stage == (g._native.fast_stage() is not None)
            # (an engine without prepared patches rebinds through patch_args: Python)
        g.close()
    assert runs["compiled"] == runs["python"] == [1 + 6, 23, 23]


def test_rebinding_refuses_what_the_python_path_refuses(dev: hrx.Device, compiled: None) -> None:
    s, a, b, g = _input_graph(dev)
    g.launch()
    d = {"x": b}
    g.launch(inputs=d)
    g.launch(inputs=d)
    s.synchronize()
    b.close()
    with pytest.raises(hrx.InvalidArgument):
        g.launch(inputs=d)  # a closed handle: the record is stale and the check refuses it
    c = s.allocate_from(np.zeros(64, np.uint32))
    d2 = {"x": c}
    g.launch(inputs=d2)
    g.launch(inputs=d2)
    with pytest.raises(hrx.InvalidArgument):
        g.launch(inputs={"y": c})  # not a declared input
    s.synchronize()
    assert _value(s, c) == 2 and _value(s, a) == 1


# -- the compiled entries (Graph.launch, Runtime.submit) and C staging -------------------


def test_graph_launch_is_a_compiled_entry_once_built(dev: hrx.Device, compiled: None) -> None:
    """Once a replayer is made, Graph.launch is the compiled entry: a method like the
    Python one (bound, unbound, signature, doc), whose plain and rebinding calls go to
    the replayer without a Python frame and whose other calls run the Python function."""
    import inspect

    from hrx_core.graph import Graph

    s, a, b, g = _input_graph(dev)
    g.launch()
    entry = Graph.__dict__["launch"]
    assert type(entry).__name__ == "FastEntry" and entry.kind == fastpath.ENTRY_KINDS["graph_launch"]
    assert entry.__wrapped__.__name__ == "launch" and entry.rest is Graph._launch_py
    assert (Graph.launch.__name__, Graph.launch.__qualname__, Graph.launch.__module__) == ("launch", "Graph.launch", "hrx_core.graph")
    assert Graph.launch.__doc__ == entry.__wrapped__.__doc__ and "Replay the graph" in Graph.launch.__doc__
    assert list(inspect.signature(Graph.launch).parameters) == ["self", "stream", "inputs"]
    assert repr(entry) == "<compiled entry Graph.launch>"
    assert g.launch.__self__ is g and g.launch.__func__ is entry
    fast = g._fast
    assert fast is not None
    hits = fast.hits
    assert isinstance(g.launch(), hrx.Completion)
    assert isinstance(Graph.launch(g), hrx.Completion)  # unbound, through the class
    bound = g.launch
    assert isinstance(bound(), hrx.Completion)
    assert fast.hits + fast.misses == hits + 3  # (a miss: its lock was busy)
    calls = fast.hits + fast.misses
    g.launch(s)  # a stream given: the Python function, the replayer not asked
    g.launch(stream=s)
    assert fast.hits + fast.misses == calls
    g.launch(inputs={})  # no inputs: the Python function, which asks the replayer for a plain replay
    assert fast.hits + fast.misses == calls + 1
    d = {"x": b}
    g.launch(inputs=d)
    g.launch(inputs=d)  # replayed before: the compiled rebind
    assert fast.hits + fast.misses == calls + 3
    with pytest.raises(TypeError):
        g.launch(s, s)
    with pytest.raises(TypeError):
        g.launch(nodes=1)
    with pytest.raises(hrx.InvalidArgument):
        g.launch(inputs={"y": b})  # declined by the replayer (no record): the Python check
    s.synchronize()
    assert _value(s, a) == 7 and _value(s, b) == 2


def test_a_declined_compiled_call_runs_the_python_path_once(dev: hrx.Device, compiled: None) -> None:
    """A replay the replayer declines (a stale record) counts one miss: the entry runs
    the rest of the Python path, not the compiled attempt again; likewise for a graph
    without a replayer (built with the hot path off)."""
    s, buf, g = _replayed(dev)
    fast = g._fast
    dev.allocate(256).close()  # moves the epoch
    misses, hits = fast.misses, fast.hits
    g.launch()
    assert (fast.misses, fast.hits) == (misses + 1, hits)
    s.synchronize()
    assert _value(s, buf) == 3


def test_graphs_without_a_replayer_use_the_python_function(dev: hrx.Device, compiled: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    s, buf, g = _replayed(dev)  # (builds the entry)
    monkeypatch.setenv("HRX_HOT_PATH", "0")
    s2, buf2, g2 = _replayed(dev)
    assert g2._fast is None
    for _ in range(3):
        g2.launch()
    s2.synchronize()
    assert _value(s2, buf2) == 5


_STAGE_CDEF = """
int hrx_test_stage(void *arg, const void *prepared, size_t nbytes);
extern int hrx_test_stage_code;
extern int hrx_test_stage_calls;
extern unsigned long long hrx_test_stage_first;
extern size_t hrx_test_stage_bytes;
"""
_STAGE_SOURCE = """
int hrx_test_stage_code = 1;
int hrx_test_stage_calls = 0;
unsigned long long hrx_test_stage_first = 0;
size_t hrx_test_stage_bytes = 0;
int hrx_test_stage(void *arg, const void *prepared, size_t nbytes)
{
    (void)arg;
    hrx_test_stage_calls++;
    hrx_test_stage_bytes = nbytes;
    hrx_test_stage_first = nbytes >= 8 ? *(const unsigned long long *)prepared : 0;
    return hrx_test_stage_code;
}
"""


def test_a_c_stage_takes_prepared_patches_or_leaves_them_to_python(dev: hrx.Device, compiled: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """NativeGraph.fast_stage: the compiled rebind hands a prepared object that exports
    a buffer to the engine's C entry (its bytes), appends it to the engine's log on 1,
    and calls apply_patches on 0, at the log's limit, or for a prepared object without
    a buffer. A host graph stands in for an engine that stages: what is logged is
    patched in at its next launch, so results must match the Python path's."""
    import array

    from hrx_core.host.graph import HostGraph

    mod = hotpath.load("hrx_test_fast_stage", _STAGE_CDEF, _STAGE_SOURCE)
    if not mod.compiled:
        pytest.skip(f"cannot build the test stage: {mod.reason}")
    lib, ffi = mod.lib, mod.ffi

    class Prepared(array.array):  # type: ignore[type-arg]
        patches: tuple

    python_applied: list[Any] = []
    limit = [6]

    def prepare_patches(self: HostGraph, patches: Any) -> Any:
        patches = tuple(patches)
        p = Prepared("Q", [0xFEED, len(patches)])
        p.patches = patches
        return p

    def apply_patches(self: HostGraph, prepared: Any) -> bool:
        python_applied.append(prepared)
        return self.patch_args(prepared.patches)

    def fast_stage(self: HostGraph) -> Any:
        log = self.__dict__.setdefault("_test_log", [])
        return (int(ffi.cast("uintptr_t", ffi.addressof(lib, "hrx_test_stage"))), 0, log, limit[0], None)

    original_launch = HostGraph.launch

    def launch(self: HostGraph, q: Any) -> None:
        log = self.__dict__.get("_test_log", [])
        for p in log:  # staged in "C": patched in at the launch
            assert self.patch_args(p.patches)
        log.clear()
        original_launch(self, q)

    monkeypatch.setattr(HostGraph, "prepare_patches", prepare_patches)
    monkeypatch.setattr(HostGraph, "apply_patches", apply_patches)
    monkeypatch.setattr(HostGraph, "fast_stage", fast_stage)
    monkeypatch.setattr(HostGraph, "launch", launch)
    s, a, b, g = _input_graph(dev)
    c = s.allocate_from(np.zeros(64, np.uint32))
    g.launch()
    if not isinstance(g._native, HostGraph):
        pytest.skip("the staging stand-in is a host graph")
    g.launch()
    fast = g._fast
    assert fast is not None and fast.compiled_stage
    maps = [{"x": b}, {"x": c}]
    g.launch(inputs=maps[0])  # the Python path makes the record (and applies it)
    g.launch(inputs=maps[1])
    lib.hrx_test_stage_calls = 0
    python_applied.clear()
    hits = fast.hits
    g.launch(inputs=maps[0])  # compiled: staged in C
    assert lib.hrx_test_stage_calls == 1 and lib.hrx_test_stage_first == 0xFEED and lib.hrx_test_stage_bytes == 16
    assert python_applied == [] and fast.hits == hits + 1
    lib.hrx_test_stage_code = 0  # the engine declines: apply_patches
    g.launch(inputs=maps[1])
    assert lib.hrx_test_stage_calls == 2 and len(python_applied) == 1 and fast.hits == hits + 2
    lib.hrx_test_stage_code = 1
    g.launch()  # the defaults again (rebound: the Python path restores them)
    for i in range(8):  # the log is folded at every launch here: never at the limit
        g.launch(inputs=maps[i & 1])
    assert lib.hrx_test_stage_calls == 2 + 8 and len(python_applied) == 1
    # at the limit: apply_patches (which would fold the log), the stage not asked
    log = g._native.__dict__["_test_log"]
    filler = Prepared("Q", [0, 0])
    filler.patches = ()
    log.extend([filler] * limit[0])
    calls = lib.hrx_test_stage_calls
    g.launch(inputs=maps[0])
    assert lib.hrx_test_stage_calls == calls and len(python_applied) == 2
    s.synchronize()
    # 2 plain launches on a, then: b c | b c | defaults(a) | b c b c b c b c | b
    assert (_value(s, a), _value(s, b), _value(s, c)) == (3, 1 + 1 + 4 + 1, 1 + 1 + 4)


def test_threading_locks_are_taken_directly_where_their_layout_checked_out(compiled: None) -> None:
    """On CPython 3.11 and 3.12 the extension takes threading's locks without a method
    call (their layout checked on fresh locks when it loads); elsewhere the methods."""
    import sys

    direct = fastpath.module().lib.direct_locks
    if sys.implementation.name == "cpython" and (3, 11) <= sys.version_info[:2] < (3, 13):
        assert direct == 1
    else:
        assert direct == 0
    # and without PyThread_acquire_lock_timed (a clock read each time) where the locks
    # are POSIX semaphores: sem_trywait itself, checked on a fresh lock at load
    semaphores = direct and sys.platform.startswith("linux") and sys.thread_info.lock == "semaphore"
    assert fastpath.module().lib.sem_locks == int(bool(semaphores))


def test_locks_taken_directly_are_the_locks_the_methods_see(dev: hrx.Device, compiled: None) -> None:
    """The compiled replay takes the queue's RLock (through sem_trywait where the locks
    are semaphores): while another thread holds it the replay leaves the call to the
    Python path, which waits; released, the replay takes it again and leaves it free."""
    s, buf, g = _replayed(dev)
    fast = g._fast
    lock = s.slot.lock
    held, go = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            go.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    misses = fast.misses
    timer = threading.Timer(0.05, go.set)
    timer.start()
    g.launch()  # held elsewhere: the Python path waits for the lock
    t.join(10)
    assert fast.misses == misses + 1
    hits = fast.hits
    g.launch()
    assert fast.hits == hits + 1 and lock.acquire(blocking=False)
    lock.release()
    s.synchronize()
    assert _value(s, buf) == 4


def test_a_replay_under_the_queue_lock_of_its_own_thread_reenters_it(dev: hrx.Device, compiled: None) -> None:
    """The queue's lock is reentrant: a replay from a thread that holds it goes through
    the compiled replay and leaves the lock held exactly as before."""
    s, buf, g = _replayed(dev)
    fast = g._fast
    hits = fast.hits
    lock = s.slot.lock
    with lock:
        with lock:
            assert isinstance(g.launch(), hrx.Completion)
            assert lock._is_owned()
        assert lock._is_owned()
    assert not lock._is_owned() and fast.hits == hits + 1
    assert lock.acquire(blocking=False)  # free for everyone again
    lock.release()
    released = threading.Event()

    def other() -> None:
        with lock:
            released.set()

    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    assert released.is_set()
    s.synchronize()
    assert _value(s, buf) == 3


def test_a_mapping_changed_in_place_is_not_replayed_with_its_old_record(dev: hrx.Device, compiled: None) -> None:
    """The replayer keeps the rebind records of the mappings it replayed last, matched
    by their names and values (by identity), not by the dict object: one dict changed
    between replays binds what it holds now; more mappings than it keeps still bind
    each its own."""
    s = dev.stream()
    bufs = [s.allocate_from(np.zeros(64, np.uint32)) for _ in range(8)]
    g = s.graph()
    g.input("x", bufs[0])
    g.dispatch(ADD_U32, 1, [bufs[0]], block=64, scalars=(1, 64), deps=[])
    g.launch()
    d = {"x": bufs[1]}
    for _ in range(3):
        g.launch(inputs=d)  # (replayed before: compiled)
    d["x"] = bufs[2]  # the same dict, another value
    for _ in range(2):
        g.launch(inputs=d)
    d["x"] = bufs[1]
    g.launch(inputs=d)
    maps = [{"x": b} for b in bufs[3:8]]  # more mappings than the replayer keeps
    for _ in range(3):
        for m in maps:
            g.launch(inputs=m)
    s.synchronize()
    assert [_value(s, b) for b in bufs] == [1, 4, 2, 3, 3, 3, 3, 3]
    assert g._fast is not None and g._fast.hits >= 10


def test_records_evicted_from_the_graph_are_not_replayed(dev: hrx.Device, compiled: None) -> None:
    """Cycling through more mappings than the graph keeps records for closes the oldest
    records; a replayer still holding one finds it stale and the mapping is bound anew."""
    from hrx_core.graph import _REBIND_MEMO

    s = dev.stream()
    bufs = [s.allocate_from(np.zeros(64, np.uint32)) for _ in range(_REBIND_MEMO + 3)]
    g = s.graph()
    g.input("x", bufs[0])
    g.dispatch(ADD_U32, 1, [bufs[0]], block=64, scalars=(1, 64), deps=[])
    g.launch()
    maps = [{"x": b} for b in bufs[1:]]
    for _ in range(4):
        for m in maps:
            g.launch(inputs=m)
            g.launch(inputs=m)
    s.synchronize()
    assert [_value(s, b) for b in bufs] == [1] + [8] * len(maps)


def test_compiled_replays_count_in_tallies_read_as_plain_counts(dev: hrx.Device, compiled: None) -> None:
    """Graph.launches and DeviceStats.graph_launches add what compiled replays counted
    (a Tally each) to the Python path's count: exact after any mix of the two, in the
    snapshot too, and assignable (a reset counts on from the new value)."""
    s, buf, g = _counter_graph(dev)
    before = dev.stats.graph_launches
    g.launch()  # the Python path (makes the replayer)
    for _ in range(5):
        g.launch()
    g.launch(s)  # a stream given: the Python path
    assert g._fast is not None and sum(t.value for t in g._launch_tallies) >= 1
    assert g.launches == 7 and dev.stats.graph_launches == before + 7
    assert dev.stats.snapshot()["graph_launches"] == before + 7
    assert list(dev.stats.snapshot())[:len(dev.stats.COUNTERS)] == list(dev.stats.COUNTERS)
    g.launches = 0
    dev.stats.graph_launches = 100
    g.launch()
    assert g.launches == 1 and dev.stats.graph_launches == 101
    s.synchronize()
    assert _value(s, buf) == 8


def test_a_second_loaded_copy_of_the_extension_counts_and_launches_alike(
        dev: hrx.Device, compiled: None, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Another cache directory loads another copy of the extension (its own types):
    graphs replayed under either count in their own tallies, read as one count, and
    Graph.launch stays one compiled entry standing for the Python function."""
    from hrx_core.graph import Graph

    s, buf, g = _replayed(dev)  # under the first copy
    first = fastpath.module()
    before = dev.stats.graph_launches
    monkeypatch.setenv("HRX_CACHE_DIR", str(tmp_path))
    second = fastpath.module()
    if not second.compiled:
        pytest.skip(f"no second copy built here: {second.reason}")
    assert second.lib is not first.lib and second.lib.Tally is not first.lib.Tally
    s2, buf2, g2 = _replayed(dev)  # under the second copy
    for _ in range(3):
        g.launch()
        g2.launch()
    entry = Graph.__dict__["launch"]
    assert isinstance(entry, second.lib.FastEntry) and type(entry.__wrapped__).__name__ == "function"
    assert len(dev.stats._graph_launch_tallies) == 2
    assert g.launches == 5 and g2.launches == 5 and dev.stats.graph_launches == before + 3 + 5
    s.synchronize()
    s2.synchronize()
    assert _value(s, buf) == 5 and _value(s2, buf2) == 5
