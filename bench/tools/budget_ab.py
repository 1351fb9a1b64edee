"""hrx_tensor's warp GEMV at its two register budgets, at every sweep shape where the plan picks eight (cuda).

    python bench/tools/budget_ab.py [--reps 100] [--all]

For each (K, N) of bench/tensor.py's sweep that the plan streams with the warp kernel
(not the bulk-copy one) and for which ``gemv_budget`` picks eight blocks an SM
(``--all``: every warp-kernel shape), the GPU time per launch of ``hrx_tensor_linear``
(six blocks an SM, four loads a lane) and ``hrx_tensor_linear_b8`` (eight, two) at the
plan's grid and split: CUDA events around ``--reps`` back-to-back prepared launches
over weights rotated through 768 MiB (none served from L2), the best of three. Prints
each shape's times, their ratio and the plan's choice, then the worst and the
geometric mean of the ratios. A diagnostic for issue 18: it writes no results file.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrx_tensor import TensorOps
from hrx_tensor import kernels as tk
from tensor import sweep_shapes  # bench/tensor.py

import hrx_core as hrx


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--all", action="store_true", help="every warp-kernel shape, not only those the plan gives eight")
    args = ap.parse_args()
    import torch

    dev = hrx.device("cuda")
    ops = TensorOps(dev)
    sms = ops._sms
    if not sms:
        print("no multiprocessor count: the plan has one budget here")
        return 1
    s = ops.stream
    ext = torch.cuda.ExternalStream(s.native_queue().native_handle())

    def timed(run) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        run(10)
        start.record(ext)
        run(args.reps)
        end.record(ext)
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / args.reps

    ratios = []
    for k, n in sweep_shapes():
        if tk.linear_bulk_launch(k, n, sms) is not None:
            continue
        grid, block, ks = tk.linear_launch(k, n)
        budget = tk.gemv_budget(grid, sms, tk.gemv_lane_share(k, ks))
        if budget != 8 and not args.all:
            continue
        wbytes = 2 * k * n
        count = max(2, (768 << 20) // wbytes)
        ws = [dev.allocate(wbytes) for _ in range(count)]
        x, out = dev.allocate(2 * k), dev.allocate(4 * n)
        for b in (*ws, x):
            s.fill(b, 0)
        scalars = (np.uint32(k), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(0), np.uint32(ks))
        times = {}
        for kern in (tk.LINEAR, tk.LINEAR_B8):
            launches = [s.prepare(kern, grid, [x, w, w, w, out], block=block, scalars=scalars) for w in ws]

            def run(reps: int, launches=launches, count=count) -> None:
                for i in range(reps):
                    launches[i % count].launch()

            times[kern.name] = min(timed(run) for _ in range(3))
            for p in launches:
                p.close()
        six, eight = times[tk.LINEAR.name], times[tk.LINEAR_B8.name]
        ratios.append((six / eight, f"{k}x{n}"))
        print(f"{k:5d}x{n:<5d} ({wbytes >> 20:4d} MiB) grid {grid:5d} ks {ks}: six {six:8.2f} us  eight {eight:8.2f} us  "
              f"six/eight {six / eight:5.3f}  plan: {budget}", flush=True)
        for b in (*ws, x, out):
            b.close()
    if ratios:
        worst = min(ratios)
        gmean = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
        print(f"{len(ratios)} shapes: worst six/eight {worst[0]:.3f} at {worst[1]}, geometric mean {gmean:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
