"""hrx_tensor against its peers, in one process: linear, linear_many, gather_rows.

    python bench/tensor.py [--reps 7] [--engine cuda|host] [--only base|sweep]

On cuda (ids tensor.cuda.*, bench/results/h200.json): effective weight bandwidth of
``TensorOps.linear`` (BF16 [1,K] x [N,K]; weights rotated across enough buffers
that no call is served from L2) against torch ``F.linear`` and against the D2D copy
bandwidth measured in the same run; a recorded graph of linear fragments against a
torch CUDA graph; linear_many against three linears and against one linear over the
summed weights; gather_rows against ``index_select``; and the GEMV sweep (ids
tensor.cuda.sweep.*): K and N each over {1024, 1536, 2048, 2560, 4096, 6144, 8192,
12288, 16384} crossed, pairs under 4 MiB of weights skipped, each shape eager and as
a graph against torch (``F.linear`` eager, and a CUDA graph of the same calls), and
against the D2D copy bandwidth of the same run where the weights are >= 128 MiB;
the worst shape of each is reported (``tensor.cuda.sweep.worst_*``). The sweep's
weights are made on the device by torch and wrapped for HRX (both read the same
bytes), rotated over >= 128 MiB per shape. On the host (ids
tensor.host.*, bench/results/host-2core.json): linear against numpy matvec over
weights pre-converted to float32, gather_rows against numpy take. Every figure
alternates HRX and peer rounds; values are medians; GPU work is timed with host
clocks around a loop of calls closed by a synchronization (compilation and first
touch excluded by warm-up).

``*.host_us`` entries (both engines) are the host CPU time of one eager call: the
issuing thread's CPU time (``time.thread_time``) over batches of calls, each result
closed, with a synchronization between batches that is not counted -- what a call
costs the host whatever the device does meanwhile (on cuda, against torch's own
per-call host time for the same operation).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

# OpenBLAS (numpy's matvec: the host linear's peer) keeps its worker threads spinning for
# about 0.1 s after each call; on a 2-core machine that takes a core from the HRX round
# that follows. Measured here: the host linear 4096x4096 at 1593-2487 us with the spin,
# 1100 us without; numpy's own time unchanged (1288-1326 us). Workers that sleep at once,
# as HRX's do (set before numpy loads OpenBLAS; an explicit setting wins):
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402
from ml_dtypes import bfloat16  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hrx_core as hrx  # noqa: E402
from results_file import d2d_bandwidth, entry, machine_file, report, rounds, write  # noqa: E402

from hrx_tensor import TensorOps  # noqa: E402

CMD = "python bench/tensor.py"
#: Linear shapes as (K, N): y[1, N] = x[1, K] @ w[N, K].T
SHAPES = [(4096, 4096), (8192, 8192), (8192, 28672), (16384, 16384)]
ROTATE_BYTES = 768 << 20  # weights cycled per shape: well beyond any L2
#: The GEMV sweep (issue 18): K and N each over these, pairs under SWEEP_MIN_BYTES skipped.
#: Untimed calls at the start of each host round, HRX's and numpy's alike: on a small
#: VM the first calls after the other side's round run up to 2.5x slower (threads woken
#: from idle, OpenBLAS's spinning workers), whichever side ran before.
WARM_CALLS = 2
SWEEP_DIMS = (1024, 1536, 2048, 2560, 4096, 6144, 8192, 12288, 16384)
SWEEP_MIN_BYTES = 4 << 20
#: Weights a sweep shape rotates over (an H200's L2 is 50 MiB), and bytes a measurement reads.
SWEEP_ROTATE_BYTES = 128 << 20
#: 16 GiB: ~4 ms of GPU time a timing. At 4 GiB (~1 ms; 4 replays of the largest
#: shapes' graphs) the costs of starting and ending a timing -- the first launch's
#: latency, the final wait -- weighed 3-5% there: on the H200 16384x16384's graph ran at
#: 0.922x torch's in the sweep while 64 replays back to back ran at 0.969x
#: (bench/tools/graph_timeline.py --wall: 260.8 against 252.7 us a replay).
SWEEP_MEASURE_BYTES = 16 << 30
#: Weights from which the linear is compared with the D2D copy bandwidth.
VS_COPY_BYTES = 128 << 20


def rand_bf16(rng, shape, scale=0.05):
    return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(bfloat16)


def host_cost(fn, sync, calls: int = 2000, batch: int = 50) -> float:
    """Host CPU microseconds per call of ``fn``: the calling thread's CPU time over
    ``calls`` calls in batches of ``batch``, with ``sync()`` between batches (not
    counted, so queued device work never inflates it); after a warm-up batch."""
    for _ in range(batch):
        fn()
    sync()
    spent, done = 0.0, 0
    while done < calls:
        t0 = time.thread_time()
        for _ in range(batch):
            fn()
        spent += time.thread_time() - t0
        sync()
        done += batch
    return spent / done * 1e6


# -- cuda ---------------------------------------------------------------------------


def cuda_bench(reps: int, only: str | None = None) -> list[dict]:
    import torch
    import torch.nn.functional as F

    dev = hrx.device("cuda")
    ops = TensorOps(dev)
    s = ops.stream
    out: list[dict] = []
    rng = np.random.default_rng(0)

    copy_bw = d2d_bandwidth(dev, reps)  # D2D copy bandwidth (read + write bytes), 1 GiB
    out.append(entry("tensor.cuda.d2d_copy", "D2D copy of 1 GiB in this run (read+write bytes)", "TB/s", copy_bw, command=CMD))
    if only != "base":
        out.extend(cuda_sweep(ops, dev, copy_bw, reps))
    if only == "sweep":
        return out

    def rotation(k, nrows):
        wbytes = k * nrows * 2
        count = max(2, math.ceil(ROTATE_BYTES / wbytes))
        host = rand_bf16(rng, (nrows, k))
        ws = [ops.upload(host) for _ in range(count)]
        tw = [torch.from_numpy(host.view(np.int16)).cuda().view(torch.bfloat16) for _ in range(count)]
        return host, ws, tw, wbytes

    for k, nrows in SHAPES:
        x_host = rand_bf16(rng, (1, k), 1.0)
        x = ops.upload(x_host)
        tx = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)
        host, ws, tw, wbytes = rotation(k, nrows)
        iters = max(20, min(400, int(4e9 // wbytes)))
        hrx_eager, torch_eager = eager_rates(ops, x, ws, tx, tw, wbytes, iters)
        hrx_eager(), torch_eager()
        h, t = rounds([hrx_eager, torch_eager], reps)
        shape = f"{k}x{nrows}"
        out.append(entry(f"tensor.cuda.linear.{shape}", f"linear BF16 [1,{k}]x[{nrows},{k}] eager, weight bandwidth", "TB/s", h,
                         peer="torch F.linear (eager)", peer_value=t, goal=">= 1.0", command=CMD))
        if wbytes >= 128 << 20:
            out.append(entry(f"tensor.cuda.linear_vs_copy.{shape}", f"linear {shape} weight bandwidth vs D2D copy in this run", "TB/s", h,
                             peer="D2D copy (same run)", peer_value=copy_bw, goal=">= 0.92", command=CMD))
        try:
            out.extend(graph_pair(ops, dev, x, ws, tx, tw, wbytes, shape, reps))
        except Exception:  # noqa: BLE001 - report and keep the other figures
            traceback.print_exc()
        for w in ws:
            w.close()
        tw = []  # free the rotation before the next shape (closures above are done with it)
        torch.cuda.empty_cache()

    # linear_many (Q, K, V of a GQA layer) vs three linears and one linear over the summed weights
    k = 8192
    ns = (8192, 1024, 1024)
    x_host = rand_bf16(rng, (1, k), 1.0)
    x = ops.upload(x_host)
    total = sum(ns) * k * 2
    count = max(2, math.ceil(ROTATE_BYTES / total))
    sets = [[ops.upload(rand_bf16(rng, (nn, k))) for nn in ns] for _ in range(count)]
    fused = [ops.upload(rand_bf16(rng, (sum(ns), k))) for _ in range(count)]
    iters = 100

    def many():
        t0 = time.perf_counter()
        for i in range(iters):
            for t in ops.linear_many(x, sets[i % count]):
                t.close()
        s.synchronize()
        return total * iters / (time.perf_counter() - t0) / 1e12

    def three():
        t0 = time.perf_counter()
        for i in range(iters):
            for w in sets[i % count]:
                ops.linear(x, w).close()
        s.synchronize()
        return total * iters / (time.perf_counter() - t0) / 1e12

    def one():
        t0 = time.perf_counter()
        for i in range(iters):
            ops.linear(x, fused[i % count]).close()
        s.synchronize()
        return total * iters / (time.perf_counter() - t0) / 1e12

    many(), three(), one()
    m, t3, o = rounds([many, three, one], reps)
    out.append(entry("tensor.cuda.linear_many.qkv", "linear_many K=8192, N=8192+1024+1024, weight bandwidth", "TB/s", m,
                     peer="three TensorOps.linear calls", peer_value=t3, goal=">= 1.0", command=CMD))
    out.append(entry("tensor.cuda.linear_many_vs_one.qkv", "linear_many QKV vs one linear over the summed weights (N=10240)", "TB/s", m,
                     peer="one linear, N=10240", peer_value=o, goal=">= 0.9", command=CMD))

    # gather_rows vs index_select: 4096 rows of 4096 BF16 from a 151936-row table
    rows, cols, n_idx = 151936, 4096, 4096
    table_t = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    try:
        table = ops.tensor(dev.wrap(table_t), (rows, cols), bfloat16)
    except hrx.HRXError:
        table = ops.upload(table_t.view(torch.int16).cpu().numpy().view(bfloat16))
    idx = rng.integers(0, rows, n_idx)
    tidx = torch.from_numpy(idx).cuda()
    moved = 2 * n_idx * cols * 2

    def g_hrx():
        t0 = time.perf_counter()
        for _ in range(50):
            ops.gather_rows(table, idx).close()
        s.synchronize()
        return moved * 50 / (time.perf_counter() - t0) / 1e12

    def g_torch():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            torch.index_select(table_t, 0, tidx)
        torch.cuda.synchronize()
        return moved * 50 / (time.perf_counter() - t0) / 1e12

    g_hrx(), g_torch()
    gh, gt = rounds([g_hrx, g_torch], reps)
    out.append(entry("tensor.cuda.gather_rows", "gather_rows 4096 of 151936 rows x 4096 BF16 (read+write bytes; includes index upload)", "TB/s", gh,
                     peer="torch index_select", peer_value=gt, goal=">= 1.0", command=CMD))
    out.append(gather_kernel_entry(ops, table, table_t, idx, tidx, moved, reps))

    # host CPU time per eager call (see the module docstring), on shapes whose kernels
    # take less GPU time than a call takes the host, so no call ever waits for the GPU
    k = n = 1024
    xh, wh = rand_bf16(rng, (1, k), 1.0), rand_bf16(rng, (n, k))
    x, w = ops.upload(xh), ops.upload(wh)
    tx = torch.from_numpy(xh.view(np.int16)).cuda().view(torch.bfloat16)
    tw = torch.from_numpy(wh.view(np.int16)).cuda().view(torch.bfloat16)
    narrow_t = torch.randn(8192, 64, device="cuda", dtype=torch.bfloat16)
    narrow = ops.upload(narrow_t.view(torch.int16).cpu().numpy().view(bfloat16))
    nidx = rng.integers(0, 8192, n_idx)
    tnidx = torch.from_numpy(nidx).cuda()

    def sync():
        s.synchronize()
        torch.cuda.synchronize()

    pairs = {
        "linear": (lambda: ops.linear(x, w).close(), lambda: F.linear(tx, tw),
                   f"eager linear [1,{k}]x[{n},{k}] BF16", "torch F.linear"),
        "gather_rows": (lambda: ops.gather_rows(narrow, nidx).close(), lambda: torch.index_select(narrow_t, 0, tnidx),
                        f"eager gather_rows of {n_idx} rows x 64 BF16 (host indices)", "torch index_select (indices on the device)"),
    }
    for name, (h_fn, t_fn, what, peer) in pairs.items():
        h = statistics.median(host_cost(h_fn, sync) for _ in range(reps))
        t = statistics.median(host_cost(t_fn, sync) for _ in range(reps))
        out.append(entry(f"tensor.cuda.{name}.host_us", f"{what}: host CPU time per call", "us", h, peer=peer, peer_value=t,
                         command=CMD))
    x.close(), w.close(), narrow.close()
    return out


def hrx_eager_rate(ops, x, ws, wbytes: int, iters: int):
    """A function timing ``iters`` eager ``TensorOps.linear`` calls over the rotated
    weights ``ws`` (weight TB/s)."""

    def hrx_eager() -> float:
        t0 = time.perf_counter()
        for i in range(iters):
            ops.linear(x, ws[i % len(ws)]).close()
        ops.stream.synchronize()
        return wbytes * iters / (time.perf_counter() - t0) / 1e12

    return hrx_eager


def eager_rates(ops, x, ws, tx, tw, wbytes: int, iters: int):
    """Two functions timing ``iters`` eager projections over the rotated weights (weight
    TB/s): ``TensorOps.linear`` and torch ``F.linear``."""
    import torch
    import torch.nn.functional as F

    hrx_eager = hrx_eager_rate(ops, x, ws, wbytes, iters)

    def torch_eager() -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(iters):
            F.linear(tx, tw[i % len(tw)])
        torch.cuda.synchronize()
        return wbytes * iters / (time.perf_counter() - t0) / 1e12

    return hrx_eager, torch_eager


def gather_kernel_entry(ops, table, table_t, idx, tidx, moved: int, reps: int, loops: int = 50) -> dict:
    """gather_rows' kernel on GPU time: recorded in a graph with the indices in device
    memory (as the GPT-2 decoder binds it), replayed ``loops`` times back to back,
    against torch's CUDA graph of index_select into a preallocated output. Each replay
    takes more GPU time than the host needs to issue it, so both are GPU-bound."""
    import torch
    from hrx_tensor import kernels as tensor_kernels

    dev, s = ops.device, ops.stream
    n, row_bytes = idx.shape[0], table.nbytes // table.shape[0]
    units = row_bytes // 16
    grid, block, shift = tensor_kernels.gather_launch(units, n)
    kernel = tensor_kernels.kernels_for("cuda")[tensor_kernels.GATHER.name]
    dev_idx = ops.upload(idx.astype(np.int64))
    dst = dev.allocate(n * row_bytes)
    g = s.graph()
    g.dispatch(kernel, grid, [table.view, dev_idx.view, dst], block=block,
               scalars=(np.uint64(units), np.uint32(16), np.uint64(n), np.uint32(shift)), deps=[])
    g.launch().wait()
    check = ops.gather_rows(table, idx)
    got = s.download(dst).view(np.uint16)
    assert np.array_equal(got, check.numpy().view(np.uint16).ravel()), "graph gather differs from gather_rows"
    check.close()
    out_t = torch.empty(n, table_t.shape[1], device="cuda", dtype=table_t.dtype)
    cg, rate = torch_graph(lambda: torch.index_select(table_t, 0, tidx, out=out_t), moved)

    def hrx_rate() -> float:
        s.synchronize()
        t0 = time.perf_counter()
        for _ in range(loops):
            g.launch()
        s.synchronize()
        return moved * loops / (time.perf_counter() - t0) / 1e12

    hrx_rate(), rate(loops)
    h, t = rounds([hrx_rate, lambda: rate(loops)], reps)
    g.close()
    dst.close()
    dev_idx.close()
    del cg
    return entry("tensor.cuda.gather_rows_graph", f"gather_rows' kernel: {n} rows of {row_bytes // 2} BF16 in a graph replayed "
                 "back to back, indices in device memory (read+write bytes; GPU-bound)", "TB/s", h,
                 peer="torch CUDA graph of index_select (indices on the device)", peer_value=t, goal=">= 1.0", command=CMD)


def torch_linears_graph(tx, tw):
    """A torch CUDA graph of ``F.linear(tx, w)`` for every ``w`` of ``tw`` and a function
    timing ``loops`` replays of it (weight TB/s): :func:`torch_graph`."""
    import torch.nn.functional as F

    def linears():
        for w in tw:
            F.linear(tx, w)

    return torch_graph(linears, sum(w.numel() * w.element_size() for w in tw))


def torch_graph(record, nbytes: int):
    """A torch CUDA graph of what ``record()`` launches (warmed up on a side stream
    first, as torch requires) and a function timing ``loops`` replays of it, as TB/s
    of ``nbytes`` a replay."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        record()
    torch.cuda.current_stream().wait_stream(side)
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg):
        record()

    def rate(loops: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(loops):
            cg.replay()
        torch.cuda.synchronize()
        return nbytes * loops / (time.perf_counter() - t0) / 1e12

    return cg, rate


def hrx_replay_rate(rt, graph, nbytes: int, loops: int) -> float:
    """Weight TB/s of ``loops`` submissions of a tracked graph reading ``nbytes`` each."""
    t0 = time.perf_counter()
    for _ in range(loops):
        sub = rt.submit(graph)
    sub.wait(timeout=60)
    return nbytes * loops / (time.perf_counter() - t0) / 1e12


def sweep_shapes() -> list[tuple[int, int]]:
    """The sweep's (K, N) pairs: every pair of SWEEP_DIMS with >= SWEEP_MIN_BYTES of weights."""
    return [(k, n) for k in SWEEP_DIMS for n in SWEEP_DIMS if 2 * k * n >= SWEEP_MIN_BYTES]


def cuda_sweep(ops, dev, copy_bw: float, reps: int) -> list[dict]:
    """The GEMV sweep (see the module docstring): per shape eager and graph ratios vs torch,
    vs the D2D copy for large weights, and the worst shape of each."""
    import torch

    from hrx_core.execution import Runtime

    s = ops.stream
    rt = Runtime(dev)
    out: list[dict] = []
    worst: dict[str, tuple[float, str, float, float, str]] = {}
    started = time.perf_counter()
    for k, n in sweep_shapes():
        shape = f"{k}x{n}"
        wbytes = 2 * k * n
        count = max(2, math.ceil(SWEEP_ROTATE_BYTES / wbytes))
        tw = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
        tx = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        wrapped: list = []  # HRX buffers over torch's memory (closed with the shape)
        try:
            for t in (*tw, tx):
                wrapped.append(dev.wrap(t))
            ws = [ops.tensor(b, (n, k), bfloat16) for b in wrapped[:-1]]
            x = ops.tensor(wrapped[-1], (1, k), bfloat16)
        except hrx.HRXError:  # no wrapping here: copies of the same bytes
            for b in wrapped:
                b.close()
            wrapped = []
            ws = [ops.upload(t.view(torch.int16).cpu().numpy().view(bfloat16)) for t in tw]
            x = ops.upload(tx.view(torch.int16).cpu().numpy().view(bfloat16))
        hrx_eager, torch_eager = eager_rates(ops, x, ws, tx, tw, wbytes, max(count, SWEEP_MEASURE_BYTES // wbytes))

        g = rt.graph(f"sweep {shape}")  # every rotated weight's projection in one region
        outs: list = []
        g.compute("linears", lambda rg: outs.extend(ops.record_linear(rg, x, w) for w in ws))
        rt.submit(g).wait(timeout=60)
        _, torch_rate = torch_linears_graph(tx, tw)  # the rate function keeps the graph alive
        loops = max(1, SWEEP_MEASURE_BYTES // (wbytes * count))

        def hrx_graph():
            return hrx_replay_rate(rt, g, wbytes * count, loops)

        def torch_graph():
            return torch_rate(loops)

        fns = [hrx_eager, torch_eager, hrx_graph, torch_graph]
        for fn in fns:
            fn()  # warm-up
        he, te, hg, tg = rounds(fns, reps)
        what = f"linear BF16 [1,{k}]x[{n},{k}] ({wbytes >> 20} MiB), weight bandwidth"
        out.append(entry(f"tensor.cuda.sweep.eager.{shape}", what + ", eager", "TB/s", he, peer="torch F.linear (eager)",
                         peer_value=te, goal=">= 1.0", command=CMD + " --only sweep"))
        out.append(entry(f"tensor.cuda.sweep.graph.{shape}", what + f", {count} projections in one recorded region", "TB/s",
                         hg, peer=f"torch CUDA graph of {count} F.linear", peer_value=tg, goal=">= 1.0",
                         command=CMD + " --only sweep"))
        rows = [("eager", he, te, "torch F.linear (eager)"), ("graph", hg, tg, "torch CUDA graph of F.linear")]
        if wbytes >= VS_COPY_BYTES:
            out.append(entry(f"tensor.cuda.sweep.vs_copy.{shape}", what + ", graph, vs the D2D copy of this run", "TB/s",
                             hg, peer="D2D copy (same run)", peer_value=copy_bw, goal=">= 0.92", command=CMD + " --only sweep"))
            rows.append(("vs_copy", hg, copy_bw, "D2D copy (same run)"))
        for kind, h, p, peer in rows:
            if kind not in worst or h / p < worst[kind][0]:
                worst[kind] = (h / p, shape, h, p, peer)
        print(f"sweep {shape}: eager {he / te:.3f}x torch, graph {hg / tg:.3f}x torch graph"
              + (f", {hg / copy_bw:.3f}x copy" if wbytes >= VS_COPY_BYTES else ""), flush=True)
        g.close()
        for o in outs:
            o.close()
        for t in (*ws, x, *wrapped):
            t.close()
        s.synchronize()
        tw = tx = torch_rate = None  # the graph and torch's weights go before the next shape's
        torch.cuda.empty_cache()
    goals = {"eager": ">= 1.0", "graph": ">= 1.0", "vs_copy": ">= 0.92"}
    for kind, (_, shape, h, p, peer) in worst.items():
        out.append(entry(f"tensor.cuda.sweep.worst_{kind}", f"the sweep's worst shape ({kind}): linear {shape}, weight "
                         f"bandwidth", "TB/s", h, peer=peer, peer_value=p, goal=goals[kind], command=CMD + " --only sweep"))
    print(f"sweep: {len(sweep_shapes())} shapes in {time.perf_counter() - started:.1f} s", flush=True)
    return out


def graph_pair(ops, dev, x, ws, tx, tw, wbytes, shape, reps):
    """Recorded graph of linear fragments (one per rotated weight) vs a torch CUDA graph."""
    from hrx_core.execution import Runtime

    rt = Runtime(dev)
    g = rt.graph("linears")  # every projection in one region: one native graph per replay
    outs = []
    g.compute("linears", lambda rg: outs.extend(ops.record_linear(rg, x, w) for w in ws))
    rt.submit(g).wait(timeout=60)
    g2 = rt.graph("fragments")  # one region per projection (linear_fragment)
    for w in ws:
        _, o = ops.linear_fragment(g2, x, w)
        outs.append(o)
    rt.submit(g2).wait(timeout=60)
    loops = max(2, SWEEP_MEASURE_BYTES // (wbytes * len(ws)))  # as the sweep: ~4 ms a timing

    def hrx_graph():
        return hrx_replay_rate(rt, g, wbytes * len(ws), loops)

    def hrx_fragments():
        return hrx_replay_rate(rt, g2, wbytes * len(ws), loops)

    _, torch_rate = torch_linears_graph(tx, tw)  # the rate function keeps the graph alive

    def torch_graph():
        return torch_rate(loops)

    hrx_graph(), hrx_fragments(), torch_graph()
    h, f, t = rounds([hrx_graph, hrx_fragments, torch_graph], reps)
    g.close(), g2.close()
    for o in outs:
        o.close()
    return [entry(f"tensor.cuda.linear_graph.{shape}", f"linear {shape}: {len(ws)} record_linear calls in one TrackedGraph region, weight bandwidth", "TB/s", h,
                  peer=f"torch CUDA graph of {len(ws)} F.linear", peer_value=t, goal=">= 1.0", command=CMD),
            entry(f"tensor.cuda.linear_fragments.{shape}", f"linear {shape}: {len(ws)} linear_fragment regions in one TrackedGraph, weight bandwidth", "TB/s", f,
                  command=CMD)]


# -- host ---------------------------------------------------------------------------


def host_bench(reps: int) -> list[dict]:
    dev = hrx.device("host")
    ops = TensorOps(dev)
    rng = np.random.default_rng(0)
    out: list[dict] = []
    for k, n in ((4096, 4096), (4096, 11008)):
        x_host, w_host = rand_bf16(rng, (1, k), 1.0), rand_bf16(rng, (n, k))
        x, w = ops.upload(x_host), ops.upload(w_host)
        wf, xf = w_host.astype(np.float32), x_host[0].astype(np.float32)
        iters = 5

        def hrx_call():
            y = ops.linear(x, w, out_dtype="f32")
            y.completion.wait()
            y.close()

        def hrx_linear():
            for _ in range(WARM_CALLS):  # untimed: the round starts warm (as the peer's)
                hrx_call()
            t0 = time.perf_counter()
            for _ in range(iters):
                hrx_call()
            return (time.perf_counter() - t0) / iters * 1e6

        def numpy_linear():
            for _ in range(WARM_CALLS):
                wf @ xf
            t0 = time.perf_counter()
            for _ in range(iters):
                wf @ xf
            return (time.perf_counter() - t0) / iters * 1e6

        hrx_linear(), numpy_linear()
        h, p = rounds([hrx_linear, numpy_linear], reps)
        out.append(entry(f"tensor.host.linear.{k}x{n}", f"host linear BF16 [1,{k}]x[{n},{k}], F32 out, time per call", "us", h,
                         peer="numpy matvec over pre-converted float32 weights", peer_value=p, goal="<= 1.0", command=CMD))
        x.close(), w.close()
    rows, cols, n_idx = 151936, 4096, 4096
    table_host = rand_bf16(rng, (rows, cols))
    table = ops.upload(table_host)
    idx = rng.integers(0, rows, n_idx)

    def hrx_gather():
        t0 = time.perf_counter()
        for _ in range(5):
            t = ops.gather_rows(table, idx)
            t.completion.wait()
            t.close()
        return (time.perf_counter() - t0) / 5 * 1e6

    def numpy_take():
        t0 = time.perf_counter()
        for _ in range(5):
            np.take(table_host, idx, axis=0)
        return (time.perf_counter() - t0) / 5 * 1e6

    hrx_gather(), numpy_take()
    h, p = rounds([hrx_gather, numpy_take], reps)
    out.append(entry("tensor.host.gather_rows", "host gather_rows 4096 of 151936 rows x 4096 BF16, time per call", "us", h,
                     peer="numpy take", peer_value=p, goal="<= 1.0", command=CMD))

    # host CPU time per eager call, on shapes whose kernels are short (see the docstring)
    s = ops.stream
    x, w = ops.upload(rand_bf16(rng, (1, 256), 1.0)), ops.upload(rand_bf16(rng, (256, 256)))
    small = ops.upload(rand_bf16(rng, (1024, 64)))
    few = rng.integers(0, 1024, 64)
    for name, fn, what in (("linear", lambda: ops.linear(x, w).close(), "eager linear [1,256]x[256,256] BF16"),
                           ("gather_rows", lambda: ops.gather_rows(small, few).close(), "eager gather_rows of 64 rows x 64 BF16")):
        h = statistics.median(host_cost(fn, s.synchronize) for _ in range(reps))
        out.append(entry(f"tensor.host.{name}.host_us", f"{what}: host CPU time per call", "us", h, command=CMD))
    x.close(), w.close(), small.close()
    return out


def _machine(name: str, default: str) -> str:
    """Keep the machine line other scripts wrote into the same file."""
    import json

    from results_file import RESULTS

    try:
        return json.loads((RESULTS / name).read_text())["machine"]
    except (OSError, ValueError, KeyError):
        return default


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--engine", choices=["cuda", "host"], default=None)
    p.add_argument("--only", choices=["base", "sweep"], default=None,
                   help="cuda: only the original figures, or only the GEMV sweep (default: both)")
    args = p.parse_args()
    engine = args.engine
    if engine is None:
        engine = "cuda" if "cuda" in hrx.engines() and hrx.engine_status()["cuda"].available else "host"
    if engine == "cuda":
        entries = cuda_bench(args.reps, args.only)
        out = machine_file(hrx.device("cuda"))
        path = write(out, _machine(out, hrx.device("cuda").info.name), entries)
    else:
        entries = host_bench(args.reps)
        from results_file import host_file, host_machine

        path = write(host_file(), _machine(host_file(), host_machine()), entries)
    report(entries)
    print(f"wrote {path}")


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/tensor.py", main))
