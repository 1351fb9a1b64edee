"""The GPT-2 decoder's own kernels: one hrx Kernel each, a host (numpy) callable
mirroring a CUDA C++ source.

The projections run on hrx_tensor's linear kernel; these cover the rest of a decode
step. Conventions shared by all of them: the residual stream ``x`` and projection
outputs are F32, every input of a projection (layer-norm output, attention output,
GELU output) is BF16 (round to nearest even), parameters are BF16, all arithmetic
is F32. ``state`` is the slot's device-side step state, four uint32: ``[pos,
n_prompt, 0, 0]`` -- ``pos`` is the position the step processes; ``seq`` (int32
[n_positions]) holds the prompt followed by the generated tokens; ``emb_idx`` (two
int64) the embedding rows of the step, ``[seq[pos], pos]``, which hrx_tensor's gather
kernel reads. Because position and token live on the device, one recorded graph
serves every step.

* ``hrx_gpt2_embed_ln``: ``x = te + pe`` (the gathered rows of wte and wpe); ``xn = LN(x)``.
* ``hrx_gpt2_residual_ln``: ``x += y + bias``; ``xn = LN(x)`` (the next layer norm:
  ln_2, the next layer's ln_1, or ln_f).
* ``hrx_gpt2_attention``: add the QKV bias, append K and V (BF16) at row ``pos`` of the
  slot's cache, scores over rows ``0..pos`` scaled by 1/sqrt(head_dim), softmax,
  weighted sum of V. ``splits`` blocks per head (:func:`attention_splits`, fixed when
  the step is recorded) divide the rows ``0..pos`` among them, at least
  ATTENTION_MIN_ROWS each: up to that many rows one block attends alone as before;
  past it each block writes its partial result (unnormalized sum, maximum score, sum
  of exponentials) to ``part`` and the last block of the head to finish (a counter
  per head in ``sync``, set back to 0 by that block) combines them in split order --
  flash-decoding, so long contexts use more of the GPU than one block per head.
* ``hrx_gpt2_bias_gelu``: ``out = gelu_new(y + bias)`` (tanh approximation).
* ``hrx_gpt2_argmax``: greedy choice over the logits (lowest index among equal
  maxima, like numpy); writes ``seq[pos + 1]`` unless that is still a prompt
  position, sets ``emb_idx`` for position ``pos + 1`` and advances ``pos``.
* ``hrx_gpt2_advance``: the same without logits (prefill steps): ``emb_idx``, ``pos += 1``.

CUDA notes: NVRTC without includes (vector types, ``tanhf``/``expf``/``rsqrtf`` and
warp shuffles are built in); BF16 is handled as ``unsigned short`` bit patterns
with the round-to-nearest-even helper of hrx_tensor; block reductions are warp
shuffles then one value per warp in shared memory; attention streams a head's K and
V rows through every warp of its block at once (a row is hd / 2..8 lanes of 4-16
bytes, head_dim a power of two, 8..256), each lane keeping an online softmax that the
lanes, then the warps, combine -- no scores in shared memory and one barrier; layer norms keep up to 8 values a thread in registers (n_embd <= 8192), argmax reads
the logits as 16-byte vectors.
"""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

from hrx_core.kernel import Kernel

from hrx_tensor.kernels import GRID_DEPENDENCIES_CUDA

from .config import MAX_HEAD_DIM, MAX_POSITIONS

#: Threads per block of attention, argmax and bias + GELU.
ATTENTION_THREADS = 256
#: Split decode attention: each block attends to at least this many rows (so up to it,
#: one block per head and no combining), there are at most ATTENTION_MAX_SPLITS blocks
#: a head and about ATTENTION_TARGET_BLOCKS in all (two per SM of an H200).
ATTENTION_MIN_ROWS = 128
ATTENTION_MAX_SPLITS = 16
ATTENTION_TARGET_BLOCKS = 256


def attention_splits(context: int, n_head: int) -> int:
    """Blocks per head of the decode attention for a slot of ``context`` positions."""
    return max(1, min(ATTENTION_MAX_SPLITS, -(-context // ATTENTION_MIN_ROWS), ATTENTION_TARGET_BLOCKS // n_head))


def attention_split_rows(pos: int, splits: int) -> tuple[int, int]:
    """(rows a split attends, splits that attend) at position ``pos`` (the kernel's rule)."""
    n = pos + 1
    rows = max(-(-n // splits), ATTENTION_MIN_ROWS)
    return rows, -(-n // rows)
ARGMAX_THREADS = 1024
GELU_THREADS = 256
#: Values each thread of a layer-norm kernel keeps in registers (HRX_LN_ITEMS).
LN_ITEMS = 8


def ln_block(d: int) -> int:
    """Threads per block of the layer-norm kernels for width ``d`` (<= LN_ITEMS a thread)."""
    return min(1024, max(256, -(-d // (LN_ITEMS * 32)) * 32))

_PRELUDE = GRID_DEPENDENCIES_CUDA + r"""
__device__ __forceinline__ float hrx_bf16_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

__device__ __forceinline__ unsigned short hrx_f32_to_bf16_rn(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// gelu_new (GPT-2's tanh approximation of GELU)
__device__ __forceinline__ float hrx_gelu_new(float v) {
    const float t = tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v));
    return 0.5f * v * (1.f + t);
}

// Sum over the block; every thread gets the result. red: 32 floats of shared memory.
__device__ __forceinline__ float hrx_block_sum(float v, float* red) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned int nwarps = (blockDim.x + 31u) >> 5;
    __syncthreads();  // red may still be read by a previous reduction
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (unsigned int w = 0; w < nwarps; ++w) s += red[w];
    return s;
}

__device__ __forceinline__ float hrx_block_max(float v, float* red) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned int nwarps = (blockDim.x + 31u) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = red[0];
    for (unsigned int w = 1; w < nwarps; ++w) m = fmaxf(m, red[w]);
    return m;
}

// xn = bf16(LN(v) * g + b) for the D values a block holds in registers, HRX_LN_ITEMS a
// thread: element i = threadIdx.x + j * blockDim.x is v[j]. The host picks blockDim so
// that D <= HRX_LN_ITEMS * blockDim.x (ln_block()).
#define HRX_LN_ITEMS 8
__device__ __forceinline__ void hrx_layer_norm(const float (&v)[HRX_LN_ITEMS], float sum,
                                               const unsigned short* g, const unsigned short* b,
                                               unsigned short* xn, unsigned int D, float eps, float* red) {
    const float mean = hrx_block_sum(sum, red) / (float)D;
    float sq = 0.f;
    #pragma unroll
    for (int j = 0; j < HRX_LN_ITEMS; ++j) {
        const unsigned int i = threadIdx.x + j * blockDim.x;
        if (i < D) { const float d = v[j] - mean; sq += d * d; }
    }
    const float rstd = rsqrtf(hrx_block_sum(sq, red) / (float)D + eps);
    #pragma unroll
    for (int j = 0; j < HRX_LN_ITEMS; ++j) {
        const unsigned int i = threadIdx.x + j * blockDim.x;
        if (i < D) xn[i] = hrx_f32_to_bf16_rn((v[j] - mean) * rstd * hrx_bf16_to_f32(g[i]) + hrx_bf16_to_f32(b[i]));
    }
}

// x[i] = value(i) for i < D, then xn = LN(x): the body of both layer-norm kernels.
template <typename F>
__device__ __forceinline__ void hrx_store_ln(F value, float* x, const unsigned short* g, const unsigned short* b,
                                             unsigned short* xn, unsigned int D, float eps) {
    __shared__ float red[32];
    if (D > HRX_LN_ITEMS * blockDim.x) return;  // the host sizes the block (ln_block)
    float v[HRX_LN_ITEMS];
    float sum = 0.f;
    #pragma unroll
    for (int j = 0; j < HRX_LN_ITEMS; ++j) {
        const unsigned int i = threadIdx.x + j * blockDim.x;
        v[j] = 0.f;
        if (i < D) {
            v[j] = value(i);
            x[i] = v[j];
            sum += v[j];
        }
    }
    hrx_layer_norm(v, sum, g, b, xn, D, eps, red);
}
"""

EMBED_LN_CUDA = _PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(1024) hrx_gpt2_embed_ln(
        const unsigned short* __restrict__ te, const unsigned short* __restrict__ pe,
        const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        float* __restrict__ x, unsigned short* __restrict__ xn, unsigned int D, float eps) {
    hrx_grid_dependencies();
    hrx_store_ln([&](unsigned int i) { return hrx_bf16_to_f32(te[i]) + hrx_bf16_to_f32(pe[i]); }, x, g, b, xn, D, eps);
}
"""

RESIDUAL_LN_CUDA = _PRELUDE + r"""
extern "C" __global__ void __launch_bounds__(1024) hrx_gpt2_residual_ln(
        float* __restrict__ x, const float* __restrict__ y, const unsigned short* __restrict__ bias,
        const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        unsigned short* __restrict__ xn, unsigned int D, float eps) {
    hrx_grid_dependencies();
    hrx_store_ln([&](unsigned int i) { return x[i] + (y[i] + hrx_bf16_to_f32(bias[i])); }, x, g, b, xn, D, eps);
}
"""

ATTEND_CUDA = _PRELUDE + f"""
#define HRX_MAX_HEAD_DIM {MAX_HEAD_DIM}u
#define HRX_MAX_POSITIONS {MAX_POSITIONS}u
#define HRX_ATTN_THREADS {ATTENTION_THREADS}u
#define HRX_ATTN_MIN_ROWS {ATTENTION_MIN_ROWS}u
#define HRX_ATTN_MAX_SPLITS {ATTENTION_MAX_SPLITS}u
""" + r"""
// DPL consecutive BF16 (2, 4 or 8: 4, 8 or 16 bytes, aligned) as raw bits, and element j
// of them as F32.
template <unsigned int DPL> struct HrxBf16s;
template <> struct HrxBf16s<2> {
    unsigned int r;
    __device__ __forceinline__ void load(const unsigned short* p) { r = *reinterpret_cast<const unsigned int*>(p); }
    __device__ __forceinline__ float get(unsigned int j) const {
        return __uint_as_float(j ? r & 0xffff0000u : r << 16);
    }
};
template <> struct HrxBf16s<4> {
    uint2 r;
    __device__ __forceinline__ void load(const unsigned short* p) { r = *reinterpret_cast<const uint2*>(p); }
    __device__ __forceinline__ float get(unsigned int j) const {
        const unsigned int w = j < 2u ? r.x : r.y;
        return __uint_as_float(j & 1u ? w & 0xffff0000u : w << 16);
    }
};
template <> struct HrxBf16s<8> {
    uint4 r;
    __device__ __forceinline__ void load(const unsigned short* p) { r = *reinterpret_cast<const uint4*>(p); }
    __device__ __forceinline__ float get(unsigned int j) const {
        const unsigned int w = j < 2u ? r.x : j < 4u ? r.y : j < 6u ? r.z : r.w;
        return __uint_as_float(j & 1u ? w & 0xffff0000u : w << 16);
    }
};

// The attention of one head (columns from ``base``) over rows [t0, t1) of the cache,
// by every warp of the block at once: a row is L = hd / DPL lanes (DPL dimensions a lane,
// hd = head_dim, a power of two in 8..256), a warp takes 32 / L rows a step and the
// block's warps interleave, so K and V are read once, in 4..16-byte pieces of whole
// rows, 32 / DPL steps of loads in flight. Each lane keeps an online softmax (the
// running maximum score m, the sum of exp(s - m), and sum exp(s - m) V over its dims);
// lanes of a warp, then the warps, combine theirs. Row ``pos`` (the step's own key and
// value) comes from qkv + bias, rounded to BF16 as the cache holds it; the other rows
// from the cache (written by earlier launches). Leaves in wm/wl/wacc (shared: one per
// warp, wacc hd per warp) the block's m, l and unnormalized sum, after a barrier.
template <unsigned int DPL>
__device__ __forceinline__ void hrx_attend_rows(const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
                                                const unsigned short* kc, const unsigned short* vc, unsigned int D,
                                                unsigned int hd, unsigned int base, unsigned int pos, unsigned int t0,
                                                unsigned int t1, float scale, float* wm, float* wl, float* wacc) {
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const unsigned int L = hd / DPL, sub = lane / L, d0 = (lane % L) * DPL, step = nwarps * (32u / L);
    float q[DPL], kn[DPL], vn[DPL], acc[DPL];
    #pragma unroll
    for (unsigned int j = 0; j < DPL; ++j) {
        const unsigned int c = base + d0 + j;
        q[j] = (qkv[c] + hrx_bf16_to_f32(bias[c])) * scale;
        kn[j] = hrx_bf16_to_f32(hrx_f32_to_bf16_rn(qkv[D + c] + hrx_bf16_to_f32(bias[D + c])));
        vn[j] = hrx_bf16_to_f32(hrx_f32_to_bf16_rn(qkv[2u * D + c] + hrx_bf16_to_f32(bias[2u * D + c])));
        acc[j] = 0.f;
    }
    float m = -3.402823466e38f, l = 0.f;
    // warp-uniform loop: every lane shuffles on every step, lanes past t1 add nothing. A
    // chunk is U steps: its loads are all issued first, its scores reduced together, then
    // one rescale of the running sums by the chunk's maximum.
    constexpr unsigned int U = 32u / DPL;  // 16, 8 or 4: 64..256 bytes of K and V a lane in flight
    for (unsigned int r0 = t0 + warp * (32u / L); r0 < t1; r0 += U * step) {
        HrxBf16s<DPL> k[U], v[U];
        #pragma unroll
        for (unsigned int u = 0; u < U; ++u) {
            const unsigned int t = r0 + u * step + sub;
            if (t < t1 && t != pos) {
                k[u].load(kc + (size_t)t * D + base + d0);
                v[u].load(vc + (size_t)t * D + base + d0);
            }
        }
        float s[U];
        #pragma unroll
        for (unsigned int u = 0; u < U; ++u) {
            const unsigned int t = r0 + u * step + sub;
            const bool live = t < t1, own = t == pos;
            s[u] = 0.f;
            #pragma unroll
            for (unsigned int j = 0; j < DPL; ++j) s[u] += q[j] * (own ? kn[j] : live ? k[u].get(j) : 0.f);
        }
        for (unsigned int o = L >> 1; o > 0; o >>= 1) {
            #pragma unroll
            for (unsigned int u = 0; u < U; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], o);
        }
        float cm = m;
        #pragma unroll
        for (unsigned int u = 0; u < U; ++u)
            if (r0 + u * step + sub < t1) cm = fmaxf(cm, s[u]);
        const float c = expf(m - cm);
        l *= c;
        #pragma unroll
        for (unsigned int j = 0; j < DPL; ++j) acc[j] *= c;
        #pragma unroll
        for (unsigned int u = 0; u < U; ++u) {
            const unsigned int t = r0 + u * step + sub;
            if (t < t1) {
                const float e = expf(s[u] - cm);
                l += e;
                #pragma unroll
                for (unsigned int j = 0; j < DPL; ++j) acc[j] += e * (t == pos ? vn[j] : v[u].get(j));
            }
        }
        m = cm;
    }
    // the warp's rows: combine lanes with the same dimensions (xor over the row bits)
    for (unsigned int o = L; o < 32u; o <<= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, m, o), lo = __shfl_xor_sync(0xffffffffu, l, o);
        const float mn = fmaxf(m, mo), ca = expf(m - mn), cb = expf(mo - mn);
        l = l * ca + lo * cb;
        #pragma unroll
        for (unsigned int j = 0; j < DPL; ++j) acc[j] = acc[j] * ca + __shfl_xor_sync(0xffffffffu, acc[j], o) * cb;
        m = mn;
    }
    if (sub == 0u) {
        #pragma unroll
        for (unsigned int j = 0; j < DPL; ++j) wacc[warp * hd + d0 + j] = acc[j];
        if (lane == 0) { wm[warp] = m; wl[warp] = l; }
    }
    __syncthreads();
}

// The block's result from the warps' (hrx_attend_rows): dimension i's unnormalized sum
// relative to the block's maximum score M; M and the sum of exponentials in *mo, *lo.
__device__ __forceinline__ float hrx_attend_combine(unsigned int i, unsigned int hd, const float* wm, const float* wl,
                                                    const float* wacc, float* mo, float* lo) {
    const unsigned int nwarps = blockDim.x >> 5;
    float M = wm[0];
    for (unsigned int w = 1; w < nwarps; ++w) M = fmaxf(M, wm[w]);
    float l = 0.f, a = 0.f;
    for (unsigned int w = 0; w < nwarps; ++w) {
        const float c = expf(wm[w] - M);
        l += wl[w] * c;
        a += wacc[w * hd + i] * c;
    }
    *mo = M;
    *lo = l;
    return a;
}
"""

ATTENTION_CUDA = ATTEND_CUDA + r"""
// ``splits`` blocks per head (block h * splits + j: head h, split j): add the QKV bias,
// append this position's K/V row to the cache (the split holding row pos), attend. At
// most HRX_ATTN_MIN_ROWS rows in all: split 0 attends alone and writes out. Otherwise
// each split writes its partial -- part[(h * splits + j) * (hd + 2)]: [0, hd) the sum of
// exp(s_t - m) V[t], [hd] m = the maximum score, [hd + 1] the sum of exp(s_t - m) --
// and the head's last block to finish (sync[h] counts them; it sets it back to 0)
// combines them in split order: the result does not depend on which block is last.
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_attention(
        const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, unsigned short* __restrict__ kc,
        unsigned short* __restrict__ vc, unsigned short* __restrict__ out, float* part, unsigned int* sync,
        unsigned int D, unsigned int hd, unsigned int P, float scale, unsigned int splits) {
    hrx_grid_dependencies();
    __shared__ float wm[HRX_ATTN_THREADS / 32u];
    __shared__ float wl[HRX_ATTN_THREADS / 32u];
    __shared__ float wacc[HRX_ATTN_THREADS / 32u * HRX_MAX_HEAD_DIM];
    __shared__ unsigned int last;
    const unsigned int pos = state[0];
    if (pos >= P || P > HRX_MAX_POSITIONS || hd > HRX_MAX_HEAD_DIM || hd < 8u || (hd & (hd - 1u))
        || blockDim.x != HRX_ATTN_THREADS || splits == 0u || splits > HRX_ATTN_MAX_SPLITS) return;
    const unsigned int head = blockIdx.x / splits, split = blockIdx.x % splits, n = pos + 1u;
    unsigned int rows = (n + splits - 1u) / splits;
    if (rows < HRX_ATTN_MIN_ROWS) rows = HRX_ATTN_MIN_ROWS;
    const unsigned int active = (n + rows - 1u) / rows, t0 = split * rows;
    if (split >= active) return;
    const unsigned int t1 = n - t0 < rows ? n : t0 + rows;
    const unsigned int base = head * hd;
    // the split holding row pos appends the new key/value row (BF16); nothing in this
    // launch reads it back from the cache (hrx_attend_rows takes it from qkv)
    if (t1 == n) {
        for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
            const unsigned int c = base + i;
            kc[(size_t)pos * D + c] = hrx_f32_to_bf16_rn(qkv[D + c] + hrx_bf16_to_f32(bias[D + c]));
            vc[(size_t)pos * D + c] = hrx_f32_to_bf16_rn(qkv[2u * D + c] + hrx_bf16_to_f32(bias[2u * D + c]));
        }
    }
    if (hd <= 64u) hrx_attend_rows<2>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    else if (hd == 128u) hrx_attend_rows<4>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    else hrx_attend_rows<8>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    const unsigned int stride = hd + 2u;
    float M, l;
    if (active == 1u) {
        for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
            const float a = hrx_attend_combine(i, hd, wm, wl, wacc, &M, &l);
            out[base + i] = hrx_f32_to_bf16_rn(a / l);
        }
        return;
    }
    float* dst = part + (size_t)(head * splits + split) * stride;
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        dst[i] = hrx_attend_combine(i, hd, wm, wl, wacc, &M, &l);
        if (i == 0u) {
            dst[hd] = M;
            dst[hd + 1u] = l;
        }
    }
    __threadfence();  // this block's partial, before its count
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(sync + head, 1u) == active - 1u;
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other blocks' partials (counted before ours), read past L1
    const volatile float* pp = part + (size_t)head * splits * stride;
    float m = -3.402823466e38f;
    for (unsigned int j = 0; j < active; ++j) m = fmaxf(m, pp[j * stride + hd]);
    float lsum = 0.f;
    for (unsigned int j = 0; j < active; ++j) lsum += pp[j * stride + hd + 1u] * expf(pp[j * stride + hd] - m);
    const float inv = 1.f / lsum;
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.f;
        for (unsigned int j = 0; j < active; ++j) a += pp[j * stride + i] * expf(pp[j * stride + hd] - m);
        out[base + i] = hrx_f32_to_bf16_rn(a * inv);
    }
    if (threadIdx.x == 0) sync[head] = 0u;  // for the next launch (stream-ordered after this one)
}
"""

BIAS_GELU_CUDA = _PRELUDE + r"""
extern "C" __global__ void hrx_gpt2_bias_gelu(const float* __restrict__ y, const unsigned short* __restrict__ bias,
                                              unsigned short* __restrict__ out, unsigned int N) {
    hrx_grid_dependencies();
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    out[i] = hrx_f32_to_bf16_rn(hrx_gelu_new(y[i] + hrx_bf16_to_f32(bias[i])));
}
"""

NEXT_INDICES_CUDA = GRID_DEPENDENCIES_CUDA + r"""
// The next step's embedding indices: the token at position next (from the prompt while
// next is a prompt position) and the position itself, clamped into the tables.
__device__ __forceinline__ void hrx_next_indices(const int* seq, long long* emb_idx, unsigned int next,
                                                 unsigned int P) {
    const unsigned int p = next < P ? next : P - 1u;
    emb_idx[0] = (long long)seq[p];
    emb_idx[1] = (long long)p;
}

"""

ARGMAX_CUDA = NEXT_INDICES_CUDA + r"""
__device__ __forceinline__ void hrx_better(float& bv, unsigned int& bi, float v, unsigned int i) {
    if (v > bv || (v == bv && i < bi)) { bv = v; bi = i; }
}

extern "C" __global__ void __launch_bounds__(1024) hrx_gpt2_argmax(
        const float* __restrict__ logits, unsigned int* __restrict__ state, int* __restrict__ seq,
        long long* __restrict__ emb_idx, unsigned int V, unsigned int P) {
    hrx_grid_dependencies();
    __shared__ float sv[32];
    __shared__ unsigned int si[32];
    float bv = -3.402823466e38f;
    unsigned int bi = 0xffffffffu;
    // 16-byte loads, several in flight per thread (the buffer is 16-byte aligned)
    const float4* l4 = reinterpret_cast<const float4*>(logits);
    const unsigned int n4 = V >> 2;
    #pragma unroll 4
    for (unsigned int i = threadIdx.x; i < n4; i += blockDim.x) {
        const float4 f = l4[i];
        hrx_better(bv, bi, f.x, 4u * i);
        hrx_better(bv, bi, f.y, 4u * i + 1u);
        hrx_better(bv, bi, f.z, 4u * i + 2u);
        hrx_better(bv, bi, f.w, 4u * i + 3u);
    }
    for (unsigned int i = 4u * n4 + threadIdx.x; i < V; i += blockDim.x) hrx_better(bv, bi, logits[i], i);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const unsigned int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        hrx_better(bv, bi, ov, oi);
    }
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    if (lane == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int nwarps = (blockDim.x + 31u) >> 5;
        for (unsigned int w = 1; w < nwarps; ++w) hrx_better(bv, bi, sv[w], si[w]);
        if (bi >= V) bi = 0;  // every logit NaN
        const unsigned int next = state[0] + 1u;
        if (next < P && next >= state[1]) seq[next] = (int)bi;
        hrx_next_indices(seq, emb_idx, next, P);
        state[0] = next;
    }
}
"""

ADVANCE_CUDA = NEXT_INDICES_CUDA + r"""
extern "C" __global__ void hrx_gpt2_advance(unsigned int* __restrict__ state, const int* __restrict__ seq,
                                            long long* __restrict__ emb_idx, unsigned int P) {
    hrx_grid_dependencies();
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned int next = state[0] + 1u;
    hrx_next_indices(seq, emb_idx, next, P);
    state[0] = next;
}
"""


# -- host mirrors -------------------------------------------------------------------


def _bf(a: np.ndarray) -> np.ndarray:
    """BF16 bytes -> float32."""
    return a.view(bfloat16).astype(np.float32)


def _layer_norm_host(x: np.ndarray, g: np.ndarray, b: np.ndarray, xn: np.ndarray, d: int, eps: np.float32) -> None:
    mean = np.float32(x.sum(dtype=np.float32) / np.float32(d))
    c = x - mean
    rstd = np.float32(1.0) / np.sqrt(np.float32((c * c).sum(dtype=np.float32) / np.float32(d)) + eps)
    xn[: 2 * d].view(bfloat16)[:] = (c * rstd * _bf(g[: 2 * d]) + _bf(b[: 2 * d])).astype(bfloat16)


def _embed_ln_host(te, pe, g, b, x, xn, d, eps) -> None:
    d = int(d)
    xf = x[: 4 * d].view(np.float32)
    xf[:] = _bf(te[: 2 * d]) + _bf(pe[: 2 * d])
    _layer_norm_host(xf, g, b, xn, d, eps)


def _residual_ln_host(x, y, bias, g, b, xn, d, eps) -> None:
    d = int(d)
    xf = x[: 4 * d].view(np.float32)
    xf += y[: 4 * d].view(np.float32) + _bf(bias[: 2 * d])
    _layer_norm_host(xf, g, b, xn, d, eps)


def _attention_host(qkv, bias, state, kc, vc, out, part, sync, d, hd, p, scale, splits) -> None:
    d, hd, p, splits = int(d), int(hd), int(p), int(splits)
    pos = int(state[:4].view(np.uint32)[0])
    if pos >= p or not 1 <= splits <= ATTENTION_MAX_SPLITS:
        return
    full = qkv[: 12 * d].view(np.float32) + _bf(bias[: 6 * d])
    q, k, v = full[:d], full[d : 2 * d], full[2 * d :]
    kcache = kc.view(bfloat16).reshape(p, d)
    vcache = vc.view(bfloat16).reshape(p, d)
    kcache[pos] = k.astype(bfloat16)
    vcache[pos] = v.astype(bfloat16)
    heads = d // hd
    keys = kcache[: pos + 1].astype(np.float32).reshape(pos + 1, heads, hd)
    vals = vcache[: pos + 1].astype(np.float32).reshape(pos + 1, heads, hd)
    scores = np.einsum("hi,thi->ht", q.reshape(heads, hd), keys) * np.float32(scale)
    rows, active = attention_split_rows(pos, splits)
    if active == 1:
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        probs = scores / scores.sum(axis=1, keepdims=True, dtype=np.float32)
        out[: 2 * d].view(bfloat16)[:] = np.einsum("ht,thi->hi", probs, vals).reshape(d).astype(bfloat16)
        return
    # the kernel's split: per split the maximum, sum of exponentials and unnormalized sum
    # (kept in ``part`` as the kernel does), then their combination in split order
    stride = hd + 2
    pf = part[: 4 * heads * splits * stride].view(np.float32).reshape(heads, splits, stride)
    for j in range(active):
        sl = slice(j * rows, min(pos + 1, (j + 1) * rows))
        m = scores[:, sl].max(axis=1, keepdims=True)
        e = np.exp(scores[:, sl] - m)
        pf[:, j, :hd] = np.einsum("ht,thi->hi", e, vals[sl])
        pf[:, j, hd] = m[:, 0]
        pf[:, j, hd + 1] = e.sum(axis=1, dtype=np.float32)
    m = pf[:, :active, hd].max(axis=1, keepdims=True)
    w = np.exp(pf[:, :active, hd] - m)
    total = (pf[:, :active, hd + 1] * w).sum(axis=1, dtype=np.float32)
    acc = np.einsum("hj,hji->hi", w, pf[:, :active, :hd])
    out[: 2 * d].view(bfloat16)[:] = (acc * (np.float32(1) / total)[:, None]).reshape(d).astype(bfloat16)
    sync[: 4 * heads].view(np.uint32)[:] = 0


def _bias_gelu_host(y, bias, out, n) -> None:
    n = int(n)
    v = y[: 4 * n].view(np.float32) + _bf(bias[: 2 * n])
    t = np.tanh(np.float32(0.7978845608028654) * (v + np.float32(0.044715) * v * v * v))
    out[: 2 * n].view(bfloat16)[:] = (np.float32(0.5) * v * (np.float32(1.0) + t)).astype(bfloat16)


def _next_indices_host(seq: np.ndarray, emb_idx: np.ndarray, nxt: int, p: int) -> None:
    q = min(nxt, p - 1)
    idx = emb_idx[:16].view(np.int64)
    idx[0], idx[1] = int(seq[: 4 * p].view(np.int32)[q]), q


def _argmax_host(logits, state, seq, emb_idx, v, p) -> None:
    v, p = int(v), int(p)
    lf = logits[: 4 * v].view(np.float32)
    best = int(np.argmax(np.where(np.isnan(lf), -np.inf, lf)))
    st = state[:16].view(np.uint32)
    nxt = int(st[0]) + 1
    if nxt < p and nxt >= int(st[1]):
        seq.view(np.int32)[nxt] = best
    _next_indices_host(seq, emb_idx, nxt, p)
    st[0] = nxt


def _advance_host(state, seq, emb_idx, p) -> None:
    st = state[:16].view(np.uint32)
    nxt = int(st[0]) + 1
    _next_indices_host(seq, emb_idx, nxt, int(p))
    st[0] = nxt


EMBED_LN = Kernel(
    "hrx_gpt2_embed_ln",
    buffers=("read", "read", "read", "read", "write", "write"),
    scalars=(np.uint32, np.float32),
    host=_embed_ln_host, cuda=EMBED_LN_CUDA, programmatic=True,
)
RESIDUAL_LN = Kernel(
    "hrx_gpt2_residual_ln",
    buffers=("read_write", "read", "read", "read", "read", "write"),
    scalars=(np.uint32, np.float32),
    host=_residual_ln_host, cuda=RESIDUAL_LN_CUDA, programmatic=True,
)
ATTENTION = Kernel(
    "hrx_gpt2_attention",
    buffers=("read", "read", "read", "read_write", "read_write", "write", "read_write", "read_write"),
    scalars=(np.uint32, np.uint32, np.uint32, np.float32, np.uint32),
    host=_attention_host, cuda=ATTENTION_CUDA, programmatic=True,
)
BIAS_GELU = Kernel(
    "hrx_gpt2_bias_gelu",
    buffers=("read", "read", "write"),
    scalars=(np.uint32,),
    host=_bias_gelu_host, cuda=BIAS_GELU_CUDA, programmatic=True,
)
ARGMAX = Kernel(
    "hrx_gpt2_argmax",
    buffers=("read", "read_write", "read_write", "write"),
    scalars=(np.uint32, np.uint32),
    host=_argmax_host, cuda=ARGMAX_CUDA, programmatic=True,
)
ADVANCE = Kernel(
    "hrx_gpt2_advance",
    buffers=("read_write", "read", "write"),
    scalars=(np.uint32,),
    host=_advance_host, cuda=ADVANCE_CUDA, programmatic=True,
)

ALL = (EMBED_LN, RESIDUAL_LN, ATTENTION, BIAS_GELU, ARGMAX, ADVANCE)
#: Engines this distribution has kernels for.
ENGINES = ("host", "cuda", "amdgpu")


def kernels_for(engine: str) -> dict[str, Kernel]:
    """The GPT-2 kernels (decode step, fused decode step, batched prefill) for ``engine`` by name
    (empty where there are none)."""
    if engine not in ENGINES:
        return {}
    from .fused_kernels import FUSED
    from .prefill_kernels import PREFILL

    return {k.name: k for k in (*ALL, *FUSED, *PREFILL)}
