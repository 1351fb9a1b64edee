"""hrx_tensor's GEMV plan against variants of it, measured the way the sweep measures (any engine).

    python bench/tools/plan_ab.py [--shapes 4096x16384,6144x12288] [--variants plan,six,warp] [--reps 5]

For each K x N shape: weights rotated over bench/tensor.py's SWEEP_ROTATE_BYTES (at least
two) and one input row, uploaded once; then, per variant, a TensorOps whose plan has
some of its choices switched off (class attributes, set only while it is made):

- ``plan``: the shipped plan;
- ``six``: no register budget (``use_budget_linear = False``: the warp kernel at six
  blocks an SM wherever the plan would take eight);
- ``warp``: no bulk-copy kernel (``use_bulk_linear = False``: the warp kernel, at its budget);
- ``warp6``: neither;
- ``bulk``: the bulk-copy kernel on any Hopper (``use_bulk_linear = "always"``: the
  plan's bandwidth rule, ``kernels.bulk_linear_pays``, left out).

Each variant is timed as the sweep times HRX (bench/tensor.py ``cuda_sweep``): eager
``linear`` calls over the rotated weights, and ``Runtime.submit`` of one region that
records every rotated weight's projection, each over SWEEP_MEASURE_BYTES of weights.
The variants run interleaved, round by round (``--reps`` rounds, the median of each);
prints weight TB/s and each variant's ratio to the plan. A diagnostic for issue 18
(which kernel the plan should pick where its choices tie in isolation): it writes no
results file.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hrx_tensor import TensorOps
from ml_dtypes import bfloat16
from results_file import rounds  # bench/results_file.py
from tensor import SWEEP_MEASURE_BYTES, SWEEP_ROTATE_BYTES, hrx_eager_rate, hrx_replay_rate  # bench/tensor.py

import hrx_core as hrx
from hrx_core.execution import Runtime

#: variant -> the TensorOps switches it turns off
#: variant -> the plan switches (TensorOps class attributes) it sets, and to what
VARIANTS: dict[str, dict[str, object]] = {
    "plan": {}, "six": {"use_budget_linear": False}, "warp": {"use_bulk_linear": False},
    "warp6": {"use_budget_linear": False, "use_bulk_linear": False}, "bulk": {"use_bulk_linear": "always"},
}


def make_ops(dev: hrx.Device, switches: dict[str, object]) -> TensorOps:
    """A TensorOps made with the plan ``switches`` set (restored after)."""
    saved = {name: getattr(TensorOps, name) for name in switches}
    try:
        for name, value in switches.items():
            setattr(TensorOps, name, value)
        return TensorOps(dev)
    finally:
        for name, value in saved.items():
            setattr(TensorOps, name, value)


def kernel_of(ops: TensorOps, k: int, n: int) -> str:
    """The kernel and grid the plan of ``ops`` launches for K x N."""
    kernel, grid, block, scalars = ops._linear_geometry(k, [n], np.dtype(bfloat16))
    return f"{kernel.name} grid {grid} block {block} last {int(scalars[-1])}"


def variant_rates(ops: TensorOps, rt: Runtime, x, ws, wbytes: int, measure: int):
    """(eager, graph) timing functions of one variant, weight TB/s; and what to close."""
    iters = max(len(ws), measure // wbytes)
    g = rt.graph(f"plan_ab {wbytes}")
    outs: list = []
    g.compute("linears", lambda rg: outs.extend(ops.record_linear(rg, x, w) for w in ws))
    rt.submit(g).wait(timeout=120)
    loops = max(1, measure // (wbytes * len(ws)))

    def graph() -> float:
        return hrx_replay_rate(rt, g, wbytes * len(ws), loops)

    return hrx_eager_rate(ops, x, ws, wbytes, iters), graph, [g, *outs]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--shapes", default="4096x16384,8192x8192,6144x12288,6144x16384,8192x16384")
    ap.add_argument("--variants", default="plan,six,warp", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rotate", type=int, default=SWEEP_ROTATE_BYTES, help="weight bytes rotated over (default: the sweep's)")
    ap.add_argument("--measure", type=int, default=SWEEP_MEASURE_BYTES, help="weight bytes a timing reads (default: the sweep's)")
    args = ap.parse_args()
    names = [v for v in args.variants.split(",") if v]
    for v in names:
        if v not in VARIANTS:
            ap.error(f"--variants: {v!r} is not one of {', '.join(VARIANTS)}")
    if "plan" not in names:
        names.insert(0, "plan")
    dev = hrx.device(args.engine)
    rng = np.random.default_rng(0)
    with Runtime(dev) as rt:
        for shape in args.shapes.split(","):
            k, n = (int(v) for v in shape.split("x"))
            wbytes = 2 * k * n
            count = max(2, math.ceil(args.rotate / wbytes))
            all_ops = {v: make_ops(dev, VARIANTS[v]) for v in names}
            base = all_ops["plan"]
            ws = [base.upload((rng.standard_normal((n, k), dtype=np.float32) * 0.02).astype(bfloat16))
                  for _ in range(count)]
            x = base.upload(rng.standard_normal((1, k), dtype=np.float32).astype(bfloat16))
            fns, closing = [], []
            for v in names:
                eager, graph, owned = variant_rates(all_ops[v], rt, x, ws, wbytes, args.measure)
                fns += [eager, graph]
                closing += owned
            for fn in fns:
                fn()  # warm-up
            med = rounds(fns, args.reps)
            print(f"{shape} ({wbytes >> 20} MiB, {count} weights):")
            for i, v in enumerate(names):
                e, g = med[2 * i], med[2 * i + 1]
                print(f"  {v:6s} eager {e:6.3f} TB/s ({e / med[0]:5.3f}x plan)  graph {g:6.3f} TB/s "
                      f"({g / med[1]:5.3f}x plan)  {kernel_of(all_ops[v], k, n)}", flush=True)
            rt.synchronize()
            for obj in (*closing, *ws, x):
                obj.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
