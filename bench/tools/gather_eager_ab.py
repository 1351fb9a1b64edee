"""Eager gather_rows against torch index_select, and where the eager call's time goes (cuda).

    python bench/tools/gather_eager_ab.py [--rounds 7] [--rings 8,32]

bench/tensor.py's ``tensor.cuda.gather_rows`` shape (4096 rows of 4096 BF16 from a
151936-row table, host indices), timed as that benchmark times it -- 50 eager calls,
then a synchronization -- in interleaved rounds, for:

- ``eager params``: ``TensorOps.gather_rows`` with its indices in the launch's
  parameters (kernels.GATHER_PARAM; where the device takes 16 KiB of arguments);
- ``eager ring R``: ``TensorOps.gather_rows`` with the indices in pinned host memory,
  an index ring of R entries (``use_param_gather = False``; the shipped ring is
  hrx_tensor.ops.INDEX_RING; the slot signals every R/2 calls);
- ``prepared host idx`` / ``prepared dev idx``: the gather kernel alone through one
  prepared launch, its indices in pinned host memory (what gather_rows' kernel reads)
  or in device memory (what the graph figure binds) -- the kernel without the op;
- ``torch``: ``torch.index_select`` with the indices on the device (the benchmark's peer).

Each line gives the median TB/s (read + write bytes) and the host CPU time per call
(``time.thread_time`` of the issuing thread, synchronizations excluded): a call whose
host time approaches the kernel's GPU time leaves the GPU idle between kernels. A
diagnostic for issue 15 / 18 (gather_rows >= 1.0x index_select): it writes no results file.

Measured on an H100 (2026-12-06, 7 rounds; us a call, x torch): eager ring 8 29.67
(0.959x), ring 32 28.25 (1.007x), the kernel alone with host indices 27.43 (1.037x),
with device indices 25.40 (1.120x), torch 28.44. The host CPU per eager call (25.2 us at
ring 8, 22.4 at 32) includes waiting for ring entries; a prepared launch takes 6.1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--rings", default="8,32", help="index ring sizes of the eager variants")
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()

    import torch
    from ml_dtypes import bfloat16
    from hrx_tensor import TensorOps
    from hrx_tensor import kernels as tk
    from hrx_tensor import ops as tensor_ops

    import hrx_core as hrx

    dev = hrx.device("cuda")
    rows, cols, n = 151936, 4096, 4096
    table_t = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, rows, n)
    tidx = torch.from_numpy(idx).cuda()
    moved = 2 * n * cols * 2
    calls = args.calls

    variants = {}
    shipped = tensor_ops.INDEX_RING
    keep = []
    def table_of(ops):
        """torch's table as a tensor of ``ops`` (wrapped where the engine can, else a copy)."""
        try:
            return ops.tensor(dev.wrap(table_t), (rows, cols), bfloat16)
        except hrx.HRXError:
            return ops.upload(table_t.view(torch.int16).cpu().numpy().view(bfloat16))

    params = TensorOps.use_param_gather
    TensorOps.use_param_gather = True
    ops = TensorOps(dev)
    table = table_of(ops)
    ops.gather_rows(table, idx).close()
    if ops._gather_params:

        def eager_params(ops=ops, table=table):
            for _ in range(calls):
                ops.gather_rows(table, idx).close()
            return ops.stream.synchronize

        variants["eager params"] = eager_params
    TensorOps.use_param_gather = False
    for ring in (int(r) for r in args.rings.split(",")):
        tensor_ops.INDEX_RING = ring
        ops = TensorOps(dev)
        table = table_of(ops)
        ops.gather_rows(table, idx).close()  # prepares the plan at this ring size
        keep.append((ops, table))

        def eager(ops=ops, table=table):
            for _ in range(calls):
                ops.gather_rows(table, idx).close()
            return ops.stream.synchronize

        variants[f"eager ring {ring}{' (shipped)' if ring == shipped else ''}"] = eager
    tensor_ops.INDEX_RING = shipped
    TensorOps.use_param_gather = params

    ops, table = keep[0]
    s = ops.stream
    units = cols * 2 // 16
    grid, block, shift = tk.gather_launch(units, n)
    kernel = tk.kernels_for("cuda")[tk.GATHER.name]
    scalars = (np.uint64(units), np.uint32(16), np.uint64(n), np.uint32(shift))
    host_idx = dev.allocate_shared(n * 8)
    host_idx.allocation.native.host_view()[: n * 8] = idx.astype(np.int64).view(np.uint8)
    dev_idx = dev.allocate(n * 8)
    s.upload(dev_idx, idx.astype(np.int64)).wait()
    dst = dev.allocate(n * cols * 2)
    for name, ibuf in (("prepared host idx", host_idx), ("prepared dev idx", dev_idx)):
        launch = s.prepare(kernel, grid, [table.view, ibuf, dst], block=block, scalars=scalars)

        def prepared(launch=launch):
            for _ in range(calls):
                launch.launch()
            return s.synchronize

        variants[name] = prepared

    def torch_run():
        for _ in range(calls):
            torch.index_select(table_t, 0, tidx)
        return torch.cuda.synchronize

    variants["torch"] = torch_run

    rates: dict[str, list[float]] = {k: [] for k in variants}
    host: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():  # warm
        fn()()
    for _ in range(args.rounds):
        for name, fn in variants.items():
            torch.cuda.synchronize()
            s.synchronize()
            t0, c0 = time.perf_counter(), time.thread_time()
            sync = fn()
            c1 = time.thread_time()
            sync()
            t1 = time.perf_counter()
            rates[name].append(moved * calls / (t1 - t0) / 1e12)
            host[name].append((c1 - c0) / calls * 1e6)
    torch_rate = statistics.median(rates["torch"])
    for name in variants:
        r = statistics.median(rates[name])
        print(f"{name:28s} {r:6.3f} TB/s  ({moved / r / 1e6:6.2f} us a call, {r / torch_rate:.3f}x torch)"
              f"  host CPU {statistics.median(host[name]):6.2f} us a call")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
