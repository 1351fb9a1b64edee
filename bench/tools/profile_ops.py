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
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        ops.linear(x, w).close()
    s.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
