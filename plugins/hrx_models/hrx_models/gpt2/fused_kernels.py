"""The fused GPT-2 decode step's kernels: layer norms in the prologue of the GEMV that
reads them, bias + GELU and bias + residual in GEMV epilogues, a layer's whole MLP in one
kernel, the embeddings in one kernel -- one hrx Kernel each (a host numpy mirror and a
CUDA C++ source).

A fused step is 4 kernels a layer (``ln_linear`` QKV, ``attention``, ``linear_residual``
proj, ``ln_mlp``) instead of 8, and one for the embeddings instead of three: 51 kernels
a token for GPT-2 small instead of 101 (63 with ``fused_mlp=False``, where the MLP is
``ln_linear`` fc + GELU and ``linear_residual`` proj).

* ``hrx_gpt2_embed``: ``x = wte[tok] + wpe[pos]`` at the device-side ``emb_idx``.
* ``hrx_gpt2_ln_linear``: every warp issues its first weight loads, then every block
  computes ``xn = bf16(LN(x) g + b)`` into shared memory while they stream (the unfused
  step's ``xn``; x is at most MAX_EMBD floats, read once from L2 by every block into
  registers, 16 bytes a load), then the GEMV of hrx_tensor (the same split of K over
  warps, chosen by ``linear_launch``) over it; the epilogue writes ``y = acc`` (F32: QKV, logits) or,
  with ``gelu`` set, ``act = bf16(gelu_new(acc + bias))`` (the MLP's first projection).
* ``hrx_gpt2_linear_residual``: the GEMV of a BF16 input (attention output, GELU
  output); the epilogue adds to the residual stream: ``x[n] += acc + bias[n]``, and
  with ``copy`` set writes the new value to ``x2`` too (the snapshot ``ln_mlp`` reads).
* ``hrx_gpt2_ln_mlp``: the MLP split over its hidden units (``mlp_rows``): each block
  takes 8-64 of them, computes the layer norm of the snapshot ``x2`` as ``ln_linear``
  does, its units' ``bf16(gelu_new(xn . w_fc + b_fc))``, and adds their share of the
  second projection (the columns of ``w_proj`` they feed) to the residual stream with
  float reductions (``red.global.add.v4.f32`` on Hopper). One kernel streams both
  projections' weights: one ramp and tail instead of two, and no ``act`` round trip.

The numerics are the unfused step's: the same BF16 rounding points, F32 accumulation;
only the order of sums differs (the layer norm's over a block of 256 threads, the MLP's
second projection per block and then across blocks in the order the hardware runs
them, so on a GPU the last bits of the residual stream vary from run to run).
"""

from __future__ import annotations

import numpy as np
from hrx_tensor.kernels import GEMV_CUDA
from hrx_tensor.kernels import _linear_host as _tensor_linear_host

from hrx_core.kernel import Kernel

from .config import MAX_EMBD
from .kernels import _PRELUDE, _bf, _bias_gelu_host, _layer_norm_host

#: Threads of the embedding kernel.
EMBED_THREADS = 256

EMBED_CUDA = _PRELUDE + r"""
extern "C" __global__ void hrx_gpt2_embed(
        const unsigned short* __restrict__ wte, const unsigned short* __restrict__ wpe,
        const long long* __restrict__ emb_idx, float* __restrict__ x, unsigned int D) {
    hrx_grid_dependencies();
    const unsigned short* te = wte + (size_t)emb_idx[0] * D;  // indices are in range (see kernels.py)
    const unsigned short* pe = wpe + (size_t)emb_idx[1] * D;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < D; i += gridDim.x * blockDim.x)
        x[i] = hrx_bf16_to_f32(te[i]) + hrx_bf16_to_f32(pe[i]);
}
"""

_LN_SHARED_CUDA = _PRELUDE + GEMV_CUDA + f"""
#define HRX_MAX_EMBD {MAX_EMBD}u
""" + r"""
// xs = bf16(LN(x) g + b) for the K values of x (F32, L2-resident), K a multiple of 8 up to
// HRX_MAX_EMBD, a block of 256 threads: x read once into registers as 16-byte vectors (at
// most HRX_MAX_EMBD / 1024 a thread), two passes over those. red: 32 floats of shared
// memory. The caller syncs the block before reading xs.
__device__ __forceinline__ void hrx_ln_shared(const float* __restrict__ x, const unsigned short* __restrict__ g,
                                              const unsigned short* __restrict__ b, uint4* xs, unsigned int K,
                                              float eps, float* red) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const unsigned int n4 = K >> 2;
    float4 xv[HRX_MAX_EMBD / 1024u];
    float sum = 0.f;
    #pragma unroll
    for (unsigned int j = 0; j < HRX_MAX_EMBD / 1024u; ++j) {
        const unsigned int i = threadIdx.x + 256u * j;
        if (i < n4) {
            xv[j] = x4[i];
            sum += (xv[j].x + xv[j].y) + (xv[j].z + xv[j].w);
        }
    }
    const float mean = hrx_block_sum(sum, red) / (float)K;
    float sq = 0.f;
    #pragma unroll
    for (unsigned int j = 0; j < HRX_MAX_EMBD / 1024u; ++j) {
        if (threadIdx.x + 256u * j < n4) {
            const float d0 = xv[j].x - mean, d1 = xv[j].y - mean, d2 = xv[j].z - mean, d3 = xv[j].w - mean;
            sq += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
        }
    }
    const float rstd = rsqrtf(hrx_block_sum(sq, red) / (float)K + eps);
    unsigned int* xn2 = reinterpret_cast<unsigned int*>(xs);  // BF16 pairs
    const unsigned int* g2 = reinterpret_cast<const unsigned int*>(g);
    const unsigned int* b2 = reinterpret_cast<const unsigned int*>(b);
    #pragma unroll
    for (unsigned int j = 0; j < HRX_MAX_EMBD / 1024u; ++j) {
        const unsigned int i = threadIdx.x + 256u * j;
        if (i < n4) {
            const unsigned int ga = g2[2u * i], gb = g2[2u * i + 1u], ba = b2[2u * i], bb = b2[2u * i + 1u];
            const float v[4] = {xv[j].x, xv[j].y, xv[j].z, xv[j].w};
            const unsigned int gw[2] = {ga, gb}, bw[2] = {ba, bb};
            #pragma unroll
            for (unsigned int h = 0; h < 2u; ++h) {
                const float lo = (v[2u * h] - mean) * rstd * __uint_as_float(gw[h] << 16) + __uint_as_float(bw[h] << 16);
                const float hi = (v[2u * h + 1u] - mean) * rstd * __uint_as_float(gw[h] & 0xffff0000u)
                                 + __uint_as_float(bw[h] & 0xffff0000u);
                xn2[2u * i + h] = (unsigned int)hrx_f32_to_bf16_rn(lo) | ((unsigned int)hrx_f32_to_bf16_rn(hi) << 16);
            }
        }
    }
}

"""

LN_LINEAR_CUDA = _LN_SHARED_CUDA + r"""
// grid and block as hrx_tensor.linear (linear_launch(K, N)): xn = bf16(LN(x) g + b) into
// shared memory by every block, then y[n] = xn . w[n] (F32), or with gelu set
// act[n] = bf16(gelu_new(xn . w[n] + bias[n])).
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_ln_linear(
        const float* __restrict__ x, const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias,
        float* __restrict__ y, unsigned short* __restrict__ act,
        unsigned int K, unsigned int N, float eps, unsigned int ksplit, unsigned int gelu) {
    hrx_grid_dependencies();
    __shared__ uint4 xs[HRX_MAX_EMBD / 8u];  // xn, BF16: 16 KiB at K = 8192
    __shared__ float red[32];
    __shared__ float partial[32];
    if (K > HRX_MAX_EMBD || (K & 7u) || K == 0u || blockDim.x != 256u) return;  // the host checks: the whole grid
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)(r.active ? r.out : 0u) * K);
    HrxGemvLoads first;
    if (r.active) first = hrx_gemv_first(wr, K >> 3, r);  // the weights stream during the prologue
    hrx_ln_shared(x, g, b, xs, K, eps, red);
    __syncthreads();
    float s = 0.f;
    if (r.active) s = hrx_gemv_dot<true>(xs, wr, K >> 3, r, first);
    s = hrx_gemv_combine(s, r, partial);
    if (r.active && r.piece == 0u && r.lane == 0) {
        if (gelu) act[r.out] = hrx_f32_to_bf16_rn(hrx_gelu_new(s + hrx_bf16_to_f32(bias[r.out])));
        else y[r.out] = s;
    }
}
"""

LINEAR_RESIDUAL_CUDA = _PRELUDE + GEMV_CUDA + r"""
// grid and block as hrx_tensor.linear (linear_launch(K, N)): x[n] += a . w[n] + bias[n],
// and with ``copy`` set the new x[n] into x2[n] too (the snapshot the fused MLP reads).
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_linear_residual(
        const uint4* __restrict__ a, const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias,
        float* x, float* x2, unsigned int K, unsigned int N, unsigned int ksplit, unsigned int copy) {
    hrx_grid_dependencies();
    __shared__ float partial[32];
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    float s = 0.f;
    if (r.active) {
        const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)r.out * K);
        s = hrx_gemv_dot<false>(a, wr, K >> 3, r, hrx_gemv_first(wr, K >> 3, r));
    }
    s = hrx_gemv_combine(s, r, partial);
    if (r.active && r.piece == 0u && r.lane == 0) {
        const float v = x[r.out] + (s + hrx_bf16_to_f32(bias[r.out]));
        x[r.out] = v;
        if (copy) x2[r.out] = v;
    }
}
"""

LN_MLP_CUDA = _LN_SHARED_CUDA + r"""
// 8 BF16 weights (one 16-byte vector) dotted with 8 F32 of shared memory, added to s
__device__ __forceinline__ float hrx_dot8_f32(uint4 w, const float* a, float s) {
    s += a[0] * __uint_as_float(w.x << 16);
    s += a[1] * __uint_as_float(w.x & 0xffff0000u);
    s += a[2] * __uint_as_float(w.y << 16);
    s += a[3] * __uint_as_float(w.y & 0xffff0000u);
    s += a[4] * __uint_as_float(w.z << 16);
    s += a[5] * __uint_as_float(w.z & 0xffff0000u);
    s += a[6] * __uint_as_float(w.w << 16);
    s += a[7] * __uint_as_float(w.w & 0xffff0000u);
    return s;
}

// p[0..4) += v[0..4) in global memory (16-byte aligned): one vector reduction on sm_90
__device__ __forceinline__ void hrx_red4(float* p, const float* v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__AMDGCN__)
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};"
                 :: "l"(p), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
#else
    #pragma unroll
    for (int e = 0; e < 4; ++e) atomicAdd(p + e, v[e]);
#endif
}

// The body of hrx_gpt2_ln_mlp for R hidden units a warp (C = 8 R a block).
template <unsigned int R>
__device__ __forceinline__ void hrx_ln_mlp(const float* __restrict__ x, const unsigned short* __restrict__ g,
                                           const unsigned short* __restrict__ b, const unsigned short* __restrict__ wfc,
                                           const unsigned short* __restrict__ bfc,
                                           const unsigned short* __restrict__ wproj,
                                           const unsigned short* __restrict__ bproj, float* out, unsigned int D,
                                           unsigned int F, float eps, unsigned int prefetch, uint4* xs, float* act,
                                           float* red) {
    constexpr unsigned int U = 8u / R;  // steps a lane loads ahead: R * U = 8 16-byte loads in flight
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nvec = D >> 3;
    const unsigned int c0 = blockIdx.x * 8u * R;
    const uint4* wr = reinterpret_cast<const uint4*>(wfc + (size_t)(c0 + warp * R) * D);  // the warp's R rows
    const uint4 zero = hrx_zero4();
    uint4 v[U][R];
    #pragma unroll
    for (unsigned int u = 0; u < U; ++u) {
        #pragma unroll
        for (unsigned int r = 0; r < R; ++r) {
            const unsigned int i = lane + 32u * u;
            v[u][r] = i < nvec ? hrx_ld_stream(wr + (size_t)r * nvec + i) : zero;
        }
    }
#ifndef __AMDGCN__
    if (prefetch) {  // the block's columns of the second projection (8 R BF16 a row: one cache line) into L2
        const unsigned short* wc = wproj + c0;
        for (unsigned int n = threadIdx.x; n < D; n += blockDim.x)
            asm volatile("prefetch.global.L2 [%0];" :: "l"(wc + (size_t)n * F));
    }
#endif
    hrx_ln_shared(x, g, b, xs, D, eps, red);  // the first fc weights stream meanwhile
    __syncthreads();
    float acc[R];
    #pragma unroll
    for (unsigned int r = 0; r < R; ++r) acc[r] = 0.f;
    for (unsigned int i0 = lane; i0 < nvec; i0 += 32u * U) {
        if (i0 != lane) {
            #pragma unroll
            for (unsigned int u = 0; u < U; ++u) {
                #pragma unroll
                for (unsigned int r = 0; r < R; ++r) {
                    const unsigned int i = i0 + 32u * u;
                    v[u][r] = i < nvec ? hrx_ld_stream(wr + (size_t)r * nvec + i) : zero;
                }
            }
        }
        #pragma unroll
        for (unsigned int u = 0; u < U; ++u) {
            const unsigned int i = i0 + 32u * u;
            if (i < nvec) {
                const uint4 xv = xs[i];
                #pragma unroll
                for (unsigned int r = 0; r < R; ++r) acc[r] = hrx_dot8(v[u][r], xv, acc[r]);
            }
        }
    }
    #pragma unroll
    for (unsigned int r = 0; r < R; ++r) {
        float s = acc[r];
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        const unsigned int c = warp * R + r;
        if (lane == 0)  // the unfused step's rounding: act is BF16
            act[c] = hrx_bf16_to_f32(hrx_f32_to_bf16_rn(hrx_gelu_new(s + hrx_bf16_to_f32(bfc[c0 + c]))));
    }
    __syncthreads();
    // this block's share of the second projection: columns [c0, c0 + 8 R) of every row,
    // four rows a thread at a time (R 16-byte loads a row), one vector reduction
    const uint4* wp = reinterpret_cast<const uint4*>(wproj) + (c0 >> 3);
    const unsigned int fvec = F >> 3;
    for (unsigned int q = threadIdx.x; 4u * q < D; q += blockDim.x) {
        uint4 pw[4][R];
        #pragma unroll
        for (unsigned int e = 0; e < 4u; ++e) {
            #pragma unroll
            for (unsigned int r = 0; r < R; ++r) pw[e][r] = hrx_ld_stream(wp + (size_t)(4u * q + e) * fvec + r);
        }
        float p[4];
        #pragma unroll
        for (unsigned int e = 0; e < 4u; ++e) {
            p[e] = blockIdx.x == 0u ? hrx_bf16_to_f32(bproj[4u * q + e]) : 0.f;
            #pragma unroll
            for (unsigned int r = 0; r < R; ++r) p[e] = hrx_dot8_f32(pw[e][r], act + 8u * r, p[e]);
        }
        hrx_red4(out + 4u * q, p);
    }
}

// A layer's MLP in one kernel, split over its F hidden units: block j of F / (8 rows)
// takes units [8 rows j, 8 rows (j + 1)) (rows: 1, 2, 4 or 8 a warp; mlp_rows). Every
// block computes xn = bf16(LN(x) g + b) into shared memory (x: the residual stream before
// the MLP, a copy), then its units act[c] = bf16(gelu_new(xn . wfc[c] + bfc[c])), then
// adds its share of the second projection to the residual stream: out[n] +=
// sum_c act[c] wproj[n][c] (+ bproj[n], by block 0) with float reductions. ``out`` holds
// x when the kernel starts. Blocks add in the order the hardware runs them: the last
// bits of out vary from run to run (F32 addition is not associative). With ``prefetch`` set
// each block first asks L2 for its columns of w_proj, so that they arrive while it
// computes the layer norm and the first projection (mlp_prefetch: where they fit in L2).
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_ln_mlp(
        const float* __restrict__ x, const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        const unsigned short* __restrict__ wfc, const unsigned short* __restrict__ bfc,
        const unsigned short* __restrict__ wproj, const unsigned short* __restrict__ bproj, float* out,
        unsigned int D, unsigned int F, float eps, unsigned int rows, unsigned int prefetch) {
    hrx_grid_dependencies();
    __shared__ uint4 xs[HRX_MAX_EMBD / 8u];  // xn, BF16: 16 KiB at D = 8192
    __shared__ float act[64];
    __shared__ float red[32];
    // the host checks all of this (the whole grid returns)
    if (D > HRX_MAX_EMBD || (D & 7u) || D == 0u || blockDim.x != 256u || (F & 7u)
        || (rows != 1u && rows != 2u && rows != 4u && rows != 8u) || F % (8u * rows) || (blockIdx.x + 1u) * 8u * rows > F)
        return;
    switch (rows) {
        case 1u: hrx_ln_mlp<1>(x, g, b, wfc, bfc, wproj, bproj, out, D, F, eps, prefetch, xs, act, red); break;
        case 2u: hrx_ln_mlp<2>(x, g, b, wfc, bfc, wproj, bproj, out, D, F, eps, prefetch, xs, act, red); break;
        case 4u: hrx_ln_mlp<4>(x, g, b, wfc, bfc, wproj, bproj, out, D, F, eps, prefetch, xs, act, red); break;
        default: hrx_ln_mlp<8>(x, g, b, wfc, bfc, wproj, bproj, out, D, F, eps, prefetch, xs, act, red); break;
    }
}
"""

#: Threads of a fused-MLP block; its blocks take 8 * rows hidden units each.
MLP_THREADS = 256
#: The fused MLP takes as many hidden units a block as keeps at least this many blocks
#: (fewer blocks: fewer float reductions into the residual stream; enough to fill an H200).
MLP_MIN_BLOCKS = 128


def mlp_rows(hidden: int) -> int:
    """Hidden units a warp of the fused MLP takes (1, 2, 4 or 8) for ``hidden`` units in
    all (a multiple of 8): the most that divide it and keep MLP_MIN_BLOCKS blocks."""
    if hidden <= 0 or hidden % 8:
        raise ValueError(f"hidden = {hidden} is not a positive multiple of 8")
    for rows in (8, 4, 2):
        if hidden % (8 * rows) == 0 and hidden // (8 * rows) >= MLP_MIN_BLOCKS:
            return rows
    return 1


#: The fused MLP prefetches the second projection into L2 up to this many bytes of it
#: (all blocks' columns together; the first projection streams past L2 meanwhile).
MLP_PREFETCH_BYTES = 16 << 20


def mlp_prefetch(d: int, hidden: int) -> bool:
    """Whether the fused MLP of width ``d`` and ``hidden`` units prefetches its second
    projection's weights into L2 (MLP_PREFETCH_BYTES)."""
    return 2 * d * hidden <= MLP_PREFETCH_BYTES


# -- host mirrors (the unfused step's host functions, composed) ----------------------


def _gemv_f32(a: np.ndarray, w: np.ndarray, k: int, n: int) -> np.ndarray:
    """F32 [n] = bf16 ``a`` (bytes) . bf16 rows of ``w`` (bytes): hrx_tensor's host GEMV."""
    y = np.empty(4 * n, dtype=np.uint8)
    _tensor_linear_host(a, w, w, w, y, np.uint32(k), np.uint32(n), np.uint32(0), np.uint32(0), np.uint32(1), np.uint32(1))
    return y.view(np.float32)


def _embed_host(wte, wpe, emb_idx, x, d) -> None:
    d = int(d)
    tok, pos = (int(v) for v in emb_idx[:16].view(np.int64))
    x[: 4 * d].view(np.float32)[:] = _bf(wte[2 * d * tok : 2 * d * (tok + 1)]) + _bf(wpe[2 * d * pos : 2 * d * (pos + 1)])


def _ln_linear_host(x, g, b, w, bias, y, act, k, n, eps, ksplit, gelu) -> None:
    k, n = int(k), int(n)
    xn = np.empty(2 * k, dtype=np.uint8)
    _layer_norm_host(x[: 4 * k].view(np.float32), g, b, xn, k, eps)
    out = _gemv_f32(xn, w, k, n)
    if gelu:
        _bias_gelu_host(out.view(np.uint8), bias, act, n)
    else:
        y[: 4 * n].view(np.float32)[:] = out


def _linear_residual_host(a, w, bias, x, x2, k, n, ksplit, copy) -> None:
    k, n = int(k), int(n)
    xf = x[: 4 * n].view(np.float32)
    xf += _gemv_f32(a[: 2 * k], w, k, n) + _bf(bias[: 2 * n])
    if copy:
        x2[: 4 * n] = x[: 4 * n]


def _ln_mlp_host(x, g, b, wfc, bfc, wproj, bproj, out, d, f, eps, rows, prefetch) -> None:
    # the unfused step's composition (ln_linear with GELU, then linear_residual): its
    # numbers exactly, where the device's reductions add in no fixed order
    d, f = int(d), int(f)
    act = np.empty(2 * f, dtype=np.uint8)
    _ln_linear_host(x, g, b, wfc, bfc, act, act, d, f, eps, 0, 1)
    _linear_residual_host(act, wproj, bproj, out, out, f, d, 0, 0)


EMBED = Kernel(
    "hrx_gpt2_embed",
    buffers=("read", "read", "read", "write"),
    scalars=(np.uint32,),
    host=_embed_host, cuda=EMBED_CUDA, programmatic=True,
)
LN_LINEAR = Kernel(
    "hrx_gpt2_ln_linear",
    buffers=("read", "read", "read", "read", "read", "write", "write"),
    scalars=(np.uint32, np.uint32, np.float32, np.uint32, np.uint32),
    host=_ln_linear_host, cuda=LN_LINEAR_CUDA, programmatic=True,
)
LINEAR_RESIDUAL = Kernel(
    "hrx_gpt2_linear_residual",
    buffers=("read", "read", "read", "read_write", "write"),
    scalars=(np.uint32, np.uint32, np.uint32, np.uint32),
    host=_linear_residual_host, cuda=LINEAR_RESIDUAL_CUDA, programmatic=True,
)
LN_MLP = Kernel(
    "hrx_gpt2_ln_mlp",
    buffers=("read", "read", "read", "read", "read", "read", "read", "read_write"),
    scalars=(np.uint32, np.uint32, np.float32, np.uint32, np.uint32),
    host=_ln_mlp_host, cuda=LN_MLP_CUDA, programmatic=True,
)

FUSED = (EMBED, LN_LINEAR, LINEAR_RESIDUAL, LN_MLP)
