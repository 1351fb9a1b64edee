"""Where a gather's indices should live: pinned host memory, device memory, or the launch's parameters (cuda).

    python bench/tools/gather_param_probe.py [--rows 4096] [--cols 4096] [--rounds 7]

bench/tensor.py's ``tensor.cuda.gather_rows`` shape (``--rows`` rows of ``--cols`` BF16
from a 151936-row table) with hrx_tensor's gather kernel (the plan's threads a row),
launched through the driver (cupy's ``launchKernel``; the shipped sources,
``kernels.GATHER_CUDA`` and ``GATHER_PARAM_CUDA``) with its indices:

- ``host``: int64 in pinned host memory, read by the kernel over PCIe (what
  ``TensorOps.gather_rows`` does);
- ``dev``: int64 in device memory (what the graph figure binds);
- ``param``: uint32 in the kernel's parameters, ``hrx_tensor_gather_i4096``'s
  ``__grid_constant__`` record (CUDA 12.1+ allows 32764 bytes of parameters): the
  driver carries them with the launch, so no kernel waits for a host read.

Each is timed as bench/tensor.py times the eager call -- 50 launches back to back,
then a synchronization, wall time -- and on GPU time (CUDA events around 200
launches), beside torch ``index_select`` with device indices. The host time of one
launch call is printed too (the parameter copy is the driver's). A diagnostic for
issue 18 (gather_rows >= 1.0x index_select): it writes no results file.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gather_variants import gather_inputs  # noqa: E402 - bench/tools/gather_variants.py

PARAM_CAP = 4096  # the largest record hrx_tensor ships (kernels.GATHER_PARAM_CAPS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--table", type=int, default=151936)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not 0 < args.rows <= PARAM_CAP:
        print(f"--rows: 1..{PARAM_CAP} (the parameter variant's capacity)", file=sys.stderr)
        return 2
    import cupy as cp
    import numpy as np
    import torch
    from hrx_tensor.kernels import GATHER_CUDA, GATHER_PARAM_CUDA, gather_launch

    n, cols = args.rows, args.cols
    cap = PARAM_CAP
    mod = cp.RawModule(code=GATHER_CUDA + GATHER_PARAM_CUDA % {"cap": cap}, options=("-std=c++17",))
    f_ptr, f_param = mod.get_function("hrx_tensor_gather"), mod.get_function(f"hrx_tensor_gather_i{cap}")
    table, idx_np, didx, hidx, out = gather_inputs(np.random.default_rng(0), args.table, n, cols)
    units = cols * 2 // 16
    grid, block, shift = gather_launch(units, n)
    stream = torch.cuda.current_stream()
    sptr = stream.cuda_stream
    moved = 2 * n * cols * 2
    expect = torch.index_select(table, 0, didx)

    def params(values):
        """(void** array, the cells it points at) for cuLaunchKernel."""
        cells = list(values)  # ctypes objects: each parameter's bytes
        arr = (ctypes.c_void_p * len(cells))(*[ctypes.cast(ctypes.pointer(c), ctypes.c_void_p) for c in cells])
        return arr, cells

    shape = (ctypes.c_uint64(units), ctypes.c_uint32(16), ctypes.c_uint64(n), ctypes.c_uint32(shift))

    def ptr_args(ix):
        return params([ctypes.c_uint64(table.data_ptr()), ctypes.c_uint64(ix.data_ptr()), ctypes.c_uint64(out.data_ptr()),
                       *shape])

    idx_cell = (ctypes.c_uint32 * cap)(*idx_np.astype(np.uint32).tolist())
    param_args = params([ctypes.c_uint64(table.data_ptr()), ctypes.c_uint64(out.data_ptr()), *shape, idx_cell])
    host_args, dev_args = ptr_args(hidx), ptr_args(didx)
    launch = cp.cuda.driver.launchKernel

    def launcher(fn, arr):
        address = ctypes.addressof(arr)
        return lambda: launch(fn.kernel.ptr, grid, 1, 1, block, 1, 1, 0, sptr, address, 0)

    variants = {
        "host": launcher(f_ptr, host_args[0]),
        "dev": launcher(f_ptr, dev_args[0]),
        "param": launcher(f_param, param_args[0]),
        "index_select": lambda: torch.index_select(table, 0, didx),
    }
    for name, fn in variants.items():
        if name != "index_select":
            out.zero_()
            fn()
            torch.cuda.synchronize()
            print(f"{name}: {'ok' if torch.equal(out, expect) else 'WRONG'}")

    def eager(fn):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / 50 * 1e6

    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def gpu(fn):
        torch.cuda.synchronize()
        ev0.record(stream)
        for _ in range(200):
            fn()
        ev1.record(stream)
        torch.cuda.synchronize()
        return ev0.elapsed_time(ev1) * 1e3 / 200

    def host(fn):
        torch.cuda.synchronize()
        t = time.thread_time()
        for _ in range(20):
            fn()
        dt = (time.thread_time() - t) / 20 * 1e6
        torch.cuda.synchronize()
        return dt

    res: dict[str, dict[str, list[float]]] = {k: {"eager": [], "gpu": [], "host": []} for k in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            res[name]["eager"].append(eager(fn))
            res[name]["gpu"].append(gpu(fn))
            res[name]["host"].append(host(fn))
    ref = statistics.median(res["index_select"]["eager"])
    print(f"{n} rows x {cols} BF16 (grid {grid}, block {block}, {1 << shift} threads a row), medians of {args.rounds} rounds:")
    for name, r in res.items():
        e, g, h = (statistics.median(r[k]) for k in ("eager", "gpu", "host"))
        print(f"  {name:13s} eager {e:7.2f} us ({moved / e / 1e6:5.2f} TB/s, {ref / e:5.3f}x index_select)"
              f"  GPU {g:7.2f} us  host a launch {h:6.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
