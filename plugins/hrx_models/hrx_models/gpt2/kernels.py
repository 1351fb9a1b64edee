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
shuffles then one value per warp in shared memory; attention keeps one head's
scores in 32 KiB of static shared memory (n_positions <= 8192), reads K and V rows
as 16-byte vectors (head_dim a power of two, 8..256) and sums P.V in row groups;
layer norms keep up to 8 values a thread in registers (n_embd <= 8192), argmax reads
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

#: What both decode attention kernels share: limits, the rows a block attends, the last
#: block's combine of the splits' partials.
ATTENTION_COMMON_BODY = f"""
#define HRX_MAX_HEAD_DIM {MAX_HEAD_DIM}u
#define HRX_MAX_POSITIONS {MAX_POSITIONS}u
#define HRX_ATTN_THREADS {ATTENTION_THREADS}u
#define HRX_ATTN_MIN_ROWS {ATTENTION_MIN_ROWS}u
#define HRX_ATTN_MAX_SPLITS {ATTENTION_MAX_SPLITS}u
""" + r"""
// The rows block blockIdx.x attends -- head blockIdx.x / splits, split blockIdx.x % splits --
// of rows 0..pos: [t0, t1), at least HRX_ATTN_MIN_ROWS a split; the first ``active``
// splits attend, a block of a later split has nothing to do.
struct HrxAttnSplit {
    unsigned int head, split, active, t0, t1;
};

__device__ __forceinline__ HrxAttnSplit hrx_attention_split(unsigned int pos, unsigned int splits) {
    HrxAttnSplit s;
    const unsigned int n = pos + 1u;
    s.head = blockIdx.x / splits;
    s.split = blockIdx.x % splits;
    unsigned int rows = (n + splits - 1u) / splits;
    if (rows < HRX_ATTN_MIN_ROWS) rows = HRX_ATTN_MIN_ROWS;
    s.active = (n + rows - 1u) / rows;
    s.t0 = s.split * rows;
    s.t1 = s.split >= s.active ? s.t0 : (n - s.t0 < rows ? n : s.t0 + rows);
    return s;
}

// After a split wrote its partial to part[(head * splits + split) * (hd + 2)] (every thread
// of the block calls this): count it, and the head's last block to finish combines the
// ``active`` partials in split order into out[base..base + hd) and sets sync[head] back
// to 0 -- the result does not depend on which block is last.
__device__ __forceinline__ void hrx_attention_finish(float* part, unsigned int* sync, unsigned short* out,
                                                     unsigned int head, unsigned int splits, unsigned int active,
                                                     unsigned int hd, unsigned int base) {
    __shared__ unsigned int last;
    const unsigned int stride = hd + 2u;
    __threadfence();  // this block's partial, before its count
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(sync + head, 1u) == active - 1u;
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other blocks' partials (counted before ours), read past L1
    const volatile float* pp = part + (size_t)head * splits * stride;
    float m = -3.402823466e38f;
    for (unsigned int j = 0; j < active; ++j) m = fmaxf(m, pp[j * stride + hd]);
    float l = 0.f;
    for (unsigned int j = 0; j < active; ++j) l += pp[j * stride + hd + 1u] * expf(pp[j * stride + hd] - m);
    const float inv = 1.f / l;
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.f;
        for (unsigned int j = 0; j < active; ++j) a += pp[j * stride + i] * expf(pp[j * stride + hd] - m);
        out[base + i] = hrx_f32_to_bf16_rn(a * inv);
    }
    if (threadIdx.x == 0) sync[head] = 0u;  // for the next launch (stream-ordered after this one)
}

"""
ATTENTION_COMMON_CUDA = _PRELUDE + ATTENTION_COMMON_BODY

#: The decode attention's own device code (dot products, hrx_attend, after the common part).
ATTEND_CUDA = ATTENTION_COMMON_CUDA + r"""
// 8 BF16 (one 16-byte vector) dotted with 8 F32 of shared memory
__device__ __forceinline__ float hrx_dot8_bf16(uint4 k, const float* q) {
    float s = q[0] * __uint_as_float(k.x << 16);
    s += q[1] * __uint_as_float(k.x & 0xffff0000u);
    s += q[2] * __uint_as_float(k.y << 16);
    s += q[3] * __uint_as_float(k.y & 0xffff0000u);
    s += q[4] * __uint_as_float(k.z << 16);
    s += q[5] * __uint_as_float(k.z & 0xffff0000u);
    s += q[6] * __uint_as_float(k.w << 16);
    s += q[7] * __uint_as_float(k.w & 0xffff0000u);
    return s;
}

__device__ __forceinline__ void hrx_axpy8_bf16(float p, uint4 v, float* acc) {
    acc[0] += p * __uint_as_float(v.x << 16);
    acc[1] += p * __uint_as_float(v.x & 0xffff0000u);
    acc[2] += p * __uint_as_float(v.y << 16);
    acc[3] += p * __uint_as_float(v.y & 0xffff0000u);
    acc[4] += p * __uint_as_float(v.z << 16);
    acc[5] += p * __uint_as_float(v.z & 0xffff0000u);
    acc[6] += p * __uint_as_float(v.w << 16);
    acc[7] += p * __uint_as_float(v.w & 0xffff0000u);
}

// out[0..hd) = softmax(scale * q . K[0..pos]) . V[0..pos] for the head whose columns start
// at ``base`` (q: hd F32 in shared memory, written before a barrier; K/V rows 0..pos in the
// cache, visible to the block). One block of HRX_ATTN_THREADS; head_dim hd is a power of
// two in 8..256 (checked on the host), so rows split into 16-byte vectors and hd / 8
// divides the block. sc: HRX_MAX_POSITIONS floats, part: 8 * HRX_ATTN_THREADS, red: 32.
// (kc/vc carry no __restrict__: the decode kernel writes the row it then reads, so
// these loads must not take the non-coherent read-only path.)
__device__ __forceinline__ void hrx_attend(const float* q, const unsigned short* kc,
                                           const unsigned short* vc, unsigned short* out,
                                           unsigned int D, unsigned int hd, unsigned int base, unsigned int pos,
                                           float scale, float* sc, float* part, float* red) {
    const unsigned int tid = threadIdx.x;
    // scores: one thread per cached row, 16-byte loads along the head dimension
    const unsigned int nvec = hd >> 3;
    for (unsigned int t = tid; t <= pos; t += blockDim.x) {
        const uint4* kr = reinterpret_cast<const uint4*>(kc + (size_t)t * D + base);
        float s = 0.f;
        #pragma unroll 8
        for (unsigned int j = 0; j < nvec; ++j) s += hrx_dot8_bf16(kr[j], q + 8u * j);
        sc[t] = s * scale;
    }
    __syncthreads();
    // softmax over rows 0..pos
    float m = -3.402823466e38f;
    for (unsigned int t = tid; t <= pos; t += blockDim.x) m = fmaxf(m, sc[t]);
    m = hrx_block_max(m, red);
    float sum = 0.f;
    for (unsigned int t = tid; t <= pos; t += blockDim.x) {
        const float e = expf(sc[t] - m);
        sc[t] = e;
        sum += e;
    }
    const float inv = 1.f / hrx_block_sum(sum, red);  // its barriers also publish sc
    // out = softmax . V: thread (row group rg, vector dg) sums 8 dims over rows rg, rg + groups, ...
    const unsigned int groups = blockDim.x / nvec;
    const unsigned int dg = tid % nvec, rg = tid / nvec;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    #pragma unroll 4
    for (unsigned int t = rg; t <= pos; t += groups)
        hrx_axpy8_bf16(sc[t], reinterpret_cast<const uint4*>(vc + (size_t)t * D + base)[dg], acc);
    #pragma unroll
    for (int e = 0; e < 8; ++e) part[rg * hd + dg * 8u + e] = acc[e];  // groups * hd == 8 * blockDim
    __syncthreads();
    for (unsigned int i = tid; i < hd; i += blockDim.x) {
        float a = 0.f;
        for (unsigned int r = 0; r < groups; ++r) a += part[r * hd + i];
        out[base + i] = hrx_f32_to_bf16_rn(a * inv);
    }
}
"""

ATTENTION_CUDA = ATTEND_CUDA + r"""
// The partial attention of rows [t0, t1) (t1 - t0 <= HRX_MAX_POSITIONS): dst[0..hd) =
// sum_t exp(s_t - m) V[t] (unnormalized), dst[hd] = m = max_t s_t, dst[hd + 1] =
// sum_t exp(s_t - m), for s_t = scale * q . K[t]. Buffers as hrx_attend.
__device__ __forceinline__ void hrx_attend_part(const float* q, const unsigned short* kc, const unsigned short* vc,
                                                float* dst, unsigned int D, unsigned int hd, unsigned int base,
                                                unsigned int t0, unsigned int t1, float scale, float* sc, float* part,
                                                float* red) {
    const unsigned int tid = threadIdx.x, nvec = hd >> 3;
    for (unsigned int t = t0 + tid; t < t1; t += blockDim.x) {
        const uint4* kr = reinterpret_cast<const uint4*>(kc + (size_t)t * D + base);
        float s = 0.f;
        #pragma unroll 8
        for (unsigned int j = 0; j < nvec; ++j) s += hrx_dot8_bf16(kr[j], q + 8u * j);
        sc[t - t0] = s * scale;
    }
    __syncthreads();
    float m = -3.402823466e38f;
    for (unsigned int t = tid; t < t1 - t0; t += blockDim.x) m = fmaxf(m, sc[t]);
    m = hrx_block_max(m, red);
    float sum = 0.f;
    for (unsigned int t = tid; t < t1 - t0; t += blockDim.x) {
        const float e = expf(sc[t] - m);
        sc[t] = e;
        sum += e;
    }
    const float l = hrx_block_sum(sum, red);  // its barriers also publish sc
    const unsigned int groups = blockDim.x / nvec;
    const unsigned int dg = tid % nvec, rg = tid / nvec;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    #pragma unroll 4
    for (unsigned int t = t0 + rg; t < t1; t += groups)
        hrx_axpy8_bf16(sc[t - t0], reinterpret_cast<const uint4*>(vc + (size_t)t * D + base)[dg], acc);
    #pragma unroll
    for (int e = 0; e < 8; ++e) part[rg * hd + dg * 8u + e] = acc[e];
    __syncthreads();
    for (unsigned int i = tid; i < hd; i += blockDim.x) {
        float a = 0.f;
        for (unsigned int r = 0; r < groups; ++r) a += part[r * hd + i];
        dst[i] = a;
    }
    if (tid == 0) {
        dst[hd] = m;
        dst[hd + 1u] = l;
    }
}

// ``splits`` blocks per head (block h * splits + j: head h, split j): add the QKV bias,
// append this position's K/V row to the cache (the split holding row pos), attend. At
// most HRX_ATTN_MIN_ROWS rows in all: split 0 attends alone and writes out. Otherwise
// each split writes its partial to part[(h * splits + j) * (hd + 2)], and the head's last
// block to finish (sync[h] counts them; it sets it back to 0) combines them in split
// order -- the result does not depend on which block is last.
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_attention(
        const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, unsigned short* __restrict__ kc,
        unsigned short* __restrict__ vc, unsigned short* __restrict__ out, float* part, unsigned int* sync,
        unsigned int D, unsigned int hd, unsigned int P, float scale, unsigned int splits) {
    hrx_grid_dependencies();
    __shared__ float red[32];
    __shared__ float q[HRX_MAX_HEAD_DIM];
    __shared__ float pv[8u * HRX_ATTN_THREADS];
    __shared__ float sc[HRX_MAX_POSITIONS];
    const unsigned int pos = state[0];
    if (pos >= P || P > HRX_MAX_POSITIONS || hd > HRX_MAX_HEAD_DIM || (hd & 7u) || blockDim.x != HRX_ATTN_THREADS
        || splits == 0u || splits > HRX_ATTN_MAX_SPLITS) return;
    const HrxAttnSplit sp = hrx_attention_split(pos, splits);
    if (sp.split >= sp.active) return;
    const unsigned int head = sp.head, split = sp.split, active = sp.active, t0 = sp.t0, t1 = sp.t1, n = pos + 1u;
    const unsigned int base = head * hd;
    // this head's query (F32); the split holding row pos appends the new key/value row (BF16)
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        const unsigned int c = base + i;
        q[i] = qkv[c] + hrx_bf16_to_f32(bias[c]);
        if (t1 == n) {
            kc[(size_t)pos * D + c] = hrx_f32_to_bf16_rn(qkv[D + c] + hrx_bf16_to_f32(bias[D + c]));
            vc[(size_t)pos * D + c] = hrx_f32_to_bf16_rn(qkv[2u * D + c] + hrx_bf16_to_f32(bias[2u * D + c]));
        }
    }
    __syncthreads();  // the block's cache writes and q are visible to the whole block
    if (active == 1u) {
        hrx_attend(q, kc, vc, out, D, hd, base, pos, scale, sc, pv, red);
        return;
    }
    const unsigned int stride = hd + 2u;
    hrx_attend_part(q, kc, vc, part + (size_t)(head * splits + split) * stride, D, hd, base, t0, t1, scale, sc, pv, red);
    hrx_attention_finish(part, sync, out, head, splits, active, hd, base);
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
    from .attention_streamed import ATTENTION_STREAMED
    from .fused_kernels import FUSED
    from .prefill_kernels import PREFILL

    return {k.name: k for k in (*ALL, *FUSED, *PREFILL, ATTENTION_STREAMED)}
