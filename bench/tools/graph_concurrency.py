"""Weight bandwidth of GEMVs replayed as graphs: chained or independent nodes, through
the runtime or straight on a stream, against eager launches and a torch CUDA graph (cuda).

    python bench/tools/graph_concurrency.py [--shapes 16384x16384,2048x16384,4096x4096]

For each K x N shape, weights rotated through >= 128 MiB (as bench/tensor.py's sweep):

- ``eager``: ``TensorOps.linear`` per weight;
- ``graph chained`` / ``graph independent``: an explicit ``stream.graph()`` of one
  GEMV node per weight, each after the previous one or all without predecessors,
  replayed with ``Graph.launch`` (no runtime);
- ``runtime region``: the sweep's TrackedGraph region (record_linear per weight;
  the nodes are independent: no hazards between them), replayed with Runtime.submit;
- ``torch graph``: a CUDA graph captured from F.linear calls (a chain: one stream).

A diagnostic for issue 18 (why the sweep's graph figures trail its eager ones): it
writes no results file.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(ops, rt, dev, shape: str, loops: int) -> None:
    """Print the five rates of one shape."""
    import torch
    from ml_dtypes import bfloat16
    from tensor import hrx_replay_rate, torch_linears_graph

    s = ops.stream
    k, n = (int(v) for v in shape.split("x"))
    wbytes = 2 * k * n
    count = max(2, math.ceil((128 << 20) / wbytes))
    tw = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(count)]
    tx = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    wrapped = [dev.wrap(t) for t in (*tw, tx)]
    ws = [ops.tensor(b, (n, k), bfloat16) for b in wrapped[:-1]]
    x = ops.tensor(wrapped[-1], (1, k), bfloat16)
    total = wbytes * count

    def eager():
        s.synchronize()
        t0 = time.perf_counter()
        for _ in range(loops):
            for w in ws:
                ops.linear(x, w).close()
        s.synchronize()
        return total * loops / (time.perf_counter() - t0) / 1e12

    outs = []

    def explicit(chained):
        g = s.graph()
        prev = []
        for w in ws:
            ((kern, grid, bindings), kw), out, _ = ops._linear_record_args(x, w, None, "bf16", s)
            outs.append(out)
            node = g.dispatch(kern, grid, bindings, deps=prev, **kw)
            prev = [node] if chained else []
        g.launch().wait()

        def rate():
            s.synchronize()
            t0 = time.perf_counter()
            for _ in range(loops):
                g.launch()
            s.synchronize()
            return total * loops / (time.perf_counter() - t0) / 1e12
        return rate

    tg = rt.graph(f"sweep {shape}")
    touts: list = []
    tg.compute("linears", lambda rg: touts.extend(ops.record_linear(rg, x, w) for w in ws))
    rt.submit(tg).wait(timeout=60)
    _, torch_rate = torch_linears_graph(tx, tw)
    fns = {"eager": eager, "graph chained": explicit(True), "graph independent": explicit(False),
           "runtime region": lambda: hrx_replay_rate(rt, tg, total, loops), "torch graph": lambda: torch_rate(loops)}
    for fn in fns.values():
        fn()
    best = {name: max(fn() for _ in range(5)) for name, fn in fns.items()}
    print(f"{shape} ({count} weights): " + ", ".join(f"{name} {v:.3f}" for name, v in best.items()) + " TB/s", flush=True)
    tg.close()
    for o in touts:
        o.close()
    s.synchronize()
    for o in outs:
        o.close()
    for t in (*ws, x, *wrapped):
        t.close()
    s.synchronize()

    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="16384x16384,2048x16384,16384x2048,4096x4096")
    ap.add_argument("--loops", type=int, default=32)
    args = ap.parse_args()
    from hrx_tensor import TensorOps

    import hrx_core as hrx
    from hrx_core.execution import Runtime

    dev = hrx.device("cuda")
    ops = TensorOps(dev)
    rt = Runtime(dev)
    for shape in args.shapes.split(","):
        measure(ops, rt, dev, shape, args.loops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
