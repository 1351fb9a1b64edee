"""The tensor kernels: one hrx Kernel each, with a host (numpy) and a CUDA C++ source.

``hrx_tensor_linear`` computes up to three projections of one BF16 input in one
dispatch: buffers x, w0, w1, w2 (read) and y (write, the outputs concatenated in
order); scalars K, N0, N1, N2, out_f32 (0: BF16 output, 1: F32) and ksplit (warps
per output row: 1, 2, 4 or 8). Unused weights are bound to w0 again with their N set
to 0. On CUDA ``ksplit`` warps of a block of LINEAR_WARPS compute one output row
(split-K inside the block: warp ``p`` of a row takes the 16-byte vectors ``p * 32 +
lane``, stepping ``32 * ksplit``), so a short N still fills the GPU; each lane keeps
four 16-byte loads of the weight row in flight (predicated past the row's end, so a
short row -- K = 768 is three vectors a lane -- has all its loads in flight at once;
non-allocating in L1), x is read through the read-only cache, four FP32 partial
sums per lane, a warp-shuffle reduction, then the row's ``ksplit`` partials summed in
warp order through shared memory (deterministic), and round to nearest even for BF16
output (the bit-exact equivalent of ``__float2bfloat16_rn``, written out so NVRTC
needs no cuda_bf16.h include path). :func:`linear_launch` picks ``ksplit`` and the
grid from the shape (the plan's choice, not a trial per call). On CUDA the plan also
picks a register budget (:func:`gemv_budget`): ``hrx_tensor_linear_b8`` is the same
kernel with two loads a lane and launch bounds of eight blocks an SM (32 registers
against 40), for grids that eight blocks an SM fill better.

``hrx_tensor_gather`` copies ``n`` rows of ``row_units`` units of ``width`` bytes
(16, 8, 4, 2 or 1 -- the widest dividing the row size and both offsets) from table
rows selected by int64 indices: bit-exact for every dtype. A group of threads per
row (:func:`gather_launch` sizes it from the row length), several rows per block,
four streaming loads in flight per thread. ``hrx_tensor_gather_i<CAP>`` is the same
copy with up to CAP uint32 indices passed in the launch's parameters (a record scalar,
:data:`GATHER_PARAM_CAPS`): no kernel waits on a read of host memory for its rows.

Both sources also compile for gfx1151 (``hrx_gpu.amdgpu``; ``__AMDGCN__`` selects the
portable streaming load there).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from ml_dtypes import bfloat16

from hrx_core.kernel import Kernel

from . import native

#: Warps per block of the CUDA GEMV (LINEAR_WARPS / ksplit output rows a block).
LINEAR_WARPS = 8
#: Split K over more warps while the grid has fewer blocks than this (~8 resident
#: blocks of 256 threads on each of an H200's 132 SMs)...
LINEAR_TARGET_BLOCKS = 1024
#: ...and each warp of a split row still has at least this many 16-byte vectors
#: (two per lane: four loads in flight need the row to be long enough to matter).
LINEAR_MIN_VECTORS_PER_WARP = 64
#: Rows at least this long (K) are split over at least LINEAR_LONG_ROW_SPLIT warps even
#: when the grid is full: measured on the H200 (bench/tools/gemv_variants.py), 8192x8192
#: and 16384x8192 ran at 3.25 / 3.43 TB/s with one warp a row and 3.65 / 3.91 TB/s with
#: four (torch: 3.78 / 4.02); in a later run 6144x8192 and 4096x16384 (K x N) ran at
#: 3.14 / 3.62 TB/s with one warp and 3.50 / 3.78 with four (torch 3.67 / 3.90).
LINEAR_LONG_ROW = 4096
LINEAR_LONG_ROW_SPLIT = 4
#: Rows of 8192 or more, at least 2048 of them, use all LINEAR_WARPS warps a row:
#: measured on the H200 (bench/tools/gemv_variants.py) against four warps a row,
#: 8192x2048 12.6 / 13.9 us, 8192x8192 35.8 / 36.8, 16384x2048 21.3 / 23.3, 16384x4096
#: 36.3 / 37.5, 12288x12288 74.8 / 75.8, 16384x16384 129.7 / 130.2 (K x N). Fewer rows
#: lose (12288x1536 14.1 / 13.5, 16384x1024 13.8 / 13.1), as do shorter rows (4096x16384
#: 42.4 / 35.5). A persistent grid looping over rows (the tool's ``--rows``) lost everywhere.
LINEAR_LONGER_ROW = 8192
LINEAR_LONGER_ROW_MIN_N = 2048
#: Hopper (sm_90+) streams long rows with bulk copies (``hrx_tensor_linear_bulk``): a
#: persistent grid of LINEAR_BULK_BLOCKS_PER_SM blocks of LINEAR_BULK_THREADS threads on
#: each SM, each block a ring of LINEAR_BULK_STAGES shared-memory stages that the copy
#: engine fills with chunks of at most LINEAR_BULK_CHUNK bytes of a weight row (an
#: mbarrier completes each). Measured on the H200 (bench/tools/gemv_variants.py
#: ``--bulk``) against the plan's warp-per-row kernel: 16384x16384 122.6 / 130.1 us,
#: 16384x4096 34.6 / 36.5, 12288x6144 38.4 / 40.1 (torch 125.2 / 36.6 / 43.7); even at
#: 8192x8192 (35.6 / 35.8) and slower at 4096x16384 (36.1 / 35.6) (K x N). A second run:
#: 12288x4096 28.1 / 28.6, 12288x8192 50.1 / 51.9, 12288x16384 95.0 / 98.4, 16384x6144
#: 51.2 / 52.2, 16384x12288 96.4 / 99.0, 16384x4096 36.5 / 36.4; slower for fewer rows
#: (16384x2048 21.5 / 21.1, 8192x4096 22.1 / 20.0). Chosen for rows of
#: LINEAR_BULK_MIN_K or more with at least LINEAR_BULK_MIN_N of them. Not for many rows
#: of medium length: alone the 256-thread kernel beat the eight-block warp kernel there
#: (gemv_variants.py, us: 8192x16384 64.41 / 66.33 and 64.50 / 66.36, 8192x12288 49.96 /
#: 51.05, 6144x16384 50.64 / 51.58), but two projections in one runtime region, which
#: the warp kernels run as concurrent branches and bulk kernels one after another, ran
#: slower (bench/tools/plan_ab.py, weight TB/s, bulk / warp: 6144x12288 3.568 / 3.659,
#: 6144x16384 3.709 / 3.781, 8192x16384 3.795 / 3.859, 8192x12288 3.839 / 3.833).
LINEAR_BULK_MIN_K = 12288
LINEAR_BULK_MIN_N = 4096
LINEAR_BULK_BLOCKS_PER_SM = 8
#: Threads a block of the bulk GEMV: 256 (``hrx_tensor_linear_bulk_t256``), or
#: LINEAR_BULK_THREADS for rows of LINEAR_BULK_SMALL_MIN_K or more with at least
#: LINEAR_BULK_SMALL_MIN_N of them. Measured on the H200 (gemv_variants.py ``--bulk``,
#: 128 / 256 threads, us): 16384x4096 36.80 / 34.86 and 36.17 / 35.03, 12288x12288 71.66
#: / 71.08, 8192x16384 65.18 / 64.50, 12288x6144 38.77 / 38.57, 12288x8192 49.61 / 49.92;
#: but 16384x16384 122.71 / 125.04 and 16384x8192 64.73 / 65.31. 512 threads, 4 KiB
#: chunks, four blocks an SM or a third stage were 1-25% slower.
LINEAR_BULK_THREADS = 128
LINEAR_BULK_WIDE_THREADS = 256
LINEAR_BULK_SMALL_MIN_K = 16384
LINEAR_BULK_SMALL_MIN_N = 8192
LINEAR_BULK_STAGES = 2
LINEAR_BULK_CHUNK = 8192
#: The bulk GEMV pays only where each SM must keep many bytes in flight: where the
#: memory's peak bandwidth per SM (the cuda device property ``memory_bandwidth`` over
#: ``multiprocessors``) is at least this many bytes a second. The H200 (4.9 TB/s peak,
#: 132 SMs: 37 GB/s an SM) measured the bulk kernel ahead (above); the H100 SXM (3.35
#: TB/s, 132 SMs: 25 GB/s an SM) measured it behind the eight-block warp kernel at all
#: six bulk shapes in two runs (bench/tools/plan_ab.py, weight TB/s, eager / as a
#: region: 12288x4096 warp 1.032x / 1.077x the bulk kernel, 12288x8192 1.049 / 1.081,
#: 12288x16384 1.025 / 1.008, 16384x4096 1.043 / 1.059, 16384x8192 1.050 / 1.036,
#: 16384x16384 1.012 / 1.029). A device that reports no bandwidth keeps the bulk kernel.
LINEAR_BULK_MIN_BANDWIDTH_PER_SM = 30e9
#: Threads per block of the CUDA gather (at most; fewer when all rows need fewer).
GATHER_THREADS = 256
#: Threads per gathered row: about one per GATHER_UNITS_PER_THREAD units of the row, a
#: power of two from 4 to 32. Measured on the H200 (bench/tools/gather_variants.py,
#: 4096 rows of 4096 BF16, indices in host memory): one block of 256 threads a row ran
#: at 22.4 us, 16 to 64 threads a row at 19.1-19.5 us, torch index_select 20.1 us.
GATHER_UNITS_PER_THREAD = 16
GATHER_MAX_SHIFT = 5
GATHER_FILL = 65536
#: Host GEMV: rows converted from BF16 to F32 per step, sized to stay in cache.
HOST_CHUNK_BYTES = 256 * 1024

GRID_DEPENDENCIES_CUDA = r"""
#ifndef HRX_GRID_DEPENDENCIES
#define HRX_GRID_DEPENDENCIES
// Programmatic dependent launch (sm_90+; kernels declared programmatic=True call this
// first, in every block): wait until the kernels this one depends on have finished and
// their writes are visible, then let the kernels that depend on this one launch. A
// graph may launch this kernel before its predecessors finish; launched any other way
// both instructions return at once.
__device__ __forceinline__ void hrx_grid_dependencies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__AMDGCN__)
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
#endif
"""

GEMV_CUDA = GRID_DEPENDENCIES_CUDA + r"""
__device__ __forceinline__ uint4 hrx_ld_stream(const uint4* p) {
#ifdef __AMDGCN__
    return __ldcs(p);  // gfx1151 (hrx_gpu.amdgpu prelude): nontemporal loads
#else
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    return r;
#endif
}

// A zero vector, member by member (no make_uint4: NVRTC compiles these without includes).
__device__ __forceinline__ uint4 hrx_zero4() {
    uint4 z;
    z.x = 0u; z.y = 0u; z.z = 0u; z.w = 0u;
    return z;
}

__device__ __forceinline__ float hrx_dot2(unsigned int a, unsigned int b, float acc) {
    acc += __uint_as_float(a << 16) * __uint_as_float(b << 16);
    acc += __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
    return acc;
}

__device__ __forceinline__ float hrx_dot8(uint4 a, uint4 b, float acc) {
    acc = hrx_dot2(a.x, b.x, acc);
    acc = hrx_dot2(a.y, b.y, acc);
    acc = hrx_dot2(a.z, b.z, acc);
    acc = hrx_dot2(a.w, b.w, acc);
    return acc;
}

// Where a warp of a GEMV block works: ``ks`` warps (1, 2, 4, 8; anything else is 1) share
// each output row, so a block computes (blockDim / 32) / ks rows.
struct HrxGemvWarp {
    unsigned int lane, warp, ks, out, piece;
    bool active;  // a real row (uniform across the warp)
};

__device__ __forceinline__ HrxGemvWarp hrx_gemv_warp(unsigned int ksplit, unsigned int n_rows) {
    HrxGemvWarp r;
    r.lane = threadIdx.x & 31u;
    r.warp = threadIdx.x >> 5;
    r.ks = (ksplit == 2u || ksplit == 4u || ksplit == 8u) ? ksplit : 1u;
    const unsigned int rows = (blockDim.x >> 5) / r.ks;
    r.out = blockIdx.x * rows + r.warp / r.ks;
    r.piece = r.warp % r.ks;
    r.active = r.warp / r.ks < rows && r.out < n_rows;
    return r;
}

// HRX_GEMV_UNROLL 16-byte loads of one unrolled step of a lane at vector i, stepping
// ``stride`` (predicated: past the row's end a lane loads nothing). A source may define
// HRX_GEMV_UNROLL (2, 4, 8 or 16) before this code; 4 unless it does.
#ifndef HRX_GEMV_UNROLL
#define HRX_GEMV_UNROLL 4
#endif
struct HrxGemvLoads {
    uint4 v[HRX_GEMV_UNROLL];
};

__device__ __forceinline__ HrxGemvLoads hrx_gemv_load(const uint4* wr, unsigned int i, unsigned int stride,
                                                      unsigned int nvec) {
    const uint4 zero = hrx_zero4();
    HrxGemvLoads l;
    #pragma unroll
    for (unsigned int u = 0; u < HRX_GEMV_UNROLL; ++u)
        l.v[u] = i + u * stride < nvec ? hrx_ld_stream(wr + i + u * stride) : zero;
    return l;
}

// The loads of the warp's first step: a caller issues them early (before a prologue that
// computes x, say) so that the weights stream while it works.
__device__ __forceinline__ HrxGemvLoads hrx_gemv_first(const uint4* wr, unsigned int nvec, const HrxGemvWarp& r) {
    return hrx_gemv_load(wr, r.lane + 32u * r.piece, 32u * r.ks, nvec);
}

// The warp's share of one row's dot product with x, summed across the warp (every lane
// holds it): vectors ``piece * 32 + lane``, stepping 32 * ks, HRX_GEMV_UNROLL 16-byte
// weight loads a lane issued before use; ``first`` holds the first step's
// (hrx_gemv_first). ``X_SHARED``: x is in shared memory (plain loads), else global (the
// read-only cache). One accumulator per load of a step, summed pairwise at the end.
template <bool X_SHARED>
__device__ __forceinline__ float hrx_gemv_dot(const uint4* x, const uint4* wr, unsigned int nvec, const HrxGemvWarp& r,
                                              HrxGemvLoads first) {
    const unsigned int stride = 32u * r.ks, start = r.lane + 32u * r.piece;
    float a[HRX_GEMV_UNROLL];
    #pragma unroll
    for (unsigned int u = 0; u < HRX_GEMV_UNROLL; ++u) a[u] = 0.f;
    HrxGemvLoads l = first;
    for (unsigned int i = start; i < nvec; i += HRX_GEMV_UNROLL * stride) {
        if (i != start) l = hrx_gemv_load(wr, i, stride, nvec);
        #pragma unroll
        for (unsigned int u = 0; u < HRX_GEMV_UNROLL; ++u) {
            const unsigned int iu = i + u * stride;
            if (iu < nvec) a[u] = hrx_dot8(l.v[u], X_SHARED ? x[iu] : __ldg(x + iu), a[u]);
        }
    }
    #pragma unroll
    for (unsigned int w = 1; w < HRX_GEMV_UNROLL; w <<= 1) {
        #pragma unroll
        for (unsigned int u = 0; u + w < HRX_GEMV_UNROLL; u += 2u * w) a[u] += a[u + w];
    }
    float s = a[0];
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// The row's sum from its ks warps' shares, in warp order (deterministic), valid in the
// row's first warp (piece 0). Called by every thread of the block (a barrier when ks > 1);
// ``partial``: 32 floats of shared memory.
__device__ __forceinline__ float hrx_gemv_combine(float s, const HrxGemvWarp& r, float* partial) {
    if (r.ks == 1u) return s;
    if (r.lane == 0) partial[r.warp] = s;
    __syncthreads();
    if (r.piece == 0u)
        for (unsigned int p = 1; p < r.ks; ++p) s += partial[r.warp + p];
    return s;
}
"""

# Round to nearest even (bit-exact __float2bfloat16_rn without cuda_bf16.h).
BF16_RN_CUDA = r"""
__device__ __forceinline__ unsigned short hrx_f32_to_bf16_rn(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
"""

LINEAR_CUDA = GEMV_CUDA + BF16_RN_CUDA + r"""

extern "C" __global__ void __launch_bounds__(256)
hrx_tensor_linear(const uint4* __restrict__ x, const unsigned short* __restrict__ w0,
                  const unsigned short* __restrict__ w1, const unsigned short* __restrict__ w2,
                  unsigned char* __restrict__ y, unsigned int K, unsigned int N0, unsigned int N1,
                  unsigned int N2, unsigned int out_f32, unsigned int ksplit) {
    hrx_grid_dependencies();
    __shared__ float partial[32];
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N0 + N1 + N2);
    float s = 0.f;
    if (r.active) {
        const unsigned short* w;
        unsigned int row = r.out;
        if (row < N0) {
            w = w0;
        } else if (row < N0 + N1) {
            w = w1; row -= N0;
        } else {
            w = w2; row -= N0 + N1;
        }
        const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * K);
        s = hrx_gemv_dot<false>(x, wr, K >> 3, r, hrx_gemv_first(wr, K >> 3, r));
    }
    s = hrx_gemv_combine(s, r, partial);
    if (r.active && r.piece == 0u && r.lane == 0) {
        if (out_f32) reinterpret_cast<float*>(y)[r.out] = s;
        else reinterpret_cast<unsigned short*>(y)[r.out] = hrx_f32_to_bf16_rn(s);
    }
}
"""

_LINEAR_BULK_BODY = r"""
#define HRX_BULK_THREADS %(threads)d
#define HRX_BULK_STAGES %(stages)d
#define HRX_BULK_CHUNK %(chunk)d

#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned int hrx_shared_u32(const void* p) {
    unsigned int a;
    asm volatile("{ .reg .u64 p; cvta.to.shared.u64 p, %%1; cvt.u32.u64 %%0, p; }\n" : "=r"(a) : "l"(p));
    return a;
}

// Thread 0: chunk ``c`` of this block's rows (block b owns rows b, b + gridDim.x, ...,
// ``cpr`` chunks of ``chunk`` bytes each) into stage ``dst``, completing barrier ``bar``.
__device__ __forceinline__ void hrx_bulk_issue(unsigned int dst, unsigned int bar, unsigned int c, unsigned int cpr,
                                               unsigned int chunk, unsigned int row_bytes,
                                               const unsigned char* w0, const unsigned char* w1,
                                               const unsigned char* w2, unsigned int n0, unsigned int n1) {
    unsigned int row = blockIdx.x + (c / cpr) * gridDim.x;
    const unsigned int part = c %% cpr;
    const unsigned char* w = w0;
    if (row >= n0 + n1) {
        w = w2; row -= n0 + n1;
    } else if (row >= n0) {
        w = w1; row -= n0;
    }
    const unsigned char* src = w + (size_t)row * row_bytes + (size_t)part * chunk;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%0], %%1;\n" :: "r"(bar), "r"(chunk) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%%0], [%%1], %%2, [%%3];\n"
                 :: "r"(dst), "l"(src), "r"(chunk), "r"(bar) : "memory");
}

__device__ __forceinline__ void hrx_bulk_wait(unsigned int bar, unsigned int phase) {
    asm volatile(
        "{\n .reg .pred done;\n"
        "WAIT_%%=:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 done, [%%0], %%1;\n"
        " @!done bra WAIT_%%=;\n}\n" :: "r"(bar), "r"(phase) : "memory");
}
#endif

// The same arguments as hrx_tensor_linear, but ``chunk`` (bytes: a divisor of K * 2, a
// multiple of 16, at most HRX_BULK_CHUNK) in place of ksplit; any grid (a persistent
// one: the plan launches LINEAR_BULK_BLOCKS_PER_SM blocks an SM). Each chunk lands in a
// stage through the copy engine; every thread reads 16-byte vectors of it (conflict-free)
// against x through the read-only cache, one F32 sum a thread; a row's sum is reduced
// across the block in warp order (deterministic) once its last chunk is read, and thread
// 0 refills the stage once every thread is done with it.
extern "C" __global__ void __launch_bounds__(%(threads)d)
%(name)s(const uint4* __restrict__ x, const unsigned char* __restrict__ w0,
                       const unsigned char* __restrict__ w1, const unsigned char* __restrict__ w2,
                       unsigned char* __restrict__ y, unsigned int K, unsigned int N0, unsigned int N1,
                       unsigned int N2, unsigned int out_f32, unsigned int chunk) {
    hrx_grid_dependencies();
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ __align__(128) uint4 ring[HRX_BULK_STAGES][HRX_BULK_CHUNK / 16];
    __shared__ __align__(8) unsigned long long bars[HRX_BULK_STAGES];
    __shared__ float red[2][HRX_BULK_THREADS / 32];  // by row parity: thread 0 reads one while the next row writes the other
    const unsigned int t = threadIdx.x, lane = t & 31u, warp = t >> 5;
    const unsigned int n = N0 + N1 + N2, row_bytes = K * 2u, cpr = row_bytes / chunk, nv = chunk >> 4;
    const unsigned int rows = blockIdx.x < n ? (n - blockIdx.x + gridDim.x - 1u) / gridDim.x : 0u;
    const unsigned int total = rows * cpr;  // this block's chunks
    if (t == 0) {
        for (unsigned int s = 0; s < HRX_BULK_STAGES; ++s)
            asm volatile("mbarrier.init.shared::cta.b64 [%%0], 1;\n" :: "r"(hrx_shared_u32(&bars[s])) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (t == 0)
        for (unsigned int c = 0; c < HRX_BULK_STAGES && c < total; ++c)
            hrx_bulk_issue(hrx_shared_u32(ring[c]), hrx_shared_u32(&bars[c]), c, cpr, chunk, row_bytes, w0, w1, w2, N0, N1);
    float acc = 0.f;
    for (unsigned int c = 0; c < total; ++c) {
        const unsigned int s = c %% HRX_BULK_STAGES, lr = c / cpr, part = c - lr * cpr;
        hrx_bulk_wait(hrx_shared_u32(&bars[s]), (c / HRX_BULK_STAGES) & 1u);
        const uint4* xs = x + part * nv;
        for (unsigned int v = t; v < nv; v += HRX_BULK_THREADS) acc = hrx_dot8(ring[s][v], __ldg(xs + v), acc);
        const bool row_end = part == cpr - 1u;
        if (row_end) {
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (lane == 0) red[lr & 1u][warp] = acc;
            acc = 0.f;
        }
        __syncthreads();  // stage s is read (and red written) by every thread
        if (t == 0) {
            if (row_end) {
                float sum = 0.f;
                #pragma unroll
                for (unsigned int i = 0; i < HRX_BULK_THREADS / 32; ++i) sum += red[lr & 1u][i];
                const unsigned int row = blockIdx.x + lr * gridDim.x;
                if (out_f32) reinterpret_cast<float*>(y)[row] = sum;
                else reinterpret_cast<unsigned short*>(y)[row] = hrx_f32_to_bf16_rn(sum);
            }
            if (c + HRX_BULK_STAGES < total)
                hrx_bulk_issue(hrx_shared_u32(ring[s]), hrx_shared_u32(&bars[s]), c + HRX_BULK_STAGES, cpr, chunk,
                               row_bytes, w0, w1, w2, N0, N1);
        }
    }
#elif defined(__AMDGCN__)
    __builtin_trap();  // CUDA sm_90+ only: the plan never launches it elsewhere
#else
    asm volatile("trap;");  // (NVRTC has no __builtin_trap)
#endif
}
"""


def linear_bulk_source(threads: int = LINEAR_BULK_THREADS, stages: int = LINEAR_BULK_STAGES,
                       chunk: int = LINEAR_BULK_CHUNK, name: str = "hrx_tensor_linear_bulk") -> str:
    """CUDA source of the bulk-copy GEMV as kernel ``name`` with ``threads`` a block,
    ``stages`` ring stages of ``chunk`` bytes (the shipped kernels: the LINEAR_BULK_*
    constants at LINEAR_BULK_THREADS and LINEAR_BULK_WIDE_THREADS threads;
    bench/tools/gemv_variants.py measures others)."""
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads {threads}: expected a multiple of 32 from 32 to 1024")
    body = _LINEAR_BULK_BODY % {"threads": threads, "stages": stages, "chunk": chunk, "name": name}
    return GEMV_CUDA + BF16_RN_CUDA + body


LINEAR_BULK_CUDA = linear_bulk_source()
LINEAR_BULK_T256_CUDA = linear_bulk_source(LINEAR_BULK_WIDE_THREADS, name="hrx_tensor_linear_bulk_t256")

GATHER_CUDA = GRID_DEPENDENCIES_CUDA + r"""
// Row ``row`` of the output is row idx[row] of the table, copied in units of T (the
// widest of 16/8/4/2/1 bytes dividing the row size and both offsets) by a group of
// 2**shift threads (the plan's choice from the row length, gather_launch); a block of
// 256 threads covers several rows, so the indices' latency (they live in host-visible
// memory) is paid by many rows at once. Each thread keeps four loads in flight, with
// streaming (evict-first) loads and stores on CUDA: a gathered row is read once.
template <typename T>
__device__ __forceinline__ T hrx_gather_ld(const T* p) {
#ifdef __AMDGCN__
    return *p;
#else
    return __ldcs(p);
#endif
}

template <typename T>
__device__ __forceinline__ void hrx_gather_st(T* p, const T v) {
#ifdef __AMDGCN__
    *p = v;
#else
    __stcs(p, v);
#endif
}

template <typename T>
__device__ __forceinline__ void hrx_gather_row(const T* __restrict__ s, T* __restrict__ d, unsigned long long units,
                                               unsigned int lane, unsigned int tpr) {
    if (units < (1ull << 32) - 4ull * tpr) {  // 32-bit unit indices
        const unsigned int n = (unsigned int)units;
        for (unsigned int u = lane; u < n; u += 4u * tpr) {
            const unsigned int u1 = u + tpr, u2 = u1 + tpr, u3 = u2 + tpr;
            // past the row's end a lane reloads unit u (no branch, no uninitialized value)
            const T a = hrx_gather_ld(s + u);
            const T b = hrx_gather_ld(s + (u1 < n ? u1 : u));
            const T c = hrx_gather_ld(s + (u2 < n ? u2 : u));
            const T e = hrx_gather_ld(s + (u3 < n ? u3 : u));
            hrx_gather_st(d + u, a);
            if (u1 < n) hrx_gather_st(d + u1, b);
            if (u2 < n) hrx_gather_st(d + u2, c);
            if (u3 < n) hrx_gather_st(d + u3, e);
        }
    } else {
        for (unsigned long long u = lane; u < units; u += tpr) d[u] = s[u];
    }
}

// Output row ``row`` from table row ``src_row``, by this thread's lane of its row's group.
__device__ __forceinline__ void hrx_gather_one(const unsigned char* __restrict__ table, unsigned long long src_row,
                                               unsigned char* __restrict__ out, unsigned long long row,
                                               unsigned long long row_units, unsigned int width,
                                               unsigned int lane, unsigned int tpr) {
    const unsigned long long src = src_row * row_units, dst = row * row_units;
    switch (width) {
        case 16: hrx_gather_row(reinterpret_cast<const uint4*>(table) + src, reinterpret_cast<uint4*>(out) + dst, row_units, lane, tpr); break;
        case 8: hrx_gather_row(reinterpret_cast<const uint2*>(table) + src, reinterpret_cast<uint2*>(out) + dst, row_units, lane, tpr); break;
        case 4: hrx_gather_row(reinterpret_cast<const unsigned int*>(table) + src, reinterpret_cast<unsigned int*>(out) + dst, row_units, lane, tpr); break;
        case 2: hrx_gather_row(reinterpret_cast<const unsigned short*>(table) + src, reinterpret_cast<unsigned short*>(out) + dst, row_units, lane, tpr); break;
        default: hrx_gather_row(table + src, out + dst, row_units, lane, tpr); break;
    }
}

extern "C" __global__ void __launch_bounds__(256)
hrx_tensor_gather(const unsigned char* __restrict__ table, const long long* __restrict__ idx,
                  unsigned char* __restrict__ out, unsigned long long row_units, unsigned int width,
                  unsigned long long n, unsigned int shift) {
    hrx_grid_dependencies();
    const unsigned long long t = (blockIdx.x + (unsigned long long)blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    const unsigned long long row = t >> shift;
    if (row >= n) return;
    const unsigned int tpr = 1u << shift;
    hrx_gather_one(table, (unsigned long long)idx[row], out, row, row_units, width, (unsigned int)t & (tpr - 1u), tpr);
}
"""


def _host_matvec(w32: np.ndarray, x_even: np.ndarray, x_odd: np.ndarray, out: np.ndarray) -> None:
    """out[n] = sum_k bf16(w[n, k]) * x[k] in FP32, a cache-sized block of rows at a time.

    ``w32`` views each row as uint32 pairs of BF16: the high half of a pair (an odd
    element) is already an F32 once its low 16 bits are masked off, the low half (an
    even element) once shifted up 16 bits. Both are same-type SIMD ufuncs into
    reused, cache-resident scratch, followed by two BLAS sgemv over the halves:
    memory traffic stays at the 2 bytes per weight of the BF16 matrix itself.
    """
    n, k2 = w32.shape
    rows = max(1, min(n, HOST_CHUNK_BYTES // (4 * k2)))
    hi = np.empty((rows, k2), dtype=np.uint32)
    lo = np.empty((rows, k2), dtype=np.uint32)
    part = np.empty(n, dtype=np.float32)
    mask, shift = np.uint32(0xFFFF0000), np.uint32(16)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        a, b = hi[: r1 - r0], lo[: r1 - r0]
        np.bitwise_and(w32[r0:r1], mask, out=a)
        np.left_shift(w32[r0:r1], shift, out=b)
        np.matmul(a.view(np.float32), x_odd, out=out[r0:r1])
        np.matmul(b.view(np.float32), x_even, out=part[r0:r1])
    out += part


#: Use the compiled C GEMV where it builds (tests switch it off to cover the numpy path).
USE_NATIVE = True


def linear_split(k: int, n: int) -> int:
    """Warps per output row of the CUDA GEMV for K = ``k`` and ``n`` output rows: split K
    (1, 2, 4, 8) while the grid is short of LINEAR_TARGET_BLOCKS and every warp keeps at
    least LINEAR_MIN_VECTORS_PER_WARP vectors of its row; rows of LINEAR_LONG_ROW or more
    are split at least LINEAR_LONG_ROW_SPLIT ways, and LINEAR_WARPS ways from
    LINEAR_LONGER_ROW with at least LINEAR_LONGER_ROW_MIN_N rows."""
    ks, nvec = 1, k // 8
    while (ks < LINEAR_WARPS and -(-n * ks // LINEAR_WARPS) < LINEAR_TARGET_BLOCKS
           and nvec >= 2 * ks * LINEAR_MIN_VECTORS_PER_WARP):
        ks *= 2
    if k >= LINEAR_LONGER_ROW and n >= LINEAR_LONGER_ROW_MIN_N:
        return LINEAR_WARPS
    if k >= LINEAR_LONG_ROW:
        ks = max(ks, LINEAR_LONG_ROW_SPLIT)
    return ks


def linear_launch(k: int, n: int) -> tuple[int, int, int]:
    """(grid, block, ksplit) of the GEMV kernel for K = ``k`` and ``n`` output rows in all."""
    ks = linear_split(k, n)
    return -(-n // (LINEAR_WARPS // ks)), LINEAR_WARPS * 32, ks


#: Register budgets of the warp GEMV on CUDA: minimum blocks of 256 threads an SM ->
#: HRX_GEMV_UNROLL (16-byte weight loads a lane keeps in flight). ``hrx_tensor_linear``
#: as written takes 40 registers with four loads (six blocks an SM); eight blocks fit
#: 32 registers, two loads (``hrx_tensor_linear_b8``; four loads at eight blocks spill).
#: Measured on the H200 (bench/tools/budget_ab.py: GPU time per launch at the plan's
#: grid and split, weights rotated through 768 MiB) at the 63 shapes of the tensor sweep
#: where gemv_budget picks eight: six / eight 1.062 in geometric mean, up to 1.25
#: (16384x1024: 13.91 against 11.11 us; 2560x4096 10.01 / 8.08), worst 0.968 (2048x1536,
#: 6 MiB: 5.53 / 5.71; grids of one wave with two vectors a lane lose 2-3% when launched
#: alone, where GPT-2 decode's graphs gain); GPT-2 decode's fused GEMVs share the rule.
GEMV_BUDGETS = {6: 4, 8: 2}


def gemv_lane_share(k: int, ksplit: int) -> int:
    """16-byte vectors of a row of ``k`` BF16 values that one lane of a GEMV warp streams
    when ``ksplit`` warps share the row (at most; the last lanes may stream one fewer)."""
    return -(-(k // 8) // (32 * ksplit))


def gemv_budget(grid: int, sms: int, share: int) -> int:
    """The register budget (minimum blocks an SM, a key of GEMV_BUDGETS) of a warp GEMV
    of ``grid`` blocks on ``sms`` multiprocessors whose lanes each stream at most
    ``share`` vectors of a row (:func:`gemv_lane_share`).

    Eight blocks an SM, unless the grid fits in one wave at six and two loads a lane
    would take more steps than four (``ceil(share / 2) > ceil(share / 4)``): then the
    room gains nothing and each warp waits for memory once more. Beyond one wave, eight
    blocks an SM run fewer waves or a smaller last one; within one, the room left lets
    the next kernel's blocks start early (programmatic dependent launch). Measured on
    the H200 with GPT-2 decode (hrx_models' fused GEMVs, us a token, every GEMV at six /
    at eight / this rule): GPT-2 small 238.0 / 246.3 / 238.3 (its GEMVs: three vectors a
    lane, 96-384 blocks), gpt2-medium 609.6 / 550.2 / eight everywhere, 1.3B 1200.7 /
    1133.7 / eight everywhere; a rule taking six wherever both needed as many waves ran
    gpt2-medium at 559.6 and 1.3B at 1142.7."""
    if grid <= 0 or sms <= 0 or share <= 0:
        raise ValueError(f"grid {grid}, sms {sms} and share {share} must be positive")
    few, many = min(GEMV_BUDGETS), max(GEMV_BUDGETS)
    steps = {blocks: -(-share // unroll) for blocks, unroll in GEMV_BUDGETS.items()}
    return few if grid <= few * sms and steps[many] > steps[few] else many


def budget_source(src: str, name: str, new_name: str, blocks: int) -> str:
    """CUDA source ``src`` of kernel ``name`` (declared ``__launch_bounds__(256) name(``,
    once) as kernel ``new_name`` at register budget ``blocks``: at least that many
    blocks an SM, GEMV_BUDGETS[blocks] loads a lane (HRX_GEMV_UNROLL, defined first)."""
    if blocks not in GEMV_BUDGETS:
        raise ValueError(f"blocks {blocks}: expected one of {sorted(GEMV_BUDGETS)}")
    bounds = re.compile(r"__launch_bounds__\(256\)(\s+)" + re.escape(name) + r"\(")
    if len(bounds.findall(src)) != 1:
        raise ValueError(f"kernel {name!r} has no CUDA source with a register budget to set")
    body = bounds.sub(lambda m: f"__launch_bounds__(256, {blocks}){m.group(1)}{new_name}(", src)
    return f"#define HRX_GEMV_UNROLL {GEMV_BUDGETS[blocks]}\n" + body


def linear_bulk_chunk(k: int, limit: int = LINEAR_BULK_CHUNK) -> int:
    """Bytes a bulk copy of the Hopper GEMV moves: the largest divisor of a row (K * 2
    bytes) that is a multiple of 16 and at most ``limit``, a ring stage (K is a multiple of 8)."""
    if k <= 0 or k % 8:
        raise ValueError(f"K = {k} is not a positive multiple of 8")
    row = 2 * k
    parts = -(-row // limit)
    while row % parts or (row // parts) % 16:
        parts += 1
    return row // parts


def bulk_linear_pays(properties: Any) -> bool:
    """Whether the GEMV plan streams long rows through the bulk-copy kernel on a device
    of these cuda ``properties``: Hopper or later (compute capability 9.0+) with a known
    SM count, and a peak memory bandwidth per SM of LINEAR_BULK_MIN_BANDWIDTH_PER_SM or
    more (or none reported)."""
    try:
        major = str(properties.get("compute_capability", "0")).split(".")[0]
        sms = int(properties.get("multiprocessors", 0) or 0)
        bandwidth = int(properties.get("memory_bandwidth", 0) or 0)
    except (AttributeError, TypeError, ValueError):  # not a mapping of numbers: no choice made
        return False
    if not major.isdigit() or int(major) < 9 or sms <= 0:
        return False
    return bandwidth <= 0 or bandwidth / sms >= LINEAR_BULK_MIN_BANDWIDTH_PER_SM


def linear_bulk_launch(k: int, n: int, sms: int) -> tuple[int, int, int] | None:
    """(grid, block, chunk bytes) of the Hopper bulk-copy GEMV for K = ``k`` and ``n``
    output rows on ``sms`` multiprocessors, or None where the warp-per-row kernel is
    the plan's choice (shorter or fewer rows). The block is LINEAR_BULK_THREADS or
    LINEAR_BULK_WIDE_THREADS threads: the kernel of that many (:data:`BULK_BY_THREADS`)."""
    if k < LINEAR_BULK_MIN_K or n < LINEAR_BULK_MIN_N:
        return None
    small = k >= LINEAR_BULK_SMALL_MIN_K and n >= LINEAR_BULK_SMALL_MIN_N
    threads = LINEAR_BULK_THREADS if small else LINEAR_BULK_WIDE_THREADS
    return min(n, sms * LINEAR_BULK_BLOCKS_PER_SM), threads, linear_bulk_chunk(k)


def _linear_host(x: np.ndarray, w0: np.ndarray, w1: np.ndarray, w2: np.ndarray, y: np.ndarray,
                 k: np.uint32 | int, n0: np.uint32, n1: np.uint32, n2: np.uint32, out_f32: np.uint32,
                 ksplit: np.uint32) -> None:
    k = int(k)
    xf = (x.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    x_even, x_odd = np.ascontiguousarray(xf[0::2]), np.ascontiguousarray(xf[1::2])
    total = int(n0) + int(n1) + int(n2)
    acc = np.empty(total, dtype=np.float32)
    start = 0
    for w, n in ((w0, int(n0)), (w1, int(n1)), (w2, int(n2))):
        if n:
            dst = acc[start : start + n]
            if not (USE_NATIVE and native.gemv(w[: n * k * 2].view(np.uint16), xf[:k], dst, n, k)):
                _host_matvec(w[: n * k * 2].view(np.uint32).reshape(n, k // 2), x_even, x_odd, dst)
            start += n
    if out_f32:
        y[: total * 4].view(np.float32)[:] = acc
    else:
        y[: total * 2].view(bfloat16)[:] = acc.astype(bfloat16)  # round to nearest even


def gather_launch(units: int, n: int) -> tuple[int, int, int]:
    """(grid, block, shift) of gathering ``n`` rows of ``units`` units each: 2**shift
    threads per row, blocks of up to GATHER_THREADS threads.

    About one thread per GATHER_UNITS_PER_THREAD units (4 to 32 a row); fewer rows
    than fill the GPU (GATHER_FILL threads) get more threads a row, up to one per unit
    and GATHER_THREADS a row (a decode step's single embedding row)."""
    per_row = max(1, -(-units // GATHER_UNITS_PER_THREAD))
    shift = min(GATHER_MAX_SHIFT, max(2, (per_row - 1).bit_length()))
    while (n << shift) < GATHER_FILL and (1 << shift) < units and (1 << shift) < GATHER_THREADS:
        shift += 1
    threads = n << shift
    block = min(GATHER_THREADS, -(-threads // 32) * 32)
    return -(-threads // block), block, shift


def _gather_host(table: np.ndarray, idx: np.ndarray, out: np.ndarray,
                 row_units: np.uint64, width: np.uint32, n: np.uint64 | int, shift: np.uint32) -> None:
    row_bytes = int(row_units) * int(width)
    n = int(n)
    src = table.reshape(-1, row_bytes)
    # mode="clip": TensorOps validated the indices already, and numpy buffers the
    # whole output (a second copy) when mode="raise" is given an out= array.
    np.take(src, idx[: n * 8].view(np.int64), axis=0, out=out[: n * row_bytes].reshape(n, row_bytes), mode="clip")


#: What the two GEMV kernels declare alike: x, three weight views, out; K, three Ns,
#: the output dtype flag and ksplit (LINEAR) or the chunk bytes (LINEAR_BULK).
_LINEAR_DECLARATION: dict[str, Any] = {
    "buffers": ("read", "read", "read", "read", "write"),
    "scalars": (np.uint32,) * 6,
    "host": _linear_host,
    "programmatic": True,
}

LINEAR = Kernel("hrx_tensor_linear", cuda=LINEAR_CUDA, **_LINEAR_DECLARATION)

#: cuda only: LINEAR at eight blocks an SM with two loads a lane (the plan picks it,
#: gemv_budget); same buffers, scalars and results within rounding (another order of a
#: lane's partial sums).
LINEAR_B8 = Kernel("hrx_tensor_linear_b8", cuda=budget_source(LINEAR_CUDA, LINEAR.name, "hrx_tensor_linear_b8", 8),
                   **_LINEAR_DECLARATION)

#: Hopper only (cuda, compute capability 9.0+): the plan picks it (linear_bulk_launch);
#: same buffers and scalars as LINEAR, the last one the chunk size in place of ksplit.
LINEAR_BULK = Kernel("hrx_tensor_linear_bulk", cuda=LINEAR_BULK_CUDA, **_LINEAR_DECLARATION)
#: The same at LINEAR_BULK_WIDE_THREADS threads a block (the plan's choice but for the
#: longest rows, linear_bulk_launch); same buffers, scalars and results within rounding.
LINEAR_BULK_T256 = Kernel("hrx_tensor_linear_bulk_t256", cuda=LINEAR_BULK_T256_CUDA, **_LINEAR_DECLARATION)
#: The bulk GEMV kernel of each block size linear_bulk_launch plans.
BULK_BY_THREADS = {LINEAR_BULK_THREADS: LINEAR_BULK, LINEAR_BULK_WIDE_THREADS: LINEAR_BULK_T256}

GATHER = Kernel(
    "hrx_tensor_gather",
    buffers=("read", "read", "write"),
    scalars=(np.uint64, np.uint32, np.uint64, np.uint32),
    host=_gather_host,
    cuda=GATHER_CUDA,
    programmatic=True,
)

#: Index capacities of the gather kernels that take their indices in the launch's
#: parameters (uint32 records of 1, 4 and 16 KiB): the plan takes the smallest that
#: holds a call's indices, where the device passes that many argument bytes
#: (limits.max_kernel_arg_bytes: 4096 on any CUDA device and amdgpu, 32764 on CUDA
#: 12.1+ and the host engine). Measured on an H100 (bench/tools/gather_param_probe.py):
#: indices in pinned host memory cost the kernel a PCIe read before its first row.
GATHER_PARAM_CAPS = (256, 1024, 4096)


def gather_index_dtype(cap: int) -> np.dtype:
    """The record of ``cap`` uint32 indices hrx_tensor_gather_i<cap> takes by value."""
    return np.dtype([("v", np.uint32, (cap,))])


def _gather_param_host(table: np.ndarray, out: np.ndarray, row_units: np.uint64, width: np.uint32,
                       n: np.uint64 | int, shift: np.uint32, idx: np.void) -> None:
    row_bytes = int(row_units) * int(width)
    n = int(n)
    src = table.reshape(-1, row_bytes)
    np.take(src, idx["v"][:n], axis=0, out=out[: n * row_bytes].reshape(n, row_bytes), mode="clip")


#: hrx_tensor_gather with its indices in the kernel's parameters: a record of CAP
#: uint32 (the plan's capacity class; entries past n are never read), read in place --
#: every lane of a row's group reads the same entry, one broadcast from the constant
#: cache. (``%(cap)d``: the capacity.)
GATHER_PARAM_CUDA = r"""
struct HrxGatherIndex%(cap)d { unsigned int v[%(cap)d]; };

extern "C" __global__ void __launch_bounds__(256)
hrx_tensor_gather_i%(cap)d(const unsigned char* __restrict__ table, unsigned char* __restrict__ out,
                         unsigned long long row_units, unsigned int width, unsigned long long n, unsigned int shift,
                         const __grid_constant__ HrxGatherIndex%(cap)d idx) {
    hrx_grid_dependencies();
    const unsigned long long t = (blockIdx.x + (unsigned long long)blockIdx.y * gridDim.x) * blockDim.x + threadIdx.x;
    const unsigned long long row = t >> shift;
    if (row >= n) return;
    const unsigned int tpr = 1u << shift;
    hrx_gather_one(table, idx.v[row], out, row, row_units, width, (unsigned int)t & (tpr - 1u), tpr);
}
"""


def _gather_param_kernel(cap: int) -> Kernel:
    return Kernel(
        f"hrx_tensor_gather_i{cap}",
        buffers=("read", "write"),
        scalars=(np.uint64, np.uint32, np.uint64, np.uint32, gather_index_dtype(cap)),
        host=_gather_param_host,
        cuda=GATHER_CUDA + GATHER_PARAM_CUDA % {"cap": cap},
        programmatic=True,
    )


#: The parameter-index gather kernel of each capacity.
GATHER_PARAM = {cap: _gather_param_kernel(cap) for cap in GATHER_PARAM_CAPS}

#: Engines this distribution has kernels for.
ENGINES = ("host", "cuda", "amdgpu")


def kernels_for(engine: str) -> dict[str, Kernel]:
    """The tensor kernels for ``engine`` by name (empty where there are none)."""
    if engine not in ENGINES:
        return {}
    params = {k.name: k for k in GATHER_PARAM.values()}
    if engine == "cuda":
        return {LINEAR.name: LINEAR, GATHER.name: GATHER, LINEAR_BULK.name: LINEAR_BULK,
                LINEAR_BULK_T256.name: LINEAR_BULK_T256, LINEAR_B8.name: LINEAR_B8, **params}
    return {LINEAR.name: LINEAR, GATHER.name: GATHER, **params}
