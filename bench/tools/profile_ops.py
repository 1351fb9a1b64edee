"""Where the host time of one TensorOps call goes (cProfile), on any engine.

    python bench/tools/profile_ops.py [--engine cuda] [--k 4096] [--n 4096] [--calls 2000]

Prints the per-call wall time of eager linear, gather_rows and a bare stream.dispatch
of the same kernel, then the cProfile table of the linear loop. A diagnostic, not a
benchmark: it writes no results file.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np
from ml_dtypes import bfloat16

import hrx_core as hrx
from hrx_tensor import TensorOps


def per_call(fn, calls: int, sync) -> float:
    for _ in range(min(100, calls)):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t) / calls * 1e6


def gpu_time(ops, dev, k: int, n: int) -> None:
    """GPU time per linear kernel (CUDA events around 200 prepared launches over weights
    rotated through 768 MiB, so none is served from L2), and torch F.linear alike."""
    import torch
    import torch.nn.functional as F

    s = ops.stream
    count = max(2, (768 << 20) // (k * n * 2))
    ws = [dev.allocate(k * n * 2) for _ in range(count)]
    for w in ws:
        s.fill(w, 0)
    x = dev.allocate(k * 2)
    s.fill(x, 0)
    out = dev.allocate(n * 2)
    scalars = (np.uint32(k), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(0))
    launches = [s.prepare(ops._linear, -(-n // 8), [x, w, w, w, out], block=256, scalars=scalars) for w in ws]
    ext = torch.cuda.ExternalStream(s.native_queue().native_handle())
    s.synchronize()

    def timed(run, stream) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        run(20)
        start.record(stream)
        run(200)
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / 200

    def hrx_run(reps: int) -> None:
        for i in range(reps):
            launches[i % count].launch()

    tw = [torch.zeros(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
    tx = torch.zeros(1, k, device="cuda", dtype=torch.bfloat16)
    cur = torch.cuda.current_stream()

    def torch_run(reps: int) -> None:
        for i in range(reps):
            F.linear(tx, tw[i % count])

    for _ in range(3):
        h, t = timed(hrx_run, ext), timed(torch_run, cur)
    wbytes = k * n * 2
    print(f"cuda {k}x{n} GPU time per kernel: hrx {h:.2f} us ({wbytes / h / 1e6:.2f} TB/s), "
          f"torch {t:.2f} us ({wbytes / t / 1e6:.2f} TB/s)")

    # gather_rows of 4096 rows of a [rows, k] BF16 table: GPU time per call, and host time per call
    rows = max(4096, n)
    table = ops.upload(np.zeros((rows, k), dtype=bfloat16))
    ttable = torch.zeros(rows, k, device="cuda", dtype=torch.bfloat16)
    idx = np.random.default_rng(0).integers(0, rows, 4096)
    tidx = torch.from_numpy(idx).cuda()
    host_us = per_call(lambda: ops.gather_rows(table, idx).close(), 200, s.synchronize)

    def g_hrx(reps: int) -> None:
        for _ in range(reps):
            ops.gather_rows(table, idx).close()

    def g_torch(reps: int) -> None:
        for _ in range(reps):
            torch.index_select(ttable, 0, tidx)

    for _ in range(3):
        gh, gt = timed(g_hrx, ext), timed(g_torch, cur)
    moved = 2 * 4096 * k * 2
    print(f"cuda gather 4096 rows x {k}: per call hrx {gh:.2f} us ({moved / gh / 1e6:.2f} TB/s, host loop {host_us:.1f} us/call), "
          f"torch {gt:.2f} us ({moved / gt / 1e6:.2f} TB/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    ops = TensorOps(dev)
    s = ops.stream
    x = ops.upload(np.ones((1, args.k), dtype=bfloat16))
    w = ops.upload(np.ones((args.n, args.k), dtype=bfloat16))
    out = dev.allocate(args.n * 2)
    kern = ops._linear
    scalars = (np.uint32(args.k), np.uint32(args.n), np.uint32(0), np.uint32(0), np.uint32(0))
    grid = -(-args.n // 8)
    idx = np.arange(64) % args.n
    results = {
        "linear": per_call(lambda: ops.linear(x, w).close(), args.calls, s.synchronize),
        "dispatch (same kernel)": per_call(lambda: s.dispatch(kern, grid, [x.view, w.view, w.view, w.view, out], block=256, scalars=scalars), args.calls, s.synchronize),
        "gather_rows (64 rows)": per_call(lambda: ops.gather_rows(w, idx).close(), args.calls, s.synchronize),
    }
    for name, us in results.items():
        print(f"{dev.info.engine} {args.k}x{args.n} {name:<24} {us:8.1f} us/call")
    if dev.info.engine == "cuda":
        gpu_time(ops, dev, args.k, args.n)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        ops.linear(x, w).close()
    s.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
