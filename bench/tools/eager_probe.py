"""Where the wall time of an eager GEMV call goes when the host, not the GPU, bounds it (any engine).

    python bench/tools/eager_probe.py [--engine cuda] [--shapes 2048x1536,2560x2560] [--calls 3000]

For each K x N shape: weights rotated over bench/tensor.py's SWEEP_ROTATE_BYTES and one
input row; then ``--calls`` eager ``TensorOps.linear`` calls (each result closed, as
the sweep's eager figure makes them) timed four ways at once: wall time, the issuing
thread's CPU time (``time.thread_time``), the process's CPU time (``time.process_time``:
the excess over the thread's is what other threads of the process ran meanwhile, for
example a notifier or an engine's worker), and the GPU time where torch can read it
(CUDA events on the ops' stream). Beside it the same for torch ``F.linear`` where torch
has CUDA. The threads alive before and after are listed. A diagnostic for the sweep's
eager figures at 4-12 MiB (``tensor.cuda.sweep.eager.*``), whose wall time a call
exceeded the issuing thread's CPU time (issue 18): it writes no results file.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrx_tensor import TensorOps
from ml_dtypes import bfloat16
from tensor import SWEEP_ROTATE_BYTES  # bench/tensor.py

import hrx_core as hrx


def clocks(fn, calls: int, sync) -> dict[str, float]:
    """us a call of ``calls`` calls ``fn(i)`` then ``sync()``: wall, thread CPU, process CPU."""
    sync()
    w, t, p = time.perf_counter(), time.thread_time(), time.process_time()
    for i in range(calls):
        fn(i)
    sync()
    return {"wall": (time.perf_counter() - w) / calls * 1e6, "thread": (time.thread_time() - t) / calls * 1e6,
            "process": (time.process_time() - p) / calls * 1e6}


def line(label: str, c: dict[str, float]) -> str:
    return (f"  {label:12s} wall {c['wall']:7.2f} us  thread CPU {c['thread']:7.2f}  process CPU {c['process']:7.2f}"
            f"  (other threads {c['process'] - c['thread']:6.2f}, not on a CPU {c['wall'] - c['thread']:6.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--shapes", default="2048x1536,2560x2560,1024x4096")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rotate", type=int, default=SWEEP_ROTATE_BYTES, help="weight bytes rotated over (default: the sweep's)")
    args = ap.parse_args()
    if args.calls < 1 or args.rounds < 1:
        ap.error("--calls and --rounds must be >= 1")
    dev = hrx.device(args.engine)
    ops = TensorOps(dev)
    torch = None
    if dev.info.engine == "cuda":
        try:
            import torch
        except ImportError:
            torch = None
    print("threads before:", sorted(t.name for t in threading.enumerate()))
    rng = np.random.default_rng(0)
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        count = max(2, math.ceil(args.rotate / (2 * k * n)))
        ws_host = [(rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(bfloat16) for _ in range(count)]
        x_host = rng.standard_normal((1, k), dtype=np.float32).astype(bfloat16)
        ws = [ops.upload(w) for w in ws_host]
        x = ops.upload(x_host)
        kernel, grid, block, _ = ops._linear_geometry(k, [n], np.dtype(bfloat16))
        print(f"{shape} ({2 * k * n >> 20} MiB, {count} weights; {kernel.name} grid {grid} block {block}):")

        def hrx_call(i: int) -> None:
            ops.linear(x, ws[i % count]).close()

        fns = {"hrx": (hrx_call, ops.stream.synchronize)}
        if torch is not None:
            import torch.nn.functional as F

            tw = [torch.from_numpy(w.view(np.int16)).cuda().view(torch.bfloat16) for w in ws_host]
            tx = torch.from_numpy(x_host.view(np.int16)).cuda().view(torch.bfloat16)

            def torch_call(i: int) -> None:
                F.linear(tx, tw[i % count])

            fns["torch"] = (torch_call, torch.cuda.synchronize)
        for fn, sync in fns.values():
            clocks(fn, min(200, args.calls), sync)  # warm-up
        best: dict[str, dict[str, float]] = {}
        for _ in range(args.rounds):
            for label, (fn, sync) in fns.items():
                c = clocks(fn, args.calls, sync)
                if label not in best or c["wall"] < best[label]["wall"]:
                    best[label] = c
        for label, c in best.items():
            print(line(label, c))
        if torch is not None:  # GPU time a call on the ops' stream, back to back
            ext = torch.cuda.ExternalStream(ops.stream.native_queue().native_handle())
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ops.stream.synchronize()
            start.record(ext)
            for i in range(args.calls):
                hrx_call(i)
            end.record(ext)
            end.synchronize()
            print(f"  hrx GPU span of the calls: {start.elapsed_time(end) * 1e3 / args.calls:7.2f} us a call")
        for t in (*ws, x):
            t.close()
    print("threads after:", sorted(t.name for t in threading.enumerate()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
