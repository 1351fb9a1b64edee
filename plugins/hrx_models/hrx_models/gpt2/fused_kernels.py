"""The fused GPT-2 decode step's kernels: layer norms in the prologue of the GEMV that
reads them, bias + GELU and bias + residual in GEMV epilogues, the embeddings in one
kernel -- one hrx Kernel each (a host numpy mirror and a CUDA C++ source).

A fused step is 5 kernels a layer (``ln_linear`` QKV, ``attention``, ``linear_residual``
proj, ``ln_linear`` fc + GELU, ``linear_residual`` proj) instead of 8, and one for the
embeddings instead of three: 63 kernels a token for GPT-2 small instead of 101.

* ``hrx_gpt2_embed``: ``x = wte[tok] + wpe[pos]`` at the device-side ``emb_idx``.
* ``hrx_gpt2_ln_linear``: every warp issues its first weight loads, then every block
  computes ``xn = bf16(LN(x) g + b)`` into shared memory while they stream (the unfused
  step's ``xn``; x is at most MAX_EMBD floats, read once from L2 by every block into
  registers, 16 bytes a load), then the GEMV of hrx_tensor (the same split of K over
  warps, chosen by ``linear_launch``) over it; the epilogue writes ``y = acc`` (F32: QKV, logits) or,
  with ``gelu`` set, ``act = bf16(gelu_new(acc + bias))`` (the MLP's first projection).
* ``hrx_gpt2_linear_residual``: the GEMV of a BF16 input (attention output, GELU
  output); the epilogue adds to the residual stream: ``x[n] += acc + bias[n]``.

The numerics are the unfused step's: the same BF16 rounding points, F32 accumulation;
only the order of the layer norm's sums differs (a block of 256 threads here).
"""

from __future__ import annotations

import numpy as np
from hrx_tensor.kernels import GEMV_CUDA
from hrx_tensor.kernels import _linear_host as _tensor_linear_host

from hrx_core.kernel import Kernel

from .attention_streamed import ATTEND_STREAMED_CUDA
from .config import MAX_EMBD
from .kernels import _PRELUDE, _attention_host, _bf, _bias_gelu_host, _layer_norm_host

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

#: The layer norm of a fused GEMV's prologue, a device function: the GEMVs below and the
#: fused QKV + attention kernel share it.
LN_SHARED_CUDA = f"""
#define HRX_MAX_EMBD {MAX_EMBD}u
""" + r"""
// xs = bf16(LN(x) g + b) (K BF16 into shared memory) by the whole block (256 threads): x
// (L2-resident: K floats) read once into registers as 16-byte vectors (at most
// HRX_MAX_EMBD / 1024 a thread), two passes over those. Ends with a barrier.
__device__ __forceinline__ void hrx_ln_shared(const float* __restrict__ x, const unsigned short* __restrict__ g,
                                              const unsigned short* __restrict__ b, uint4* xs, float* red,
                                              unsigned int K, float eps) {
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
    __syncthreads();
}

// A fused GEMV's row: the warp's first weight loads (row wr), then xs = ln(x) by the block
// while they stream, then the dot product, combined across the row's warps (valid in its
// first warp). Every thread of the block calls it.
__device__ __forceinline__ float hrx_ln_gemv(const float* __restrict__ x, const unsigned short* __restrict__ g,
                                             const unsigned short* __restrict__ b, const uint4* wr, uint4* xs,
                                             float* red, float* partial, unsigned int K, float eps,
                                             const HrxGemvWarp& r) {
    HrxGemvLoads first;
    if (r.active) first = hrx_gemv_first(wr, K >> 3, r);
    hrx_ln_shared(x, g, b, xs, red, K, eps);
    float s = 0.f;
    if (r.active) s = hrx_gemv_dot<true>(xs, wr, K >> 3, r, first);
    return hrx_gemv_combine(s, r, partial);
}
"""

LN_LINEAR_CUDA = _PRELUDE + GEMV_CUDA + LN_SHARED_CUDA + r"""
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
    const float s = hrx_ln_gemv(x, g, b, wr, xs, red, partial, K, eps, r);
    if (r.active && r.piece == 0u && r.lane == 0) {
        if (gelu) act[r.out] = hrx_f32_to_bf16_rn(hrx_gelu_new(s + hrx_bf16_to_f32(bias[r.out])));
        else y[r.out] = s;
    }
}
"""

LN_QKV_ATTENTION_CUDA = ATTEND_STREAMED_CUDA + GEMV_CUDA + LN_SHARED_CUDA + r"""
// ln_1 + the QKV projection + the decode attention in one kernel (grid and block as
// hrx_tensor.linear for K = D and N = 3 D: linear_launch(D, 3 D)). The rows go head by
// head -- block rows j of head j / (3 hd): its hd query, then key, then value rows --
// so a block's rows are one head's (its rows divide 3 hd). Each block: xn = ln_1(x) into
// shared memory, its rows qkv[r] = xn . w[r] (F32, no bias: as hrx_gpt2_ln_linear), then
// it counts itself in sync[head]; the head's last block (sync[head] back to 0) reads the
// head's 3 hd values (past L1), appends this position's K/V row to the cache and attends
// rows 0..pos in one block -- hrx_gpt2_attention_streamed's path for one split, the same
// arithmetic in the same order -- writing out[head * hd..) (BF16). Every position is
// attended correctly; the decoder replays graphs of this kernel only while pos + 1 <=
// HRX_ATTN_MIN_ROWS, where the separate kernel has one split a head too.
#ifndef HRX_QKV_ATTN_MIN_BLOCKS
#define HRX_QKV_ATTN_MIN_BLOCKS 1
#endif
extern "C" __global__ void __launch_bounds__(256, HRX_QKV_ATTN_MIN_BLOCKS) hrx_gpt2_ln_qkv_attention(
        const float* __restrict__ x, const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias, float* qkv,
        const unsigned int* __restrict__ state, unsigned short* kc, unsigned short* vc,
        unsigned short* __restrict__ out, unsigned int* sync,
        unsigned int K, float eps, unsigned int ksplit, unsigned int hd, unsigned int P, float scale) {
    hrx_grid_dependencies();
    __shared__ uint4 xs[HRX_MAX_EMBD / 8u];
    __shared__ float red[32];
    __shared__ float partial[32];
    __shared__ float qh[3u * HRX_MAX_HEAD_DIM];
    __shared__ float wm[HRX_ATTN_THREADS / 32u];
    __shared__ float wl[HRX_ATTN_THREADS / 32u];
    __shared__ float wacc[HRX_ATTN_THREADS / 32u * HRX_MAX_HEAD_DIM];
    __shared__ unsigned int last;
    const unsigned int pos = state[0];
    // the host checks all of these (the whole grid returns alike)
    if (K > HRX_MAX_EMBD || (K & 7u) || K == 0u || blockDim.x != 256u || hd > HRX_MAX_HEAD_DIM || hd < 8u
        || (hd & (hd - 1u)) || K % hd || pos >= P || P > HRX_MAX_POSITIONS) return;
    const unsigned int per_head = 3u * hd, N = 3u * K;
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    const unsigned int j = r.active ? r.out : 0u, jh = j / per_head, jr = j - jh * per_head;
    const unsigned int row = (jr / hd) * K + jh * hd + jr % hd;  // the row's place in qkv and w
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)row * K);
    const float s = hrx_ln_gemv(x, g, b, wr, xs, red, partial, K, eps, r);
    if (r.active && r.piece == 0u && r.lane == 0) qkv[row] = s;
    // count the block in its head's blocks; the last attends
    const unsigned int rows = (blockDim.x >> 5) / r.ks, head = blockIdx.x * rows / per_head;
    __threadfence();  // this block's rows, before its count
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(sync + head, 1u) == per_head / rows - 1u;
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other blocks' rows (counted before ours), read past L1
    const unsigned int base = head * hd;
    const volatile float* vq = qkv;
    for (unsigned int i = threadIdx.x; i < per_head; i += blockDim.x)
        qh[i] = vq[(i / hd) * K + base + i % hd];
    if (threadIdx.x == 0) sync[head] = 0u;  // for the next launch (stream-ordered after this one)
    __syncthreads();
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        kc[(size_t)pos * K + base + i] = hrx_f32_to_bf16_rn(qh[hd + i] + hrx_bf16_to_f32(bias[K + base + i]));
        vc[(size_t)pos * K + base + i] = hrx_f32_to_bf16_rn(qh[2u * hd + i] + hrx_bf16_to_f32(bias[2u * K + base + i]));
    }
    hrx_attend(qh, hd, bias + base, kc, vc, K, hd, base, pos, 0u, pos + 1u, scale, wm, wl, wacc);
    float M, l;
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        const float a = hrx_attend_combine(i, hd, wm, wl, wacc, &M, &l);
        out[base + i] = hrx_f32_to_bf16_rn(a / l);
    }
}
"""

LINEAR_RESIDUAL_CUDA = _PRELUDE + GEMV_CUDA + r"""
// grid and block as hrx_tensor.linear (linear_launch(K, N)): x[n] += a . w[n] + bias[n].
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_linear_residual(
        const uint4* __restrict__ a, const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias,
        float* __restrict__ x, unsigned int K, unsigned int N, unsigned int ksplit) {
    hrx_grid_dependencies();
    __shared__ float partial[32];
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    float s = 0.f;
    if (r.active) {
        const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)r.out * K);
        s = hrx_gemv_dot<false>(a, wr, K >> 3, r, hrx_gemv_first(wr, K >> 3, r));
    }
    s = hrx_gemv_combine(s, r, partial);
    if (r.active && r.piece == 0u && r.lane == 0) x[r.out] = x[r.out] + (s + hrx_bf16_to_f32(bias[r.out]));
}
"""


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


def _ln_qkv_attention_host(x, g, b, w, bias, qkv, state, kc, vc, out, sync, k, eps, ksplit, hd, p, scale) -> None:
    k = int(k)
    _ln_linear_host(x, g, b, w, bias, qkv, qkv, k, 3 * k, eps, ksplit, 0)
    # one split a head: the attention of every row in one pass (part is never used)
    _attention_host(qkv, bias, state, kc, vc, out, None, sync, k, hd, p, scale, 1)


def _linear_residual_host(a, w, bias, x, k, n, ksplit) -> None:
    k, n = int(k), int(n)
    xf = x[: 4 * n].view(np.float32)
    xf += _gemv_f32(a[: 2 * k], w, k, n) + _bf(bias[: 2 * n])


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
    buffers=("read", "read", "read", "read_write"),
    scalars=(np.uint32, np.uint32, np.uint32),
    host=_linear_residual_host, cuda=LINEAR_RESIDUAL_CUDA, programmatic=True,
)

LN_QKV_ATTENTION = Kernel(
    "hrx_gpt2_ln_qkv_attention",
    buffers=("read", "read", "read", "read", "read", "read_write", "read", "read_write", "read_write", "write",
             "read_write"),
    scalars=(np.uint32, np.float32, np.uint32, np.uint32, np.uint32, np.float32),
    host=_ln_qkv_attention_host, cuda=LN_QKV_ATTENTION_CUDA, programmatic=True,
)

FUSED = (EMBED, LN_LINEAR, LINEAR_RESIDUAL, LN_QKV_ATTENTION)
