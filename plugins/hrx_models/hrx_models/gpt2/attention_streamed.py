"""The GPT-2 decoder's decode attention kernel, ``hrx_gpt2_attention_streamed`` (the
default of ``StepKernels.attention`` since 2026-12-02).

Same buffers, scalars, host mirror and results (within F32 rounding) as the earlier
kernel, :data:`.kernels.ATTENTION`; a different way through a block's rows. There, a
block of 256 threads gives every thread whole K rows to score, keeps the scores in
shared memory, takes a block-wide max and sum (four barriers), then sums P.V in row
groups. Here every warp streams whole K and V rows at once -- a row is L = head_dim /
DPL lanes of DPL = 2, 4 or 8 BF16 (4-16 bytes a lane; L = 16 where that allows), a
warp takes 32 / L rows a step -- in chunks of up to 32 / DPL steps whose loads are all
issued before any is used; scores of a chunk are reduced together, and each lane keeps
an online softmax (running maximum, sum of exponentials, unnormalized P.V over its
dimensions) that the lanes, then the warps, combine: one barrier and no scores in
shared memory. The step's own K/V row comes from qkv + bias (rounded to BF16 as the
cache holds it), not back from the cache.

Measured on the H200, interleaved in one process (``python bench/tools/attention_ab.py
--row-lanes 16,8``, 2026-12-02), us a token of greedy decode, earlier kernel -> this one:
GPT-2 small 278.1 -> 270.2 after 16 positions, 343.0 -> 321.4 after 960; GPT-2 medium
739.1 -> 726.3 and 871.9 -> 832.2; 1.3B (head_dim 128) 1294.3 -> 1254.6 and 1465.6 ->
1394.2. With 32 lanes a row (DPL 2 at head_dim 64) it was 1-4% slower than the earlier
kernel for GPT-2 small and medium; an earlier form with four steps of loads in flight
(commit 5efb22b) was slower at 1000 positions.
"""

from __future__ import annotations

from hrx_core.kernel import Kernel

from .kernels import ATTENTION, ATTENTION_COMMON_CUDA, _attention_host

#: The streamed attention's device functions (after ATTENTION_COMMON_CUDA, or its body
#: where a source has the prelude already): hrx_attend_chunked, hrx_attend_combine.
ATTEND_STREAMED_DEVICE = r"""
// Lanes that share a K/V row (32, 16 or 8; a power of two): head_dim / this many BF16 a lane,
// clamped to 2..8. bench/tools/attention_ab.py --row-lanes compares variants: on the H200
// 16 was faster than 32 at head_dim 64 (GPT-2 small 2.8% a token after 16 positions,
// 6.3% after 960), and 16, 8 and 32 were even at head_dim 128.
#ifndef HRX_ATTN_ROW_LANES
#define HRX_ATTN_ROW_LANES 16u
#endif
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
// value) comes from qkv + bias, rounded to BF16 as the cache holds it (qkv read past L1:
// the kernel that attends in the QKV projection's tail reads what other blocks of its
// own launch wrote); the other rows from the cache (written by earlier launches). Leaves in wm/wl/wacc (shared: one per
// warp, wacc hd per warp) the block's m, l and unnormalized sum, after a barrier.
template <unsigned int DPL, unsigned int U>
__device__ __forceinline__ void hrx_attend_rows(const float* qkv, const unsigned short* __restrict__ bias,
                                                const unsigned short* kc, const unsigned short* vc, unsigned int D,
                                                unsigned int hd, unsigned int base, unsigned int pos, unsigned int t0,
                                                unsigned int t1, float scale, float* wm, float* wl, float* wacc) {
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const unsigned int L = hd / DPL, sub = lane / L, d0 = (lane % L) * DPL, step = nwarps * (32u / L);
    float q[DPL], kn[DPL], vn[DPL], acc[DPL];
    #pragma unroll
    for (unsigned int j = 0; j < DPL; ++j) {
        const unsigned int c = base + d0 + j;
        q[j] = (__ldcg(qkv + c) + hrx_bf16_to_f32(bias[c])) * scale;
        kn[j] = hrx_bf16_to_f32(hrx_f32_to_bf16_rn(__ldcg(qkv + D + c) + hrx_bf16_to_f32(bias[D + c])));
        vn[j] = hrx_bf16_to_f32(hrx_f32_to_bf16_rn(__ldcg(qkv + 2u * D + c) + hrx_bf16_to_f32(bias[2u * D + c])));
        acc[j] = 0.f;
    }
    float m = -3.402823466e38f, l = 0.f;
    // warp-uniform loop: every lane shuffles on every step, lanes past t1 add nothing. A
    // chunk is U steps: its loads are all issued first, its scores reduced together, then
    // one rescale of the running sums by the chunk's maximum.
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

// hrx_attend_rows with chunks of U = 32 / DPL steps (16, 8 or 4: 64..256 bytes of K and
// V a lane in flight), or of 2 or 4 where the rows [t0, t1) take a warp no more steps than
// that: a short context then reduces and exponentiates no empty steps.
template <unsigned int DPL>
__device__ __forceinline__ void hrx_attend_chunked(const float* qkv, const unsigned short* __restrict__ bias,
                                                   const unsigned short* kc, const unsigned short* vc, unsigned int D,
                                                   unsigned int hd, unsigned int base, unsigned int pos, unsigned int t0,
                                                   unsigned int t1, float scale, float* wm, float* wl, float* wacc) {
    const unsigned int step = (blockDim.x >> 5) * (32u / (hd / DPL));
    const unsigned int steps = (t1 - t0 + step - 1u) / step;
    if (steps <= 2u) hrx_attend_rows<DPL, 2u>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    else if (steps <= 4u) hrx_attend_rows<DPL, 4u>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    else hrx_attend_rows<DPL, 32u / DPL>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
}

// Row ``pos`` of the K and V caches (the head's columns from ``base``) from qkv + bias,
// rounded to BF16 (qkv read past L1, as in hrx_attend_rows), by the block's threads.
__device__ __forceinline__ void hrx_attend_append(const float* qkv, const unsigned short* __restrict__ bias,
                                                  unsigned short* kc, unsigned short* vc, unsigned int D,
                                                  unsigned int hd, unsigned int base, unsigned int pos) {
    for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
        const unsigned int c = base + i;
        kc[(size_t)pos * D + c] = hrx_f32_to_bf16_rn(__ldcg(qkv + D + c) + hrx_bf16_to_f32(bias[D + c]));
        vc[(size_t)pos * D + c] = hrx_f32_to_bf16_rn(__ldcg(qkv + 2u * D + c) + hrx_bf16_to_f32(bias[2u * D + c]));
    }
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

ATTENTION_STREAMED_CUDA = ATTENTION_COMMON_CUDA + ATTEND_STREAMED_DEVICE + r"""
// ``splits`` blocks per head (block h * splits + j: head h, split j): add the QKV bias,
// append this position's K/V row to the cache (the split holding row pos), attend. At
// most HRX_ATTN_MIN_ROWS rows in all: split 0 attends alone and writes out. Otherwise
// each split writes its partial -- part[(h * splits + j) * (hd + 2)]: [0, hd) the sum of
// exp(s_t - m) V[t], [hd] m = the maximum score, [hd + 1] the sum of exp(s_t - m) --
// and the head's last block to finish (sync[h] counts them; it sets it back to 0)
// combines them in split order: the result does not depend on which block is last.
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_attention_streamed(
        const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, unsigned short* __restrict__ kc,
        unsigned short* __restrict__ vc, unsigned short* __restrict__ out, float* part, unsigned int* sync,
        unsigned int D, unsigned int hd, unsigned int P, float scale, unsigned int splits) {
    hrx_grid_dependencies();
    __shared__ float wm[HRX_ATTN_THREADS / 32u];
    __shared__ float wl[HRX_ATTN_THREADS / 32u];
    __shared__ float wacc[HRX_ATTN_THREADS / 32u * HRX_MAX_HEAD_DIM];
    const unsigned int pos = state[0];
    if (pos >= P || P > HRX_MAX_POSITIONS || hd > HRX_MAX_HEAD_DIM || hd < 8u || (hd & (hd - 1u))
        || blockDim.x != HRX_ATTN_THREADS || splits == 0u || splits > HRX_ATTN_MAX_SPLITS) return;
    const HrxAttnSplit sp = hrx_attention_split(pos, splits);
    if (sp.split >= sp.active) return;
    const unsigned int head = sp.head, split = sp.split, active = sp.active, t0 = sp.t0, t1 = sp.t1, n = pos + 1u;
    const unsigned int base = head * hd;
    // the split holding row pos appends the new key/value row (BF16); nothing in this
    // launch reads it back from the cache (hrx_attend_rows takes it from qkv)
    if (t1 == n) hrx_attend_append(qkv, bias, kc, vc, D, hd, base, pos);
    // DPL dimensions a lane: HRX_ATTN_ROW_LANES lanes a row where that gives 2..8
    const unsigned int dpl = hd / HRX_ATTN_ROW_LANES;
    if (dpl <= 2u) hrx_attend_chunked<2>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    else if (dpl == 4u) hrx_attend_chunked<4>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
    else hrx_attend_chunked<8>(qkv, bias, kc, vc, D, hd, base, pos, t0, t1, scale, wm, wl, wacc);
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
    hrx_attention_finish(part, sync, out, head, splits, active, hd, base);
}
"""

#: Launched as :data:`.kernels.ATTENTION` is (the same grid, block, buffers and scalars).
ATTENTION_STREAMED = Kernel(
    "hrx_gpt2_attention_streamed",
    buffers=ATTENTION.buffer_access, scalars=ATTENTION.scalar_types,
    host=_attention_host, cuda=ATTENTION_STREAMED_CUDA, programmatic=True,
)


def streamed_variant(row_lanes: int) -> Kernel:
    """:data:`ATTENTION_STREAMED` with ``row_lanes`` lanes a K/V row (32, 16 or 8; the
    kernel's own is 16), as ``hrx_gpt2_attention_streamed_l<row_lanes>``: for A/B runs."""
    if row_lanes not in (8, 16, 32):
        raise ValueError(f"row_lanes: expected 8, 16 or 32, got {row_lanes!r}")
    name = f"hrx_gpt2_attention_streamed_l{row_lanes}"
    src = f"#define HRX_ATTN_ROW_LANES {row_lanes}u\n" + ATTENTION_STREAMED_CUDA.replace(
        "hrx_gpt2_attention_streamed(", name + "(")
    return Kernel(name, buffers=ATTENTION.buffer_access, scalars=ATTENTION.scalar_types,
                  host=_attention_host, cuda=src, programmatic=True)
