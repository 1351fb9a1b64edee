"""GPU time of row-gather kernel variants beside torch's index_select (cuda).

    python bench/tools/gather_variants.py [--reps 200]

For each shape (rows gathered x row length in BF16, from a table of ``--table`` rows)
and each variant, the GPU time per kernel from CUDA events around ``--reps``
back-to-back launches, the indices either in pinned host memory read by the kernel
(what gather_rows does: the host writes them, no copy command) or in device memory:

- ``block``: one block of 256 threads per row, four 16-byte loads in flight per thread
  (hrx_tensor's kernel at the time this tool was written);
- ``group<T>x<U>``: T threads per row (a power of two), each with U loads in flight; a
  block of 256 threads covers 256/T rows, and each thread reads its row's index.

A diagnostic for issue 18 (gather_rows >= 1.0x index_select): it writes no results file.
"""

from __future__ import annotations

import argparse

SRC = r"""
extern "C" __global__ void __launch_bounds__(256)
g_block(const uint4* __restrict__ table, const long long* __restrict__ idx, uint4* __restrict__ out,
        unsigned int units, unsigned int n) {
    __shared__ long long src_row;
    const unsigned int row = blockIdx.x;
    if (threadIdx.x == 0) src_row = idx[row];
    __syncthreads();
    const uint4* s = table + (size_t)src_row * units;
    uint4* d = out + (size_t)row * units;
    const unsigned int step = blockDim.x;
    for (unsigned int u = threadIdx.x; u < units; u += 4u * step) {
        const unsigned int u1 = u + step, u2 = u1 + step, u3 = u2 + step;
        const uint4 a = s[u];
        const uint4 b = s[u1 < units ? u1 : u];
        const uint4 c = s[u2 < units ? u2 : u];
        const uint4 e = s[u3 < units ? u3 : u];
        d[u] = a;
        if (u1 < units) d[u1] = b;
        if (u2 < units) d[u2] = c;
        if (u3 < units) d[u3] = e;
    }
}

template <int U>
__device__ __forceinline__ void g_group(const uint4* __restrict__ table, const long long* __restrict__ idx,
                                        uint4* __restrict__ out, unsigned int units, unsigned int n,
                                        unsigned int shift) {
    const unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int row = t >> shift, lane = t & ((1u << shift) - 1u), tpr = 1u << shift;
    if (row >= n) return;
    const long long r = idx[row];
    const uint4* s = table + (size_t)r * units;
    uint4* d = out + (size_t)row * units;
    for (unsigned int u = lane; u < units; u += tpr * U) {
        uint4 v[U];
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const unsigned int k = u + j * tpr;
            if (k < units) v[j] = __ldcs(s + k);
        }
#pragma unroll
        for (int j = 0; j < U; ++j) {
            const unsigned int k = u + j * tpr;
            if (k < units) __stcs(d + k, v[j]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) g_group4(const uint4* t, const long long* i, uint4* o, unsigned int u, unsigned int n, unsigned int sh) { g_group<4>(t, i, o, u, n, sh); }
extern "C" __global__ void __launch_bounds__(256) g_group8(const uint4* t, const long long* i, uint4* o, unsigned int u, unsigned int n, unsigned int sh) { g_group<8>(t, i, o, u, n, sh); }
"""

SHAPES = [(4096, 4096), (1024, 768), (4096, 1024), (64, 64), (1, 768), (1, 4096), (512, 1600)]


def gather_inputs(rng, table_rows: int, n: int, cols: int):
    """One gather shape's torch inputs: (BF16 table of ``table_rows`` x ``cols`` on the
    device, ``n`` random int64 indices as numpy, the same on the device, the same in
    pinned host memory, an empty output)."""
    import torch

    table = torch.randn(table_rows, cols, device="cuda", dtype=torch.bfloat16)
    idx_np = rng.integers(0, table_rows, n)
    out = torch.empty(n, cols, device="cuda", dtype=torch.bfloat16)
    return table, idx_np, torch.from_numpy(idx_np).cuda(), torch.from_numpy(idx_np).pin_memory(), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--table", type=int, default=151936)
    args = ap.parse_args()
    import cupy as cp
    import numpy as np
    import torch

    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    kernels = {name: mod.get_function(name) for name in ("g_block", "g_group4", "g_group8")}
    rng = np.random.default_rng(0)
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.current_stream()
    cstream = cp.cuda.ExternalStream(stream.cuda_stream)

    def gpu_us(fn):
        fn()
        torch.cuda.synchronize()
        ev0.record(stream)
        for _ in range(args.reps):
            fn()
        ev1.record(stream)
        torch.cuda.synchronize()
        return ev0.elapsed_time(ev1) * 1e3 / args.reps

    for n, cols in SHAPES:
        table, _, didx, hidx, out = gather_inputs(rng, args.table, n, cols)
        units = cols * 2 // 16
        moved = 2 * n * cols * 2
        expect = torch.index_select(table, 0, didx)
        t_us = gpu_us(lambda table=table, didx=didx: torch.index_select(table, 0, didx))
        line = [f"{n}x{cols}: index_select {t_us:7.2f} us ({moved / t_us / 1e6:5.2f} TB/s)"]
        for where, ix in (("host", hidx), ("dev", didx)):
            variants = [("block", "g_block", (n,), (256,), (units, n))]
            for shift in (2, 3, 4, 5, 6, 7, 8):
                tpr = 1 << shift
                if tpr > 4 * units and tpr > 4:
                    continue
                blocks = (n * tpr + 255) // 256
                for u in (4, 8):
                    variants.append((f"group{tpr}x{u}", f"g_group{u}", (blocks,), (256,), (units, n, shift)))
            for label, kname, grid, block, scal in variants:
                k = kernels[kname]
                params = (cp.uint64(table.data_ptr()), cp.uint64(ix.data_ptr()), cp.uint64(out.data_ptr()),
                          *(cp.uint32(v) for v in scal))

                def go(k=k, grid=grid, block=block, params=params):
                    with cstream:
                        k(grid, block, params)

                out.zero_()
                go()
                torch.cuda.synchronize()
                ok = torch.equal(out, expect)
                us = gpu_us(go)
                line.append(f"  {where:4s} {label:12s} {us:7.2f} us  {t_us / us:5.2f}x index_select{'' if ok else '  WRONG'}")
        print("\n".join(line), flush=True)
        table = None  # free it before the next shape's
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
