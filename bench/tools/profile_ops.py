"""Where the host time of one TensorOps/ImageOps call goes (cProfile), on any engine.

    python bench/tools/profile_ops.py [--engine cuda] [--k 4096] [--n 4096] [--calls 2000] [--op linear|gather|patchify]

Prints, per eager call of linear, gather_rows, patchify and a bare stream.dispatch
of the linear kernel, the wall time (calls in a loop, then a synchronization) and
the host CPU time (the issuing thread's ``time.thread_time``, synchronizations not
counted) -- the latter is what "eager calls are GPU-bound" is about: it must stay
below the kernel's GPU time. Then the cProfile table (by own time) of the ``--op``
loop. A diagnostic, not a benchmark: it writes no results file.
"""

from __future__ import annotations

import argparse
import sys
import cProfile
import pstats
import time

import numpy as np
from hrx_image import ImageOps
from hrx_tensor import TensorOps
from hrx_tensor.kernels import linear_launch
from ml_dtypes import bfloat16

import hrx_core as hrx


def per_call(fn, calls: int, sync) -> tuple[float, float]:
    """(wall, host CPU) microseconds per call: batches of 50 calls, each batch
    followed by ``sync()`` (counted in the wall time only)."""
    for _ in range(min(100, calls)):
        fn()
    sync()
    t, cpu, done = time.perf_counter(), 0.0, 0
    while done < calls:
        c0 = time.thread_time()
        for _ in range(50):
            fn()
        cpu += time.thread_time() - c0
        sync()
        done += 50
    return (time.perf_counter() - t) / done * 1e6, cpu / done * 1e6


def linear_args(k: int, n: int) -> tuple[int, int, tuple]:
    """(grid, block, scalars) of the GEMV kernel for one K x N projection, as the plan
    launches it (hrx_tensor.kernels.linear_launch)."""
    grid, block, ks = linear_launch(k, n)
    return grid, block, (np.uint32(k), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(ks))


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
    grid, block, scalars = linear_args(k, n)
    launches = [s.prepare(ops._linear, grid, [x, w, w, w, out], block=block, scalars=scalars) for w in ws]
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
    host_us = per_call(lambda: ops.gather_rows(table, idx).close(), 200, s.synchronize)[1]

    def g_hrx(reps: int) -> None:
        for _ in range(reps):
            ops.gather_rows(table, idx).close()

    def g_torch(reps: int) -> None:
        for _ in range(reps):
            torch.index_select(ttable, 0, tidx)

    for _ in range(3):
        gh, gt = timed(g_hrx, ext), timed(g_torch, cur)
    moved = 2 * 4096 * k * 2
    print(f"cuda gather 4096 rows x {k}: per call hrx {gh:.2f} us ({moved / gh / 1e6:.2f} TB/s, host CPU {host_us:.1f} us/call), "
          f"torch {gt:.2f} us ({moved / gt / 1e6:.2f} TB/s)")

    # patchify of 32 float32 3x448x448 images, p=16: the kernel alone (the slot's
    # prepared launch, launched back to back) against torch reshape/permute/contiguous
    image_ops = ImageOps(dev, stream=s)
    for size in (224, 448):
        images = image_ops.upload(np.zeros((32, 3, size, size), np.float32))
        image_ops.patchify(images, 16).close()
        plan = next(p for key, p in image_ops._front.items() if key[0] == "patchify" and key[3] == size)
        slot = plan.take_idle()
        prepared = slot.launcher.prepared
        timages = torch.zeros(32, 3, size, size, device="cuda")

        def p_hrx(reps: int, prepared=prepared) -> None:
            for _ in range(reps):
                prepared.launch()

        def p_torch(reps: int, size=size, timages=timages) -> None:
            g = size // 16
            for _ in range(reps):
                timages.reshape(32, 3, g, 16, g, 16).permute(0, 2, 4, 1, 3, 5).reshape(32, g * g, 3 * 256).contiguous()

        for _ in range(3):
            ph, pt = timed(p_hrx, ext), timed(p_torch, cur)
        moved = 2 * images.nbytes
        print(f"cuda patchify 32x3x{size}x{size} f32 p=16 GPU time: hrx {ph:.2f} us ({moved / ph / 1e6:.2f} TB/s), "
              f"torch {pt:.2f} us ({moved / pt / 1e6:.2f} TB/s)")
        plan.give(slot)
        images.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--op", choices=["linear", "gather", "patchify"], default="linear", help="the loop to profile")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    ops = TensorOps(dev)
    image_ops = ImageOps(dev, stream=ops.stream, plan_cache=ops.plan_cache)
    s = ops.stream
    x = ops.upload(np.ones((1, args.k), dtype=bfloat16))
    w = ops.upload(np.ones((args.n, args.k), dtype=bfloat16))
    out = dev.allocate(args.n * 2)
    kern = ops._linear
    grid, block, scalars = linear_args(args.k, args.n)
    idx = np.arange(64) % args.n
    chw = image_ops.upload(np.ones((3, 224, 224), np.float32))
    loops = {
        "linear": lambda: ops.linear(x, w).close(),
        "gather": lambda: ops.gather_rows(w, idx).close(),
        "patchify": lambda: image_ops.patchify(chw, 16).close(),
    }
    results = {
        "linear": per_call(loops["linear"], args.calls, s.synchronize),
        "dispatch (same kernel)": per_call(lambda: s.dispatch(kern, grid, [x.view, w.view, w.view, w.view, out], block=block, scalars=scalars), args.calls, s.synchronize),
        "gather_rows (64 rows)": per_call(loops["gather"], args.calls, s.synchronize),
        "patchify 3x224x224 f32": per_call(loops["patchify"], args.calls, s.synchronize),
    }
    for name, (wall, cpu) in results.items():
        print(f"{dev.info.engine} {args.k}x{args.n} {name:<24} {wall:8.1f} us/call wall {cpu:8.1f} us/call host CPU")
    if dev.info.engine == "cuda":
        gpu_time(ops, dev, args.k, args.n)
    prof = cProfile.Profile()
    loop = loops[args.op]
    prof.enable()
    for _ in range(args.calls):
        loop()
    s.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/tools/profile_ops.py", main))
