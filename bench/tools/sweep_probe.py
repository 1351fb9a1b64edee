"""Why a GEMV sweep shape's graph figure trails torch's CUDA graph: per shape, the
runtime's wall time per submission of the sweep's region, the host time spent inside
``Runtime.submit``, the GPU kernel time per submission (torch.profiler / CUPTI sees
HRX's graph nodes), and the same three for the torch CUDA graph of the same linears.

    python bench/tools/sweep_probe.py [--shapes 16384x2048,1024x2560] [--loops 64]

A diagnostic for bench/tensor.py's ``tensor.cuda.sweep.graph.*`` figures, not a
benchmark: it writes no results file.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from graph_timeline import close_operands, sweep_operands  # bench/tools/graph_timeline.py
from hrx_tensor import TensorOps

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions


def kernel_us(fn, runs: int) -> float:
    """GPU kernel time per run of ``fn`` (CUPTI), summed over kernels."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    total = 0.0
    for ev in prof.events():
        t = ev.device_time if hasattr(ev, "device_time") else ev.cuda_time
        if ev.device_type.name == "CUDA" and t:
            total += t
    return total / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16384x2048,8192x2048,1024x2560,4096x6144,8192x8192")
    ap.add_argument("--loops", type=int, default=64)
    ap.add_argument("--profile", action="store_true", help="print a cProfile table (own time) of each submit loop")
    args = ap.parse_args()
    dev = hrx.device("cuda")
    ops = TensorOps(dev)
    for observe in (False, True):
        rt = Runtime(dev, RuntimeOptions(observe=observe))
        for shape in args.shapes.split(","):
            k, n = map(int, shape.split("x"))
            tw, tx, ws, x, g, outs, cg, rate = sweep_operands(ops, rt, k, n, f"probe {shape}")
            count = len(ws)
            for _ in range(2):
                rt.submit(g).wait(timeout=60)
                rate(4)
            inside = 0.0
            prof = cProfile.Profile() if args.profile else None
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            for _ in range(args.loops):
                t = time.perf_counter()
                sub = rt.submit(g)
                inside += time.perf_counter() - t
            sub.wait(timeout=60)
            if prof:
                prof.disable()
            wall = (time.perf_counter() - t0) / args.loops * 1e6
            if prof:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
                print(f"== observe={observe} {shape}\n" + "\n".join(out.getvalue().splitlines()[6:]))
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.loops):
                cg.replay()
            torch.cuda.synchronize()
            twall = (time.perf_counter() - t0) / args.loops * 1e6
            hk = kernel_us(lambda rt=rt, g=g: rt.submit(g).wait(timeout=60), 8)
            tk = kernel_us(cg.replay, 8)
            print(f"observe={observe} {shape} x{count}: hrx wall {wall:7.1f} us/submit (in submit {inside / args.loops * 1e6:6.1f}),"
                  f" kernels {hk:7.1f} us | torch graph wall {twall:7.1f}, kernels {tk:7.1f} us", flush=True)
            close_operands(ops, ws, x, g, outs)
            del cg, rate, tw, tx
        rt.close()


if __name__ == "__main__":
    main()
