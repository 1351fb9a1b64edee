"""The execution runtime on every engine: lanes, hazards, limits, faults, sessions."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions

from .conftest import live_bytes
from .kernels import ADD_U32, INC_BYTES, SLEEPY, XOR_BYTES, launch_1d


def _rt(dev, **opts):
    return Runtime(dev, RuntimeOptions(**opts))


def test_upload_compute_download_and_replay(dev):
    rt = _rt(dev)
    n = 1024
    x = rt.allocate(n * 4)
    g = rt.graph("step")
    up = g.upload(x, np.arange(n, dtype=np.uint32))
    grid, block = launch_1d(n)
    k = g.compute("add", lambda r: r.dispatch(ADD_U32, grid, [x], block=block, scalars=(5, n)))
    down = g.download(x)
    assert k.deps == (up.index,) and down.deps == (k.index,)
    rt.submit(g).wait()
    np.testing.assert_array_equal(down.read(np.uint32), np.arange(n, dtype=np.uint32) + 5)
    up.write(np.full(n, 100, np.uint32))  # new input, same graph
    rt.submit(g).wait()
    assert (down.read(np.uint32) == 105).all()
    snap = rt.stats.snapshot()
    assert snap["upload_bytes"] == snap["download_bytes"] == 2 * n * 4
    assert up.lane == "upload" and k.lane == "compute" and down.lane == "download"
    assert len({rt.lane(n_).queue for n_ in ("upload", "compute", "download")}) == 3
    g.close()
    rt.close()


def test_hazards_order_work_across_graphs_and_lanes(dev):
    rt = _rt(dev)
    flag = rt.allocate(16)
    init = rt.graph("init")
    init.fill(flag, 0)
    rt.submit(init).wait()
    writer = rt.graph("writer")
    writer.compute("sleepy", lambda r: r.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(150_000_000,)))
    reader = rt.graph("reader")
    d = reader.download(flag.slice(0, 4))
    other = rt.graph("independent")
    other.upload(flag.slice(8, 8), np.full(8, 3, np.uint8))  # disjoint bytes, upload lane: not ordered
    sw = rt.submit(writer)
    sr = rt.submit(reader)  # another graph, another lane: ordered by the hazard on flag[0:4]
    so = rt.submit(other)
    so.wait()
    assert not sw.is_complete  # the independent download did not wait for the kernel
    sr.wait()
    assert d.read(np.uint32)[0] == 1
    check = rt.graph("check")
    o = check.download(flag.slice(8, 8))
    rt.submit(check).wait()
    assert o.read().tolist() == [3] * 8
    rt.synchronize()
    rt.close()


def test_one_region_per_lane_at_a_time_and_lanes_overlap(dev):
    rt = _rt(dev)
    a, b = rt.allocate(8), rt.allocate(8)
    ga, gb = rt.graph("a"), rt.graph("b")
    ga.compute("sleep-a", lambda r: r.dispatch(SLEEPY, 1, [a.slice(0, 4)], scalars=(100_000_000,)))
    gb.compute("sleep-b", lambda r: r.dispatch(SLEEPY, 1, [b.slice(0, 4)], scalars=(100_000_000,)))
    t0 = time.perf_counter()
    s1, s2 = rt.submit(ga), rt.submit(gb)
    s1.wait()
    s2.wait()
    assert time.perf_counter() - t0 >= 0.19  # independent graphs, one compute lane: serialized
    # an upload of independent bytes overlaps a busy compute lane
    gc = rt.graph("c")
    gc.compute("sleep-c", lambda r: r.dispatch(SLEEPY, 1, [a.slice(0, 4)], scalars=(1_000_000_000,)))
    gu = rt.graph("u")
    gu.upload(b, np.ones(8, np.uint8))
    sc = rt.submit(gc)
    t1 = time.perf_counter()
    rt.submit(gu).wait()
    assert time.perf_counter() - t1 < 0.6 and not sc.is_complete
    sc.wait()
    rt.close()


def test_max_submissions_blocks_or_raises(dev):
    rt = _rt(dev, max_submissions=2)
    bufs = [rt.allocate(8) for _ in range(3)]
    graphs = []
    for i, buf in enumerate(bufs):
        g = rt.graph(f"g{i}")
        g.compute("sleep", lambda r, buf=buf: r.dispatch(SLEEPY, 1, [buf.slice(0, 4)], scalars=(100_000_000,)))
        graphs.append(g)
    first = rt.submit(graphs[0])
    rt.submit(graphs[1])
    with pytest.raises(hrx.QueueFull):
        rt.submit(graphs[2], block=False)
    t0 = time.perf_counter()
    third = rt.submit(graphs[2])  # blocks until the first retires
    assert first.is_complete and time.perf_counter() - t0 > 0.02
    third.wait()
    with pytest.raises(hrx.InvalidArgument):
        RuntimeOptions(max_submissions=0)
    rt.close()


def test_room_comes_from_finished_work_on_any_lane(dev):
    """A full runtime makes room from whatever finished: the oldest submission first (a
    lane finishes in order), and a later one on another lane while the oldest runs."""
    rt = _rt(dev, max_submissions=2)
    a, b = rt.allocate(8), rt.allocate(8)
    slow = rt.graph("slow")
    slow.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [a.slice(0, 4)], scalars=(600_000_000,)))
    quick = rt.graph("quick")
    quick.upload(b, np.ones(8, np.uint8))
    head = rt.submit(slow)
    rt.submit(quick)
    rt.lane("upload").stream.synchronize()  # done, but not settled, and not the oldest
    assert len(rt._pending) == 2
    t0 = time.perf_counter()
    rt.submit(quick).wait(timeout=5)  # room from the finished upload, not from the sleeper
    assert time.perf_counter() - t0 < 0.4 and not head.is_complete
    head.wait()
    # one lane, many resubmissions of one graph: at most max_submissions in flight, each
    # place freed by settling the oldest
    x = rt.allocate(4)
    init = rt.graph("init")
    init.fill(x, 0)
    rt.submit(init).wait()
    inc = rt.graph("inc")
    inc.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=32, scalars=(1, 1)))
    for _ in range(40):
        rt.submit(inc)
        assert len(rt._pending) <= 2
    out = rt.graph("out")
    d = out.download(x)
    rt.submit(out).wait()
    assert d.read(np.uint32)[0] == 40
    rt.close()


@pytest.mark.parametrize("copy_engine", ["copy", "compute"])
def test_copy_engine_option_places_copy_only_regions(dev, copy_engine):
    rt = _rt(dev, copy_engine=copy_engine)
    x = rt.allocate(64)
    y = rt.allocate(64)
    g = rt.graph()
    f = g.fill(x, pattern=7)
    c = g.copyto(y, x)
    expect = "upload" if copy_engine == "copy" else "compute"
    assert f.lane == c.lane == expect and c.deps == (f.index,)
    d = g.download(y)
    rt.submit(g).wait()
    assert (d.read() == 7).all()
    with pytest.raises(hrx.InvalidArgument):
        RuntimeOptions(copy_engine="sdma-ish")
    rt.close()


def test_submission_is_awaitable(dev):
    rt = _rt(dev)
    x = rt.allocate(8)
    g = rt.graph()
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(50_000_000,)))
    d = g.download(x.slice(0, 4))

    async def main():
        sub = rt.submit(g)
        await sub
        return d.read(np.uint32)[0]

    assert asyncio.run(main()) == 1
    rt.close()


def test_timeout_keeps_work_alive_and_quarantines(dev, caplog):
    rt = _rt(dev)
    x = rt.allocate(8)
    g = rt.graph()
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(300_000_000,)))
    sub = rt.submit(g)
    with caplog.at_level("WARNING", logger="hrx.runtime"), pytest.raises(hrx.Timeout):
        sub.wait(timeout=0.01)
    (record,) = [r for r in caplog.records if r.name == "hrx.runtime"]  # the quarantine, logged once
    assert "quarantined 1 allocation(s)" in record.getMessage() and "timeout" in record.getMessage()
    assert rt.stats.snapshot()["quarantined_owners"] >= 1
    assert x._alloc.quarantined
    pool = dev.buffer_pool()
    assert rt.quarantined and "timeout" in rt.quarantined[0][1]
    sub.wait()
    rt.synchronize()
    assert rt.quarantined == [] and rt.stats.snapshot()["quarantined_owners"] == 0
    assert not x._alloc.quarantined
    pool.close()
    rt.close()


def test_budget_charges_runtime_memory(dev):
    budget = hrx.MemoryBudget(1 << 20)
    rt = _rt(dev, memory_budget=budget)
    x = rt.allocate(512 << 10)
    g = rt.graph()
    g.upload(x, np.zeros(512 << 10, np.uint8))  # staging: charged before allocation
    assert budget.used_bytes == 2 * (512 << 10)
    live = live_bytes(dev)
    with pytest.raises(hrx.BudgetExceeded):
        rt.allocate(1)
    assert live_bytes(dev) == live
    g.close()
    x.close()
    rt.close()
    assert budget.used_bytes == 0


def test_tracked_memory_stats_and_repr(dev):
    rt = _rt(dev)
    before = rt.stats.snapshot()["live_tracked_bytes"]
    x = rt.allocate(4096)
    assert rt.stats.snapshot()["live_tracked_bytes"] == before + 4096
    g = rt.graph()
    g.fill(x, pattern=1)
    rt.submit(g).wait()
    snap = rt.stats.snapshot()
    assert snap["submissions"] == 1 and snap["regions"] == 1
    assert snap["peak_tracked_bytes"] >= 4096
    g.close()
    del x
    import gc

    gc.collect()
    assert rt.stats.snapshot()["live_tracked_bytes"] == before
    assert "submissions" in repr(rt.stats)
    rt.close()


def test_scoped_native_work_orders_with_regions(dev):
    rt = _rt(dev)
    x = rt.allocate(16)
    g = rt.graph()
    g.fill(x, 0)

    def native(scope):
        if dev.kind == "host":
            host = x._alloc.native.host_view()
            scope.native.enqueue(lambda: time.sleep(0.05) or host.__setitem__(slice(0, 16), 9))
        else:
            torch = pytest.importorskip("torch")
            t = torch.from_dlpack(x)  # waits for pending HRX work on x first
            with torch.cuda.stream(torch.cuda.ExternalStream(scope.handle)):
                torch.cuda._sleep(50_000_000)
                t.fill_(9)

    s = g.gpu_scoped("native-fill", [x.binding().write()], native)
    d = g.download(x)
    assert d.deps == (s.index,)
    rt.submit(g).wait()
    assert (d.read() == 9).all()
    with pytest.raises(hrx.InvalidArgument):
        g.gpu_scoped("bad", [x], native)  # access must be declared
    rt.close()


def test_native_session_reserves_compute_lane_and_fences_errors(dev):
    rt = _rt(dev)
    x = rt.allocate(16)
    order = []
    g = rt.graph()
    g.compute("after-session", lambda r: r.dispatch(INC_BYTES, 1, [x], block=16, scalars=(16,)))

    def model(ns, buf):
        ns.stream.fill(buf, pattern=1)
        ns.progress(1, 2)
        time.sleep(0.1)  # another thread's compute region must wait for us
        order.append("session")
        ns.progress(2, 2)
        return "done"

    submitted = threading.Event()

    def other():
        submitted.set()
        rt.submit(g).wait()
        order.append("graph")

    steps = []
    with rt.native_session("model") as ns:
        t = threading.Thread(target=other)
        t.start()
        submitted.wait()
        assert ns.run(model, x, progress=lambda i, n: steps.append(i)) == "done"
    t.join()
    assert order == ["session", "graph"] and steps == [1, 2]
    d = rt.graph()
    down = d.download(x)
    rt.submit(d).wait()
    assert (down.read() == 2).all()
    # exceptions in the model and in callbacks are fenced; the runtime stays usable
    with rt.native_session() as ns:
        with pytest.raises(hrx.CallbackError) as info:
            ns.run(lambda ns_: 1 / 0)
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        with pytest.raises(hrx.CallbackError):
            ns.run(lambda ns_: ns_.progress(), progress=lambda: [][1])
    rt.submit(d).wait()
    with pytest.raises(hrx.InvalidArgument):
        rt.native_session().run(lambda ns_: None)  # not entered
    rt.close()


def test_trace_is_valid_perfetto_json(dev, tmp_path):
    from hrx_core.execution.trace import validate_trace

    rt = _rt(dev)
    n = 256
    x, y = rt.allocate(n * 4), rt.allocate(n * 4)
    g = rt.graph("traced")
    g.upload(x, np.arange(n, dtype=np.uint32))
    g.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=n, scalars=(1, n)))
    g.copyto(y, x)
    g.download(y)
    for _ in range(3):
        rt.submit(g).wait()
    time.sleep(0.05)  # completion callbacks run on the notifier thread
    path = tmp_path / "trace.json"
    rt.write_trace(str(path))
    data = json.loads(path.read_text())
    validate_trace(data)
    events = data["traceEvents"]
    names = {e["args"]["name"].split(" ")[0] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert {"upload", "compute", "download"} <= names
    assert sum(1 for e in events if e.get("ph") == "X") >= 12
    assert any(e.get("ph") == "s" for e in events) and any(e.get("ph") == "f" for e in events)
    assert any(e.get("ph") == "C" for e in events)
    prof = rt.profile.percentiles("add")
    assert prof["count"] == 3 and prof["p50"] > 0
    assert rt.stats.snapshot()["lane_busy_seconds"]["compute"] > 0
    rt.close()


def test_runtime_validates(dev):
    with pytest.raises(hrx.InvalidArgument):
        Runtime("cuda:0")  # type: ignore[arg-type]
    rt = _rt(dev)
    with pytest.raises(hrx.Unsupported):
        rt.lane("npu")
    with pytest.raises(hrx.InvalidArgument):
        rt.lane("dma")
    g = rt.graph()
    with pytest.raises(hrx.InvalidArgument):
        rt.submit(g)  # no regions
    x = rt.allocate(8)
    with pytest.raises(hrx.InvalidArgument):
        g.compute("nothing", lambda r: None)
    with pytest.raises(hrx.OutOfBounds):
        g.upload(x, np.zeros(9, np.uint8))
    other = rt.graph()
    r = other.fill(x, 0)
    with pytest.raises(hrx.InvalidArgument):
        g.fill(x, pattern=1, after=[r])
    rt.close()
    with pytest.raises(hrx.InvalidArgument):
        rt.submit(other)


def test_npu_lane_on_another_engine_orders_by_host_completion_checks():
    """Regions on two devices (an 'NPU' beside the compute device) order by hazards
    through host completion checks."""
    gpu = hrx.open_device("host")
    npu = hrx.open_device("host")
    rt = Runtime(gpu, RuntimeOptions(), npu=npu)
    assert rt.lane("npu").device is npu
    shared = npu.allocate(16)  # NPU-side storage both lanes touch in turn
    g = rt.graph()
    a = g.compute("npu-work", lambda r: r.dispatch(SLEEPY, 1, [shared.slice(0, 4)], scalars=(100_000_000,)), lane="npu")
    b = g.compute("npu-copy", lambda r: r.copyto(shared.slice(4, 4), shared.slice(0, 4)), lane="npu")
    assert b.deps == (a.index,)
    c = g.fill(rt.allocate(16), pattern=7)
    sub = rt.submit(g)
    sub.wait()
    d = rt.graph()
    out = d.compute("read", lambda r: r.copyto(shared.slice(8, 4), shared.slice(4, 4)), lane="npu")
    rt.submit(d).wait()
    assert out.lane == "npu" and c.lane == "upload"
    st = npu.stream()
    assert st.download(shared).view(np.uint32)[:3].tolist() == [1, 1, 1]
    # a compute-lane region that must follow an npu region (explicit dependency across
    # engines) waits on the host for it: the mixed-engine path
    local = rt.allocate(16)
    e = rt.graph()
    first = e.compute("npu-sleep", lambda r: r.dispatch(SLEEPY, 1, [shared.slice(12, 4)], scalars=(150_000_000,)), lane="npu")
    e.fill(local, pattern=5, after=[first])
    t0 = time.perf_counter()
    sub = rt.submit(e)
    assert time.perf_counter() - t0 >= 0.12  # the host check held the dependent region back
    sub.wait()
    assert (rt.lane("compute").stream.download(local) == 5).all()
    with pytest.raises(hrx.InvalidArgument):
        g.compute("x", lambda r: None, lane="upload")
    rt.close()


def test_inflight_reads_of_one_input_stay_bounded(dev):
    """Submissions in flight that read the same input on one lane keep one hazard entry
    for it (a later read on the same queue finishes after the earlier ones); a write
    still waits for the reads, and the results are those of serial execution."""
    from .kernels import XOR_BYTES

    rt = _rt(dev, max_submissions=32)
    flag, x, y = rt.allocate(16), rt.allocate(64), rt.allocate(64)
    g = rt.graph("reads x")
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(20_000_000,)))
    g.compute("xor", lambda r: r.dispatch(XOR_BYTES, 1, [x.binding().read(), y.binding().write()],
                                          block=64, scalars=(0xFF, 64)))
    subs = [rt.submit(g) for _ in range(20)]
    entries = rt._inflight._entries.get(id(x.allocation), [])
    assert 1 <= len(entries) <= 2, len(entries)  # not one per submission
    w = rt.graph("write x")
    w.upload(x, np.arange(64, dtype=np.uint8))  # another lane: must wait for every read
    sw = rt.submit(w)
    sw.wait()
    assert all(s.is_complete for s in subs)
    rt.synchronize()


class _RandomProgram:
    """The random resubmission tests' harness: ``nbuf`` buffers of ``n`` bytes and a
    model of their bytes, an upload and a download graph per buffer, and a loop that
    submits graphs chosen at random (often the same one again), applying each graph's
    steps to the model and checking downloads and the final bytes against it. Records
    which resubmissions skipped the hazard scan (by the submitted graph's region count):
    the Python path's calls of ``_Inflight.replace`` and the compiled resubmission's hits."""

    def __init__(self, dev, fast, monkeypatch, nbuf, seed):
        from hrx_core.execution import runtime as runtime_mod

        self.skipped = []
        self.regions = 0
        replace = runtime_mod._Inflight.replace
        monkeypatch.setattr(runtime_mod._Inflight, "replace",
                            lambda inflight, places, ev: (self.skipped.append(self.regions), replace(inflight, places, ev)))
        self.rt = rt = _rt(dev)
        rt.fast_resubmit = fast
        self.n = 64
        self.bufs = [rt.allocate(self.n) for _ in range(nbuf)]
        self.model = [np.zeros(self.n, np.uint8) for _ in range(nbuf)]
        self.init = rt.graph("init")
        for b in self.bufs:
            self.init.fill(b, 0)
        rt.submit(self.init).wait()
        self.grid, self.block = launch_1d(self.n)
        self.rng = np.random.default_rng(seed)

    def xor(self, g, i, j, key):
        _xor_region(g, self.bufs, i, j, key, self.n, name=f"xor{i}{j}")
        return "xor", (i, j, key)

    def inc(self, g, i):
        g.compute(f"inc{i}", lambda r: r.dispatch(INC_BYTES, self.grid, [self.bufs[i]], block=self.block, scalars=(self.n,)))
        return "inc", (i,)

    def step(self, kind, args):
        model = self.model
        if kind == "xor":
            i, j, key = args
            model[j] = model[i] ^ np.uint8(key)
        elif kind == "inc":
            model[args[0]] = model[args[0]] + np.uint8(1)
        elif kind == "copy":
            src, dst = args
            model[dst] = model[src].copy()
        elif kind == "up":
            i, up = args
            data = self.rng.integers(0, 256, self.n, dtype=np.uint8)
            up.write(data)  # waits for the region's previous submission
            model[i] = data

    def run(self, graphs, submissions, change):
        """Submit ``submissions`` graphs of ``graphs`` ((steps, graph) pairs; a step is
        (kind, args)), switching to another one with probability ``change``."""
        rt, rng = self.rt, self.rng
        for i, buf in enumerate(self.bufs):
            g = rt.graph(f"up{i}")
            graphs.append(([("up", (i, g.upload(buf, np.zeros(self.n, np.uint8))))], g))
            g = rt.graph(f"down{i}")
            graphs.append(([("down", (i, g.download(buf)))], g))
        everything = [self.init, *(g for _, g in graphs)]
        pending = []  # (download region, expected bytes)
        steps, g = graphs[0]
        for _ in range(submissions):
            if rng.random() < change:
                steps, g = graphs[rng.integers(len(graphs))]
            for step in steps:
                self.step(*step)
            self.regions = len(g.regions)
            compiled = g._fast_submit
            hits = compiled.hits if compiled else 0
            rt.submit(g)
            if compiled and compiled.hits > hits:
                self.skipped.append(1)  # the compiled resubmission (one region, no scan, entries re-pointed in C)
            # every access entry names some region's latest submission: a resubmission's
            # entries replace its previous ones (the slow path by the scan, the fast in place)
            lasts = {id(r.last) for x in everything for r in x.regions if r.last is not None}
            assert all(id(e[3]) in lasts for entries in rt._inflight._entries.values() for e in entries)
            if steps[0][0] == "down":
                i, down = steps[0][1]
                pending.append((down, self.model[i].copy()))
                if rng.random() < 0.5 or len(pending) > 3:
                    rt.synchronize()
                    for d, want in pending[-1:]:  # a download region keeps its latest bytes
                        np.testing.assert_array_equal(d.read(), want)
                    pending.clear()
        rt.synchronize()
        final = rt.graph("final")
        downs = [final.download(b) for b in self.bufs]
        rt.submit(final).wait()
        for d, want in zip(downs, self.model):
            np.testing.assert_array_equal(d.read(), want)
        rt.close()


@pytest.mark.parametrize("fast", [True, False], ids=["fast-resubmit", "full-scan"])
def test_random_resubmissions_match_serial_order(dev, fast, monkeypatch):
    """Random programs of single-region graphs over shared buffers -- xor copies (which
    may skip the hazard scan when resubmitted back to back), in-place increments (which
    read what they write: never skip it), uploads and downloads on their own lanes --
    give the results of running every submission in order, with and without the fast
    resubmission path; with it, the scan is skipped for some resubmissions."""
    p = _RandomProgram(dev, fast, monkeypatch, nbuf=4, seed=7)
    graphs = []
    for i in range(4):
        for j in range(4):
            if i != j:
                g = p.rt.graph(f"xor{i}{j}")
                graphs.append(([p.xor(g, i, j, 17 * i + 5 * j + 1)], g))
        g = p.rt.graph(f"inc{i}")
        graphs.append(([p.inc(g, i)], g))
    p.run(graphs, 150, 0.4)
    assert bool(p.skipped) == fast

def _xor_region(g, bufs, i, j, key, n, name="xor"):
    grid, block = launch_1d(n)
    return g.compute(name, lambda r: r.dispatch(XOR_BYTES, grid, [bufs[i], bufs[j]], block=block, scalars=(key, n)))


def test_independent_regions_resubmit_without_scans(dev, monkeypatch):
    """A graph of regions that neither depend on each other nor conflict -- a compute
    branch beside a copy on the upload lane, as a GPU branch beside an NPU one -- is
    resubmitted without hazard scans once its notes are re-dated; where a later region
    on another lane reads what an earlier one writes, the earlier one scans every time
    (its next write must wait for that read)."""
    from hrx_core.execution import runtime as runtime_mod

    scans = []
    conflicts = runtime_mod._Inflight.conflicts
    monkeypatch.setattr(runtime_mod._Inflight, "conflicts", lambda self, *a: (scans.append(1), conflicts(self, *a))[1])
    rt = _rt(dev)
    n = 64
    bufs = [rt.allocate(n) for _ in range(4)]
    init = rt.graph("init")
    for k, b in enumerate(bufs):
        init.fill(b, pattern=k + 1)
    rt.submit(init).wait()
    par = rt.graph("par")
    a = _xor_region(par, bufs, 0, 1, 0x5A, n)
    c = par.copyto(bufs[3], bufs[2])
    assert a.deps == c.deps == () and a.lane != c.lane
    assert par.submit_plan().redatable == (True, True)
    for k in range(6):
        scans.clear()
        rt.submit(par)
        assert len(scans) == (2 if k == 0 else 0), k
    rt.synchronize()  # (else the scan of w finds par's unfinished write of what it reads)
    dep = rt.graph("dep")
    w = _xor_region(dep, bufs, 1, 2, 0x33, n)
    r = dep.copyto(bufs[3], bufs[2])  # reads what w writes, on the upload lane
    assert r.deps == (w.index,)
    assert dep.submit_plan().redatable == (False, False)
    rt.submit(dep)
    for _ in range(3):
        scans.clear()
        rt.submit(dep)
        assert len(scans) == 2
    rt.synchronize()
    want1 = np.full(n, 1, np.uint8) ^ np.uint8(0x5A)
    want2 = want1 ^ np.uint8(0x33)
    d = rt.graph("check")
    outs = [d.download(b) for b in bufs]
    rt.submit(d).wait()
    for got, want in zip(outs, (np.full(n, 1, np.uint8), want1, want2, want2)):
        np.testing.assert_array_equal(got.read(), want)
    rt.close()


def test_redatable_rules():
    """Which regions' notes survive the records of the regions after them."""
    from types import SimpleNamespace

    from hrx_core.execution.graph import redatable

    x, y, z = object(), object(), object()

    def region(lane, reads=(), writes=(), deps=()):
        accesses = [(a, 0, 64, False) for a in reads] + [(a, 0, 64, True) for a in writes]
        return SimpleNamespace(lane=lane, deps=deps, accesses=accesses, reads=[(a, 0, 64) for a in reads])

    assert redatable([region("compute", [x], [y]), region("upload", [z], [z])]) == (True, True)  # independent
    assert redatable([region("compute", [x], [y]), region("upload", [x], [z])]) == (True, True)  # shared input
    # a later region on the same lane reads the output: its queue orders it
    assert redatable([region("compute", [x], [y]), region("compute", [y], [z], deps=(0,))]) == (True, False)
    # ... on another lane: the next write must wait for that read
    assert redatable([region("compute", [x], [y]), region("upload", [y], [z], deps=(0,))]) == (False, False)
    # a later region writes what it reads (a failure source), even on its lane
    assert redatable([region("compute", [x], [y]), region("compute", [], [x], deps=(0,))]) == (False, False)
    # a later region on another lane overwrites its output
    assert redatable([region("compute", [x], [y]), region("upload", [], [y], deps=(0,))]) == (False, False)
    # each region is judged against the ones after it; one with dependencies has no note
    w = object()
    assert redatable([region("compute", [x], [y]), region("upload", [z], [z]), region("npu", [x], [w])]) == (True, True, True)
    assert redatable([region("compute", [x], [y]), region("upload", [z], [z]),
                      region("npu", [z], [w], deps=(1,))]) == (True, False, False)


def test_same_lane_shared_input_drops_the_earlier_note(dev):
    """Two regions on one lane reading the same input: the later one's record replaces
    the earlier one's read entry (one queue: it finishes later), so the earlier one's
    note cannot be re-dated (its entry is gone) and it scans again -- with the right
    results."""
    rt = _rt(dev)
    n = 64
    bufs = [rt.allocate(n) for _ in range(3)]
    init = rt.graph("init")
    init.fill(bufs[0], pattern=9)
    rt.submit(init).wait()
    g = rt.graph("two-readers")
    a = _xor_region(g, bufs, 0, 1, 0x0F, n)
    b = _xor_region(g, bufs, 0, 2, 0xF0, n)
    assert g.submit_plan().redatable == (True, True)
    for _ in range(3):
        rt.submit(g)
        assert a.resubmit is None and b.resubmit is not None
    d = rt.graph("check")
    outs = [d.download(bufs[1]), d.download(bufs[2])]
    rt.submit(d).wait()
    np.testing.assert_array_equal(outs[0].read(), np.full(n, 9 ^ 0x0F, np.uint8))
    np.testing.assert_array_equal(outs[1].read(), np.full(n, 9 ^ 0xF0, np.uint8))
    rt.close()


@pytest.mark.parametrize("fast", [True, False], ids=["fast-resubmit", "full-scan"])
def test_random_multi_region_resubmissions_match_serial_order(dev, fast, monkeypatch):
    """Random programs of graphs of two or three regions over shared buffers -- xor
    copies and increments on the compute lane, copies on the upload lane, independent
    or dependent on each other, chosen at random -- interleaved with uploads and
    downloads, give the results of running every region in order, with and without
    the fast resubmission path; with it, regions of several-region graphs skip their
    scans."""
    nbuf = 5
    p = _RandomProgram(dev, fast, monkeypatch, nbuf=nbuf, seed=11)
    rng = p.rng

    def random_region(g):
        kind = rng.integers(3)
        i, j = (int(x) for x in rng.choice(nbuf, 2, replace=False))
        if kind == 0:
            return p.xor(g, i, j, int(rng.integers(1, 256)))
        if kind == 1:
            return p.inc(g, i)
        g.copyto(p.bufs[j], p.bufs[i], name=f"copy{i}{j}")
        return "copy", (i, j)

    graphs = []
    g = p.rt.graph("parallel")  # at least one graph of independent regions on two lanes
    steps = [p.xor(g, 0, 1, 0x21)]
    g.copyto(p.bufs[3], p.bufs[2])
    graphs.append((steps + [("copy", (2, 3))], g))
    for k in range(24):
        g = p.rt.graph(f"multi{k}")
        graphs.append(([random_region(g) for _ in range(int(rng.integers(2, 4)))], g))
    p.run(graphs, 300, 0.3)
    assert any(k > 1 for k in p.skipped) == fast
