"""The cuda engine against raw CUDA, cuda-bindings, CuPy and PyTorch, in one run.

    python bench/gpu.py [--reps 9] [--only launch|graph|graph_allocs|transfer|d2d|memops[,...]]

Writes ids cuda.* into bench/results/h200.json (or --out). Every HRX figure is
measured alternately with its peer in the same process; values are medians of
``--reps`` rounds. Host costs are timed with host clocks around the issuing loop
(work drained between rounds); bandwidths with host clocks around blocking calls.

The launch and graph figures depend on the cuda engine's compiled hot path
(hrx_gpu.cuda.hot; ``HRX_HOT_PATH=0`` measures the Python fallback): their entries
carry ``hot_path`` (``{"compiled", "reason", "path"}``) and a ``note`` saying which ran.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hrx_core as hrx  # noqa: E402
from results_file import entry, idle_per_call, machine_file, report, rounds, write  # noqa: E402

CMD = "python bench/gpu.py"
EMPTY_SRC = 'extern "C" __global__ void empty() {}'
TOUCH_SRC = 'extern "C" __global__ void touch(unsigned int* p, unsigned int v) { if (threadIdx.x == 0 && v == 0xffffffffu) p[0] = v; }'
EMPTY = hrx.Kernel("empty", buffers=0, cuda=EMPTY_SRC)
TOUCH = hrx.Kernel("touch", buffers=("read_write",), scalars=(np.uint32,), cuda=TOUCH_SRC)
THREE_SRC = ('extern "C" __global__ void touch3(const unsigned int* a, const unsigned int* b, unsigned int* c, unsigned int v)'
             ' { if (threadIdx.x == 0 && v == 0xffffffffu) c[0] = a[0] + b[0]; }')
THREE = hrx.Kernel("touch3", buffers=("read", "read", "write"), scalars=(np.uint32,), cuda=THREE_SRC)


def hot_path_status() -> dict:
    """Whether the cuda engine's compiled hot path is in use (built on first use)."""
    try:
        from hrx_core import hotpath
        from hrx_gpu.cuda import hot

        state = dict(hot.status())
        if not hotpath.enabled():
            state["compiled"] = False
        return state
    except Exception as exc:  # noqa: BLE001 - the figure is still worth writing
        return {"compiled": False, "reason": f"{type(exc).__name__}: {exc}", "path": None}


def with_hot_path(entries: list[dict]) -> list[dict]:
    """Mark launch/graph entries with the hot path that produced them."""
    from hrx_core import fastpath

    state = hot_path_status()
    note = "compiled hot path" if state["compiled"] else f"Python fallback (hot path: {state['reason']})"
    core = fastpath.status()
    note += "; compiled core replay" if core["compiled"] else f"; Python core replay ({core['reason']})"
    for e in entries:
        e["hot_path"] = state
        e["core_replay"] = core["compiled"]
        e["note"] = note if not e.get("note") else f"{e['note']}; {note}"
    return entries


class Ctx:
    def __init__(self) -> None:
        self.dev = hrx.device("cuda")
        self.nd = self.dev.native
        self.ffi, self.lib = self.nd.driver.ffi, self.nd.driver.lib
        self.s = self.dev.stream()
        self.q = self.s.native_queue()
        self.cu_stream = self.q.stream
        self.check = self.nd.driver.check if hasattr(self.nd.driver, "check") else None

    def sync_raw(self) -> None:
        self.lib.cuStreamSynchronize(self.cu_stream)


def bench_launch(c: Ctx, reps: int, n: int = 4000) -> list[dict]:
    s, lib, ffi = c.s, c.lib, c.ffi
    exe = EMPTY.executable(c.dev)
    func, stream, null = exe.function, c.cu_stream, ffi.NULL
    launch = lib.cuLaunchKernel
    prepared = s.prepare(EMPTY, 1, [])

    def timed(loop, sync):
        def run():
            sync()
            t = time.perf_counter()
            loop()
            dt = (time.perf_counter() - t) / n * 1e6
            sync()
            return dt
        return run

    def raw_loop():
        for _ in range(n):
            launch(func, 1, 1, 1, 1, 1, 1, 0, stream, null, null)

    def prep_loop():
        p = prepared.launch
        for _ in range(n):
            p()

    def disp_loop():
        d = s.dispatch
        for _ in range(n):
            d(EMPTY, 1, [])

    # three buffers and a scalar: the raw peer launches prepacked cells, HRX validates
    # and packs them per call (whole buffers: the compiled dispatch's case)
    bufs3 = [c.dev.allocate(256) for _ in range(3)]
    touch3 = THREE.executable(c.dev).function
    cells3 = [ffi.new("unsigned long long *", b.allocation.native.dptr) for b in bufs3] + [ffi.new("unsigned int *", 0)]
    params3 = ffi.new("void *[]", cells3)

    def raw3_loop():
        for _ in range(n):
            launch(touch3, 1, 1, 1, 32, 1, 1, 0, stream, params3, null)

    def disp3_loop():
        d = s.dispatch
        for _ in range(n):
            d(THREE, 1, bufs3, block=32, scalars=(0,))

    fns = [timed(raw_loop, c.sync_raw), timed(prep_loop, s.synchronize), timed(disp_loop, s.synchronize),
           timed(raw3_loop, c.sync_raw), timed(disp3_loop, s.synchronize)]
    names = ["raw", "prepared", "dispatch", "raw3", "dispatch3"]
    try:
        from cuda.bindings import driver as cbd

        cb_func = cbd.CUfunction(int(ffi.cast("uintptr_t", func)))
        cb_stream = cbd.CUstream(int(ffi.cast("uintptr_t", stream)))
        err, = cbd.cuLaunchKernel(cb_func, 1, 1, 1, 1, 1, 1, 0, cb_stream, 0, 0)[:1]

        def cb_loop():
            f = cbd.cuLaunchKernel
            for _ in range(n):
                f(cb_func, 1, 1, 1, 1, 1, 1, 0, cb_stream, 0, 0)

        fns.append(timed(cb_loop, c.sync_raw))
        names.append("cuda-bindings")
    except Exception as exc:  # peer missing: say so, measure the rest
        print(f"cuda-bindings peer unavailable: {exc}")
    try:
        import cupy

        rk = cupy.RawKernel(EMPTY_SRC, "empty")
        rk((1,), (1,), ())
        cupy.cuda.Stream.null.synchronize()

        def cupy_loop():
            for _ in range(n):
                rk((1,), (1,), ())

        fns.append(timed(cupy_loop, cupy.cuda.Stream.null.synchronize))
        names.append("cupy")
    except Exception as exc:
        print(f"cupy peer unavailable: {exc}")
    try:
        import torch

        x = torch.zeros(1, device="cuda")

        def torch_loop():
            for _ in range(n):
                x.add_(1)

        fns.append(timed(torch_loop, torch.cuda.synchronize))
        names.append("torch")
    except Exception as exc:
        print(f"torch peer unavailable: {exc}")
    for fn in fns:
        fn()  # warm-up
    med = dict(zip(names, rounds(fns, reps)))
    out = [
        entry("cuda.launch.prepared", "prepared launch (PreparedLaunch.launch) of an empty kernel, host cost per call", "us",
              med["prepared"], peer="raw cffi cuLaunchKernel", peer_value=med["raw"], goal="<= 1.15", command=CMD),
        entry("cuda.dispatch.empty", "eager stream.dispatch of an empty kernel (validation, bookkeeping, packing per call)", "us",
              med["dispatch"], peer="raw cffi cuLaunchKernel", peer_value=med["raw"], goal="<= 1.3", command=CMD),
        entry("cuda.dispatch.bufs3", "eager stream.dispatch of a kernel of 3 whole buffers and a scalar (validation, "
              "hazard notes, retention, packing per call)", "us",
              med["dispatch3"], peer="raw cffi cuLaunchKernel of the same kernel, arguments prepacked", peer_value=med["raw3"],
              command=CMD),
    ]
    if "cupy" in med:
        out.append(entry("cuda.launch.prepared_vs_cupy", "prepared launch of an empty kernel vs CuPy RawKernel call", "us",
                         med["prepared"], peer="CuPy RawKernel", peer_value=med["cupy"], goal="<= 1.0", command=CMD))
    if "torch" in med:
        out.append(entry("cuda.launch.prepared_vs_torch", "prepared launch of an empty kernel vs a torch op (x.add_(1))", "us",
                         med["prepared"], peer="torch add_ on a 1-element CUDA tensor", peer_value=med["torch"], goal="<= 1.0", command=CMD))
    if "cuda-bindings" in med:
        out.append(entry("cuda.launch.prepared_vs_cuda_bindings", "prepared launch of an empty kernel vs cuda-bindings cuLaunchKernel", "us",
                         med["prepared"], peer="cuda.bindings.driver.cuLaunchKernel", peer_value=med["cuda-bindings"], command=CMD))
    print("launch medians (us):", {k: round(v, 3) for k, v in med.items()})
    return with_hot_path(out)


def idle_launch_cost(c: Ctx, fn, n: int):
    """A round of ``n`` calls ``fn(i)``, each timed on its own with the GPU idle
    (synchronized before it), so that a queue full of earlier work never throttles
    the issuing thread; returns the mean host cost in us."""
    def run():
        us = idle_per_call(fn, c.sync_raw, n)
        c.sync_raw()
        c.s.synchronize()
        return us
    return run


def bench_graph(c: Ctx, reps: int, nodes: int = 100, n: int = 200) -> list[dict]:
    """Host cost of one launch with the GPU idle (synchronized before each launch), so
    that a queue full of earlier replays never throttles the issuing thread."""
    from hrx_core.engine import GraphNode

    s, dev, lib = c.s, c.dev, c.lib
    scratch = dev.allocate(256)
    inputs = [[dev.allocate(256) for _ in range(3)] for _ in range(2)]
    g = s.graph()
    for name, buf in zip("abc", inputs[0]):
        g.input(name, buf)
    prev = []
    for i in range(nodes):
        buf = inputs[0][i] if i < 3 else scratch
        prev = [g.dispatch(TOUCH, 1, [buf], block=32, scalars=(i,), deps=prev)]
    g.launch().wait()
    native = g._native
    exec_ = native._exec
    launch, stream = lib.cuGraphLaunch, c.cu_stream
    sets = [{n_: b for n_, b in zip("abc", inputs[k])} for k in range(2)]
    # raw peer with rebinding: prebuilt CUDA_KERNEL_NODE_PARAMS, 3 cuGraphExecKernelNodeSetParams + launch
    # (native node i is recorded node i here: a dispatch is one kernel node)
    raw_params = []
    for k in range(2):
        per = []
        for i in range(3):
            params = dict(native.nodes[i].params)
            first, *rest = params["args"]
            assert first.buffer is inputs[0][i].allocation.native, "native node order"
            params["args"] = [first._replace(buffer=inputs[k][i].allocation.native), *rest]
            per.append(native._kernel_node_params("kernel", GraphNode("dispatch", native.nodes[i].deps, params).params))
        raw_params.append(per)
    handles = [native._handles[i] for i in range(3)]
    set_params = lib.cuGraphExecKernelNodeSetParams_v2

    def per_launch(fn):
        return idle_launch_cost(c, fn, n)

    def raw(i):
        launch(exec_, stream)

    def raw_rebind(i):
        for h, (p, _keep) in zip(handles, raw_params[i & 1]):
            set_params(exec_, h, p)
        launch(exec_, stream)

    def hrx_plain(i):
        g.launch()

    def hrx_rebind(i):
        g.launch(inputs=sets[i & 1])

    fns = [per_launch(f) for f in (raw, hrx_plain, raw_rebind, hrx_rebind)]
    for fn in fns:
        fn()
    r, plain, rr, rebind = rounds(fns, reps)
    assert native is g._native and native.rebuilds == 0, "graph was rebuilt"
    print(f"graph medians (us): raw {r:.2f} hrx {plain:.2f} raw+3 updates {rr:.2f} hrx rebind3 {rebind:.2f}")
    return with_hot_path([
        entry("cuda.graph.replay100", f"replay of a {nodes}-node recorded graph (one CUDA graph), host cost per launch, GPU idle", "us",
              plain, peer="raw cffi cuGraphLaunch of the same CUDA graph", peer_value=r, goal="<= 1.1", command=CMD),
        entry("cuda.graph.replay100_rebind3", f"replay of the {nodes}-node graph with 3 inputs rebound on every replay (patched, not re-instantiated)", "us",
              rebind, peer="raw cffi cuGraphLaunch of the same CUDA graph", peer_value=r, goal="<= 1.3", command=CMD),
        entry("cuda.graph.replay100_rebind3_vs_raw_update", "the same rebinding replay against the driver's own cost of it", "us",
              rebind, peer="raw cffi 3x cuGraphExecKernelNodeSetParams (prebuilt params) + cuGraphLaunch", peer_value=rr, command=CMD),
        entry("cuda.graph.replay100_rebind3_vs_raw_rebind", f"replay of the {nodes}-node graph with 3 inputs rebound on every replay, against the raw rebind", "us",
              rebind, peer="raw cffi 3x cuGraphExecKernelNodeSetParams (prebuilt params) + cuGraphLaunch", peer_value=rr, goal="<= 1.2", command=CMD),
    ])


ALLOC_COUNTS = (1, 2, 4, 8, 16, 32, 64)


def bench_graph_allocs(c: Ctx, reps: int, nodes: int = 100, n: int = 200) -> list[dict]:
    """Host cost of replaying a 100-node graph whose kernel nodes bind 1..64 distinct
    allocations (node i binds allocation i mod N): the same CUDA graph shape every
    time, so only per-allocation bookkeeping can make the cost grow with N."""
    s, dev, lib = c.s, c.dev, c.lib
    launch, stream = lib.cuGraphLaunch, c.cu_stream
    graphs = []
    for count in ALLOC_COUNTS:
        bufs = [dev.allocate(256) for _ in range(count)]
        g = s.graph()
        prev = []
        for i in range(nodes):
            prev = [g.dispatch(TOUCH, 1, [bufs[i % count]], block=32, scalars=(i,), deps=prev)]
        g.launch().wait()
        graphs.append((count, g, bufs, g._native._exec))

    fns = []
    for _count, g, _bufs, exec_ in graphs:
        fns.append(idle_launch_cost(c, lambda i, g=g: g.launch(), n))
        fns.append(idle_launch_cost(c, lambda i, exec_=exec_: launch(exec_, stream), n))
    for fn in fns:
        fn()
    med = rounds(fns, reps)
    hrx_us = {count: med[2 * k] for k, (count, *_rest) in enumerate(graphs)}
    raw_us = {count: med[2 * k + 1] for k, (count, *_rest) in enumerate(graphs)}
    print("graph replay by bound allocations (us):", {k: (round(hrx_us[k], 2), round(raw_us[k], 2)) for k in ALLOC_COUNTS})
    out = [
        entry(f"cuda.graph.replay_allocs.{count}", f"replay of a {nodes}-node graph binding {count} distinct allocation(s), host cost per launch, GPU idle", "us",
              hrx_us[count], peer="raw cffi cuGraphLaunch of the same CUDA graph", peer_value=raw_us[count], command=CMD)
        for count in ALLOC_COUNTS
    ]
    worst = max(ALLOC_COUNTS, key=lambda k: hrx_us[k])
    best = min(ALLOC_COUNTS, key=lambda k: hrx_us[k])
    summary = entry("cuda.graph.replay_allocs.max_over_min", f"flatness of the sweep: the costliest replay ({worst} allocations) over the cheapest ({best})", "us",
                    hrx_us[worst], peer=f"the same sweep's cheapest point ({best} allocation(s))", peer_value=hrx_us[best], goal="<= 1.2", command=CMD)
    for _count, g, bufs, _exec in graphs:
        g.close()
    return with_hot_path([*out, summary])


def _mt_copy(pool: ThreadPoolExecutor, threads: int, dst: np.ndarray, src: np.ndarray) -> None:
    n = dst.nbytes
    step = -(-n // threads)
    step += -step % 4096
    list(pool.map(lambda o: np.copyto(dst[o:o + step], src[o:o + step]), range(0, n, step)))


def bench_transfer(c: Ctx, reps: int, nbytes: int = 1 << 30) -> list[dict]:
    import torch

    s, dev, lib = c.s, c.dev, c.lib
    gb = nbytes / 1e9
    rng = np.random.default_rng(0)
    pageable = rng.integers(0, 256, nbytes, dtype=np.uint8)
    back = np.empty_like(pageable)
    back[:] = 1
    dbuf = dev.allocate(nbytes)
    pinned = dev.allocate_shared(nbytes)
    with pinned.map("write") as host:
        host[:] = pageable
        pinned_host = host
    threads = int(os.environ.get("HRX_STAGING_THREADS", "0")) or max(1, min(8, (os.cpu_count() or 2) - 1))
    pool = ThreadPoolExecutor(threads)
    t_dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    t_src = torch.from_numpy(pageable)
    t_back = torch.from_numpy(back)
    dptr = dbuf.allocation.native.pointer()
    pinned_ptr = pinned.allocation.native.pointer()

    def bw(fn):
        def run():
            t = time.perf_counter()
            fn()
            return gb / (time.perf_counter() - t)
        return run

    memcpy_in = bw(lambda: _mt_copy(pool, threads, pinned_host, pageable))
    memcpy_out = bw(lambda: _mt_copy(pool, threads, back, pinned_host))
    hrx_up = bw(lambda: s.upload_blocking(dbuf, pageable))
    hrx_down = bw(lambda: s.download(dbuf, out=back))

    def torch_up_fn():
        t_dev.copy_(t_src)
        torch.cuda.synchronize()

    def torch_down_fn():
        t_back.copy_(t_dev)
        torch.cuda.synchronize()

    torch_up, torch_down = bw(torch_up_fn), bw(torch_down_fn)
    hrx_pin_up = bw(lambda: s.copyto(dbuf, pinned).wait())
    hrx_pin_down = bw(lambda: s.copyto(pinned, dbuf).wait())

    def raw_h2d():
        lib.cuMemcpyAsync(dptr, pinned_ptr, nbytes, c.cu_stream)
        c.sync_raw()

    def raw_d2h():
        lib.cuMemcpyAsync(pinned_ptr, dptr, nbytes, c.cu_stream)
        c.sync_raw()

    raw_up, raw_down = bw(raw_h2d), bw(raw_d2h)
    fns = [memcpy_in, hrx_up, torch_up, memcpy_out, hrx_down, torch_down, raw_up, hrx_pin_up, raw_down, hrx_pin_down]
    for fn in fns:
        fn()
    (m_in, h_up, t_up, m_out, h_down, t_down, r_up, hp_up, r_down, hp_down) = rounds(fns, reps)
    s.upload_blocking(dbuf, pageable)
    assert np.array_equal(s.download(dbuf), pageable), "round trip mismatch"
    print(f"transfer medians (GB/s): memcpy-in {m_in:.1f} hrx-up {h_up:.1f} torch-up {t_up:.1f} memcpy-out {m_out:.1f} "
          f"hrx-down {h_down:.1f} torch-down {t_down:.1f} raw-h2d {r_up:.1f} hrx-pinned-up {hp_up:.1f} raw-d2h {r_down:.1f} hrx-pinned-down {hp_down:.1f}")
    w = f" ({threads} threads)"
    return [
        entry("cuda.upload.pageable_1gib_vs_memcpy", "upload_blocking of 1 GiB from pageable numpy memory", "GB/s", h_up,
              peer="multi-threaded numpy copy of 1 GiB into pinned memory" + w, peer_value=m_in, goal=">= 0.85", command=CMD),
        entry("cuda.upload.pageable_1gib_vs_torch", "upload_blocking of 1 GiB from pageable numpy memory", "GB/s", h_up,
              peer="torch cuda_tensor.copy_(pageable cpu tensor)", peer_value=t_up, goal=">= 3.0", command=CMD),
        entry("cuda.download.pageable_1gib_vs_memcpy", "download of 1 GiB into pageable numpy memory", "GB/s", h_down,
              peer="multi-threaded numpy copy of 1 GiB out of pinned memory" + w, peer_value=m_out, goal=">= 0.85", command=CMD),
        entry("cuda.download.pageable_1gib_vs_torch", "download of 1 GiB into pageable numpy memory", "GB/s", h_down,
              peer="torch pageable_cpu_tensor.copy_(cuda tensor)", peer_value=t_down, goal=">= 1.5", command=CMD),
        entry("cuda.upload.pinned_1gib", "stream.copy of 1 GiB from allocate_shared (pinned) memory to device memory", "GB/s", hp_up,
              peer="raw cffi cuMemcpyAsync pinned->device + sync", peer_value=r_up, goal=">= 0.95", command=CMD),
        entry("cuda.download.pinned_1gib", "stream.copy of 1 GiB from device memory to allocate_shared (pinned) memory", "GB/s", hp_down,
              peer="raw cffi cuMemcpyAsync device->pinned + sync", peer_value=r_down, goal=">= 0.95", command=CMD),
    ]


def bench_d2d(c: Ctx, reps: int, nbytes: int = 2 << 30) -> list[dict]:
    import torch

    s, dev = c.s, c.dev
    a, b = dev.allocate(nbytes), dev.allocate(nbytes)
    s.fill(a, pattern=7).wait()
    ta = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    tb = torch.empty_like(ta)
    tb.fill_(3)
    tbytes = 2 * nbytes / 1e12  # read + write

    def hrx_copy():
        s.synchronize()
        t = time.perf_counter()
        s.copyto(b, a).wait()
        return tbytes / (time.perf_counter() - t)

    def torch_copy():
        torch.cuda.synchronize()
        t = time.perf_counter()
        ta.copy_(tb)
        torch.cuda.synchronize()
        return tbytes / (time.perf_counter() - t)

    hrx_copy(), torch_copy()
    h, t = rounds([hrx_copy, torch_copy], reps)
    print(f"d2d medians (TB/s, read+write): hrx {h:.3f} torch {t:.3f}")
    return [entry("cuda.copy.d2d_2gib", "stream.copy of 2 GiB device to device (read+write bytes)", "TB/s", h,
                  peer="torch copy_ of 2 GiB", peer_value=t, goal=">= 0.97", command=CMD)]


def bench_memops(c: Ctx, reps: int, n: int = 2000) -> list[dict]:
    slot = c.s.slot
    tl = slot.timeline

    def signals():
        t = time.perf_counter()
        for _ in range(n):
            slot.native.signal(tl, slot.pending_value)
        dt = (time.perf_counter() - t) / n * 1e6
        c.s.synchronize()
        return dt

    signals()
    (v,) = rounds([signals], reps)
    return [entry("cuda.timeline.signal", "encoding one timeline signal (cuStreamWriteValue64), host cost", "us", v, command=CMD)]


def machine(c: Ctx) -> str:
    info = c.dev.info
    drv = info.properties.get("driver_version", "?")
    return f"{info.name}, driver {drv}, {os.cpu_count()} cores"


PARTS = ("launch", "graph", "graph_allocs", "transfer", "d2d", "memops")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--out", default=None, help="results file (default: named for this machine's GPU, e.g. h200.json)")
    ap.add_argument("--only", default=None, help="comma-separated parts to run (default: all): " + ", ".join(PARTS)
                    + "; parts in one process see the same host state (graph,graph_allocs)")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else set(PARTS)
    if only - set(PARTS):
        ap.error(f"--only: unknown part(s) {', '.join(sorted(only - set(PARTS)))}; choose from {', '.join(PARTS)}")
    c = Ctx()
    results: list[dict] = []
    failed = False
    for name, fn in (("launch", bench_launch), ("graph", bench_graph), ("graph_allocs", bench_graph_allocs),
                     ("transfer", bench_transfer), ("d2d", bench_d2d), ("memops", bench_memops)):
        if name not in only:
            continue
        try:
            results += fn(c, args.reps)
        except Exception:
            failed = True
            print(f"--- {name} failed ---")
            traceback.print_exc()
    report(results)
    path = write(args.out or machine_file(c.dev), machine(c), results)
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/gpu.py", main))
