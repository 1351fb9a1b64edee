"""The GPT-2 batched-prefill kernels: a chunk of prompt positions through a layer as
a matrix, one hrx Kernel each (a host numpy mirror and a CUDA C++ source).

A prefill chunk processes the positions ``pos .. pos + m - 1`` where ``pos`` and the
prompt length ``n`` come from the slot's device-side state and ``m = min(C, n - 1 -
pos)`` (0 once the prompt's last position but one is done: that last position is the
first decode step, which produces the first token). ``C`` is the chunk's row capacity;
every kernel below reads ``m`` from ``state`` itself, so one recorded graph serves
every chunk of every prompt and rows past ``m`` cost a block that returns at once.
Row ``r`` of the chunk's activations is position ``pos + r``. Conventions are the
decode step's (:mod:`.kernels`): F32 residual stream and projection outputs, BF16
projection inputs and cache, F32 arithmetic.

* ``hrx_gpt2_embed_rows``: ``x[r] = wte[seq[pos + r]] + wpe[pos + r]``; ``xn[r] = ln_1(x[r])``.
* ``hrx_gpt2_gemm``: ``y[r, n] = sum_k a[r, k] w[n, k]`` (BF16 in, F32 out) for ``r < m``:
  64 x 64 tiles of 128 threads; on sm_80+ each warp computes 32 x 32 with
  ``mma.sync.m16n8k16`` (BF16 tensor cores, F32 accumulation), elsewhere (gfx1151,
  older CUDA) the same fragments in plain FMA. K is a multiple of 8 (16-byte rows),
  any N (tails masked).
* ``hrx_gpt2_kv_rows``: K and V rows (with bias, BF16) of the chunk into the cache at
  rows ``pos .. pos + m - 1`` -- a kernel of its own, so that attention of every row
  sees the rows before it in the chunk.
* ``hrx_gpt2_attention_rows``: one block per head and 8 rows (a warp each): causal
  attention of position ``pos + r`` over cache rows ``0 .. pos + r``, the K/V rows
  staged in shared memory 32 at a time for all 8 rows, an online softmax per row.
* ``hrx_gpt2_residual_ln_rows``: ``x[r] += y[r] + bias``; ``xn[r] = LN(x[r])``.
* ``hrx_gpt2_bias_gelu_rows``: ``out = gelu_new(y + bias)`` over ``m`` rows.
* ``hrx_gpt2_advance_rows``: ``pos += m``; the embedding indices of the new ``pos``
  (for the decode step that follows the last chunk).
"""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

from hrx_core.kernel import Kernel

from .config import MAX_HEAD_DIM
from .kernels import (
    _PRELUDE,
    NEXT_INDICES_CUDA,
    _bf,
    _bias_gelu_host,
    _next_indices_host,
)

#: Query rows of one attention_rows block (one warp each).
ATTENTION_ROWS_PER_BLOCK = 8
#: Rows and columns of one GEMM tile, and its threads (four warps of 32 x 32).
GEMM_BM = 64
GEMM_BN = 64
GEMM_THREADS = 128

_ROWS_CUDA = r"""
// Rows of this prefill chunk: positions pos .. n_prompt - 2 that are left, at most C.
__device__ __forceinline__ unsigned int hrx_prefill_rows(const unsigned int* state, unsigned int C) {
    const unsigned int pos = state[0], n = state[1];
    if (n == 0u || pos + 1u >= n) return 0u;
    const unsigned int left = n - 1u - pos;
    return left < C ? left : C;
}
"""

EMBED_ROWS_CUDA = _PRELUDE + _ROWS_CUDA + r"""
extern "C" __global__ void __launch_bounds__(1024) hrx_gpt2_embed_rows(
        const unsigned short* __restrict__ wte, const unsigned short* __restrict__ wpe,
        const unsigned int* __restrict__ state, const int* __restrict__ seq,
        const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        float* __restrict__ x, unsigned short* __restrict__ xn,
        unsigned int D, float eps, unsigned int C, unsigned int V, unsigned int P) {
    const unsigned int r = blockIdx.x;
    if (r >= hrx_prefill_rows(state, C)) return;
    const unsigned int p = state[0] + r;
    if (p >= P) return;
    const unsigned int tok = (unsigned int)seq[p];
    const unsigned short* te = wte + (size_t)(tok < V ? tok : 0u) * D;  // ids are checked on the host
    const unsigned short* pe = wpe + (size_t)p * D;
    hrx_store_ln([&](unsigned int i) { return hrx_bf16_to_f32(te[i]) + hrx_bf16_to_f32(pe[i]); },
                 x + (size_t)r * D, g, b, xn + (size_t)r * D, D, eps);
}
"""

GEMM_CUDA = _PRELUDE + _ROWS_CUDA + f"""
#define HRX_GEMM_BM {GEMM_BM}u
#define HRX_GEMM_BN {GEMM_BN}u
""" + r"""
#define HRX_GEMM_BK 32u
#define HRX_GEMM_LD 40u  // BF16 per shared row: 80 bytes keep 16-byte stores aligned and fragment reads conflict-free

__device__ __forceinline__ uint4 hrx_zero4() {  // member by member: NVRTC has no includes here
    uint4 z;
    z.x = 0u; z.y = 0u; z.z = 0u; z.w = 0u;
    return z;
}

__device__ __forceinline__ unsigned int hrx_ld_pair(const unsigned short* p) {
    return *reinterpret_cast<const unsigned int*>(p);  // two BF16, the lower index in the low half
}

// One k16 step of a warp's 32 x 32: acc[i][j][e] is row wm + 16 i + g + 8 (e >> 1),
// column wn + 8 j + 2 t + (e & 1) of the tile (the m16n8k16 C fragment layout).
__device__ __forceinline__ void hrx_gemm_k16(float (&acc)[2][4][4], const unsigned short* As, const unsigned short* Ws,
                                             unsigned int wm, unsigned int wn, unsigned int kk,
                                             unsigned int g, unsigned int t) {
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int af[2][4], bf[4][2];
    #pragma unroll
    for (int i = 0; i < 2; ++i) {  // A fragment: rows g / g + 8, columns 2t, 2t + 1 / + 8
        const unsigned short* p = As + (wm + 16u * i + g) * HRX_GEMM_LD + kk + 2u * t;
        af[i][0] = hrx_ld_pair(p);
        af[i][1] = hrx_ld_pair(p + 8u * HRX_GEMM_LD);
        af[i][2] = hrx_ld_pair(p + 8u);
        af[i][3] = hrx_ld_pair(p + 8u * HRX_GEMM_LD + 8u);
    }
    #pragma unroll
    for (int j = 0; j < 4; ++j) {  // B fragment (W rows are B's columns): k 2t, 2t + 1 / + 8 of column g
        const unsigned short* q = Ws + (wn + 8u * j + g) * HRX_GEMM_LD + kk + 2u * t;
        bf[j][0] = hrx_ld_pair(q);
        bf[j][1] = hrx_ld_pair(q + 8u);
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
                : "r"(af[i][0]), "r"(af[i][1]), "r"(af[i][2]), "r"(af[i][3]), "r"(bf[j][0]), "r"(bf[j][1]));
        }
    }
#else
    // the same products in plain FMA, k outermost (every accumulator index a constant)
    for (unsigned int k = kk; k < kk + 16u; ++k) {
        float av[2][2], bv[4][2];
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
            av[i][0] = hrx_bf16_to_f32(As[(wm + 16u * i + g) * HRX_GEMM_LD + k]);
            av[i][1] = hrx_bf16_to_f32(As[(wm + 16u * i + g + 8u) * HRX_GEMM_LD + k]);
        }
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            bv[j][0] = hrx_bf16_to_f32(Ws[(wn + 8u * j + 2u * t) * HRX_GEMM_LD + k]);
            bv[j][1] = hrx_bf16_to_f32(Ws[(wn + 8u * j + 2u * t + 1u) * HRX_GEMM_LD + k]);
        }
        #pragma unroll
        for (int i = 0; i < 2; ++i)
            #pragma unroll
            for (int j = 0; j < 4; ++j)
                #pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] += av[i][e >> 1] * bv[j][e & 1];
    }
#endif
}

// y[r, n] = sum_k a[r, k] * w[n, k] for the chunk's rows r < m and n < N; grid
// (ceil(N / 64), ceil(C / 64)), 128 threads: four warps in a 2 x 2 grid of 32 x 32.
extern "C" __global__ void __launch_bounds__(128) hrx_gpt2_gemm(
        const unsigned short* __restrict__ a, const unsigned short* __restrict__ w,
        const unsigned int* __restrict__ state, float* __restrict__ y,
        unsigned int K, unsigned int N, unsigned int C) {
    __shared__ uint4 as4[HRX_GEMM_BM * HRX_GEMM_LD / 8u];  // uint4: 16-byte aligned tiles
    __shared__ uint4 ws4[HRX_GEMM_BN * HRX_GEMM_LD / 8u];
    unsigned short* As = reinterpret_cast<unsigned short*>(as4);
    unsigned short* Ws = reinterpret_cast<unsigned short*>(ws4);
    const unsigned int m = hrx_prefill_rows(state, C);
    const unsigned int row0 = blockIdx.y * HRX_GEMM_BM, col0 = blockIdx.x * HRX_GEMM_BN;
    if (row0 >= m || col0 >= N || (K & 7u) || blockDim.x != 128u) return;  // the whole block
    const unsigned int tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const unsigned int wm = (warp >> 1) * 32u, wn = (warp & 1u) * 32u;
    const unsigned int g = lane >> 2, t = lane & 3u;
    float acc[2][4][4];
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    for (unsigned int k0 = 0; k0 < K; k0 += HRX_GEMM_BK) {
        // stage 64 rows x 32 k of a and of w: 256 16-byte vectors each, two per thread;
        // rows past m / N and k past K are zeros
        #pragma unroll
        for (unsigned int s = 0; s < 2u; ++s) {
            const unsigned int v = tid + s * 128u;
            const unsigned int r = v >> 2, kv = (v & 3u) * 8u, k = k0 + kv;
            uint4 av = hrx_zero4(), wv = hrx_zero4();
            if (row0 + r < m && k < K) av = *reinterpret_cast<const uint4*>(a + (size_t)(row0 + r) * K + k);
            if (col0 + r < N && k < K) wv = *reinterpret_cast<const uint4*>(w + (size_t)(col0 + r) * K + k);
            *reinterpret_cast<uint4*>(As + r * HRX_GEMM_LD + kv) = av;
            *reinterpret_cast<uint4*>(Ws + r * HRX_GEMM_LD + kv) = wv;
        }
        __syncthreads();
        hrx_gemm_k16(acc, As, Ws, wm, wn, 0u, g, t);
        hrx_gemm_k16(acc, As, Ws, wm, wn, 16u, g, t);
        __syncthreads();  // before the next stage overwrites the tiles
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const unsigned int r = row0 + wm + 16u * i + g + ((e >> 1) << 3);
                const unsigned int n = col0 + wn + 8u * j + 2u * t + (e & 1);
                if (r < m && n < N) y[(size_t)r * N + n] = acc[i][j][e];
            }
}
"""

KV_ROWS_CUDA = _PRELUDE + _ROWS_CUDA + r"""
extern "C" __global__ void hrx_gpt2_kv_rows(
        const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, unsigned short* __restrict__ kc,
        unsigned short* __restrict__ vc, unsigned int D, unsigned int P, unsigned int C) {
    const unsigned int r = blockIdx.x;
    if (r >= hrx_prefill_rows(state, C)) return;
    const unsigned int p = state[0] + r;
    if (p >= P) return;
    const float* row = qkv + (size_t)r * 3u * D;
    for (unsigned int c = threadIdx.x; c < D; c += blockDim.x) {
        kc[(size_t)p * D + c] = hrx_f32_to_bf16_rn(row[D + c] + hrx_bf16_to_f32(bias[D + c]));
        vc[(size_t)p * D + c] = hrx_f32_to_bf16_rn(row[2u * D + c] + hrx_bf16_to_f32(bias[2u * D + c]));
    }
}
"""

ATTENTION_ROWS_CUDA = _PRELUDE + _ROWS_CUDA + f"""
#define HRX_MAX_HEAD_DIM {MAX_HEAD_DIM}u
#define HRX_ATTN_ROWS {ATTENTION_ROWS_PER_BLOCK}u
""" + r"""
#define HRX_ATTN_TILE 32u
#define HRX_KV_LD (HRX_MAX_HEAD_DIM / 2u + 1u)  // 32-bit words a staged K/V row: odd, so a warp's lanes reading
                                                 // one word of each of 32 rows hit 32 different banks

// grid (n_head, ceil(C / HRX_ATTN_ROWS)), 256 threads: block (h, b) attends rows
// r = b * 8 + warp (one warp a row, position pos + r) over cache rows 0 .. pos + r, the
// block's K/V rows staged in shared memory 32 at a time and shared by its 8 rows; per warp
// an online softmax (lane = key of the tile for the scores; lane + 32 j = dimension for
// the weighted V sum).
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_attention_rows(
        const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, const unsigned short* __restrict__ kc,
        const unsigned short* __restrict__ vc, unsigned short* __restrict__ out,
        unsigned int D, unsigned int hd, unsigned int P, float scale, unsigned int C) {
    __shared__ unsigned int ks[HRX_ATTN_TILE * HRX_KV_LD];
    __shared__ unsigned int vs[HRX_ATTN_TILE * HRX_KV_LD];
    __shared__ float qs[HRX_ATTN_ROWS * HRX_MAX_HEAD_DIM];
    const unsigned int m = hrx_prefill_rows(state, C), pos = state[0];
    const unsigned int r0 = blockIdx.y * HRX_ATTN_ROWS;
    // the whole block returns together (before any barrier)
    if (r0 >= m || pos + m > P || hd == 0u || hd > HRX_MAX_HEAD_DIM || (hd & 7u) || blockDim.x != 256u) return;
    const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned int rows = m - r0 < HRX_ATTN_ROWS ? m - r0 : HRX_ATTN_ROWS;
    const bool valid = warp < rows;  // uniform across the warp
    const unsigned int prow = pos + r0 + warp;  // this warp's position
    const unsigned int last = pos + r0 + rows - 1u;  // the block's last position
    const unsigned int base = blockIdx.x * hd, half = hd >> 1;
    for (unsigned int i = threadIdx.x; i < rows * hd; i += blockDim.x) {  // the queries, with bias
        const unsigned int w = i / hd, d = i % hd;
        qs[w * hd + d] = qkv[(size_t)(r0 + w) * 3u * D + base + d] + hrx_bf16_to_f32(bias[base + d]);
    }
    float acc[HRX_MAX_HEAD_DIM / 32u];
    #pragma unroll
    for (unsigned int j = 0; j < HRX_MAX_HEAD_DIM / 32u; ++j) acc[j] = 0.f;
    float mx = -3.402823466e38f, l = 0.f;
    const float* q = qs + warp * hd;
    for (unsigned int t0 = 0; t0 <= last; t0 += HRX_ATTN_TILE) {
        __syncthreads();  // the queries are written; the previous tile is read
        for (unsigned int i = threadIdx.x; i < HRX_ATTN_TILE * half; i += blockDim.x) {
            const unsigned int t = i / half, c = i % half;
            unsigned int kw = 0u, vw = 0u;
            if (t0 + t <= last) {
                kw = reinterpret_cast<const unsigned int*>(kc + (size_t)(t0 + t) * D + base)[c];
                vw = reinterpret_cast<const unsigned int*>(vc + (size_t)(t0 + t) * D + base)[c];
            }
            ks[t * HRX_KV_LD + c] = kw;
            vs[t * HRX_KV_LD + c] = vw;
        }
        __syncthreads();
        if (valid && t0 <= prow) {
            const unsigned int t = t0 + lane;  // this lane's key
            float s = -3.402823466e38f;
            if (t <= prow) {
                const unsigned int* kr = ks + lane * HRX_KV_LD;
                float dot = 0.f;
                for (unsigned int c = 0; c < half; ++c) {
                    const unsigned int w2 = kr[c];
                    dot += q[2u * c] * __uint_as_float(w2 << 16) + q[2u * c + 1u] * __uint_as_float(w2 & 0xffff0000u);
                }
                s = dot * scale;
            }
            float tmax = s;
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
            const float mnew = fmaxf(mx, tmax);
            const float corr = expf(mx - mnew);  // 0 on the first tile (mx is -FLT_MAX)
            const float p = t <= prow ? expf(s - mnew) : 0.f;
            float psum = p;
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
            l = l * corr + psum;
            #pragma unroll
            for (unsigned int j = 0; j < HRX_MAX_HEAD_DIM / 32u; ++j) acc[j] *= corr;
            for (unsigned int u = 0; u < HRX_ATTN_TILE; ++u) {
                const float pu = __shfl_sync(0xffffffffu, p, (int)u);  // 0 for keys past this row
                const unsigned int* vr = vs + u * HRX_KV_LD;
                #pragma unroll
                for (unsigned int j = 0; j < HRX_MAX_HEAD_DIM / 32u; ++j) {
                    const unsigned int d = lane + 32u * j;
                    if (d < hd) {
                        const unsigned int w2 = vr[d >> 1];
                        acc[j] += pu * __uint_as_float((d & 1u) ? (w2 & 0xffff0000u) : (w2 << 16));
                    }
                }
            }
            mx = mnew;
        }
    }
    if (valid) {
        const float inv = 1.f / l;
        #pragma unroll
        for (unsigned int j = 0; j < HRX_MAX_HEAD_DIM / 32u; ++j) {
            const unsigned int d = lane + 32u * j;
            if (d < hd) out[(size_t)(r0 + warp) * D + base + d] = hrx_f32_to_bf16_rn(acc[j] * inv);
        }
    }
}
"""

RESIDUAL_LN_ROWS_CUDA = _PRELUDE + _ROWS_CUDA + r"""
extern "C" __global__ void __launch_bounds__(1024) hrx_gpt2_residual_ln_rows(
        float* __restrict__ x, const float* __restrict__ y, const unsigned short* __restrict__ bias,
        const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        unsigned short* __restrict__ xn, const unsigned int* __restrict__ state,
        unsigned int D, float eps, unsigned int C) {
    const unsigned int r = blockIdx.x;
    if (r >= hrx_prefill_rows(state, C)) return;
    float* xr = x + (size_t)r * D;
    const float* yr = y + (size_t)r * D;
    hrx_store_ln([&](unsigned int i) { return xr[i] + (yr[i] + hrx_bf16_to_f32(bias[i])); },
                 xr, g, b, xn + (size_t)r * D, D, eps);
}
"""

BIAS_GELU_ROWS_CUDA = _PRELUDE + _ROWS_CUDA + r"""
extern "C" __global__ void hrx_gpt2_bias_gelu_rows(
        const float* __restrict__ y, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, unsigned short* __restrict__ out,
        unsigned int N, unsigned int C) {
    const unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned long long)hrx_prefill_rows(state, C) * N) return;
    out[i] = hrx_f32_to_bf16_rn(hrx_gelu_new(y[i] + hrx_bf16_to_f32(bias[i % N])));
}
"""

ADVANCE_ROWS_CUDA = NEXT_INDICES_CUDA + _ROWS_CUDA + r"""
extern "C" __global__ void hrx_gpt2_advance_rows(unsigned int* __restrict__ state, const int* __restrict__ seq,
                                                 long long* __restrict__ emb_idx, unsigned int P, unsigned int C) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const unsigned int next = state[0] + hrx_prefill_rows(state, C);
    hrx_next_indices(seq, emb_idx, next, P);
    state[0] = next;
}
"""


# -- host mirrors -------------------------------------------------------------------


def prefill_rows(state: np.ndarray, c: int) -> tuple[int, int]:
    """(pos, m): the chunk's first position and row count from the slot state (host)."""
    st = state[:8].view(np.uint32)
    pos, n = int(st[0]), int(st[1])
    return pos, (0 if n == 0 or pos + 1 >= n else min(c, n - 1 - pos))


def _ln_rows(x: np.ndarray, g: np.ndarray, b: np.ndarray, xn: np.ndarray, eps: np.float32) -> None:
    """xn (BF16 bytes) = LN(x) of each row of the F32 matrix ``x`` (the decode step's
    layer norm, row by row)."""
    m, d = x.shape
    mean = x.sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(d)
    c = x - mean
    var = (c * c).sum(axis=1, dtype=np.float32, keepdims=True) / np.float32(d)
    rstd = np.float32(1.0) / np.sqrt(var + np.float32(eps))
    xn[: 2 * m * d].view(bfloat16).reshape(m, d)[:] = (c * rstd * _bf(g[: 2 * d]) + _bf(b[: 2 * d])).astype(bfloat16)


def _embed_rows_host(wte, wpe, state, seq, g, b, x, xn, d, eps, c, v, p) -> None:
    d, v, p = int(d), int(v), int(p)
    pos, m = prefill_rows(state, int(c))
    m = max(0, min(m, p - pos))
    if m == 0:
        return
    tok = seq[: 4 * p].view(np.int32)[pos : pos + m].astype(np.int64)
    tok = np.where((tok >= 0) & (tok < v), tok, 0)
    te = wte.view(bfloat16).reshape(-1, d)[tok].astype(np.float32)
    pe = wpe.view(bfloat16).reshape(-1, d)[pos : pos + m].astype(np.float32)
    xf = x[: 4 * m * d].view(np.float32).reshape(m, d)
    xf[:] = te + pe
    _ln_rows(xf, g, b, xn, eps)


def _gemm_host(a, w, state, y, k, n, c) -> None:
    k, n = int(k), int(n)
    _, m = prefill_rows(state, int(c))
    if m == 0:
        return
    af = a[: 2 * m * k].view(bfloat16).reshape(m, k).astype(np.float32)
    wf = w[: 2 * n * k].view(bfloat16).reshape(n, k).astype(np.float32)
    np.matmul(af, wf.T, out=y[: 4 * m * n].view(np.float32).reshape(m, n))


def _kv_rows_host(qkv, bias, state, kc, vc, d, p, c) -> None:
    d, p = int(d), int(p)
    pos, m = prefill_rows(state, int(c))
    m = max(0, min(m, p - pos))
    if m == 0:
        return
    rows = qkv[: 12 * m * d].view(np.float32).reshape(m, 3 * d)
    bf = _bf(bias[: 6 * d])
    kc.view(bfloat16).reshape(p, d)[pos : pos + m] = (rows[:, d : 2 * d] + bf[d : 2 * d]).astype(bfloat16)
    vc.view(bfloat16).reshape(p, d)[pos : pos + m] = (rows[:, 2 * d :] + bf[2 * d :]).astype(bfloat16)


def _attention_rows_host(qkv, bias, state, kc, vc, out, d, hd, p, scale, c) -> None:
    d, hd, p = int(d), int(hd), int(p)
    pos, m = prefill_rows(state, int(c))
    m = max(0, min(m, p - pos))
    if m == 0:
        return
    heads = d // hd
    q = qkv[: 12 * m * d].view(np.float32).reshape(m, 3 * d)[:, :d] + _bf(bias[: 2 * d])
    n = pos + m
    keys = kc.view(bfloat16).reshape(p, d)[:n].astype(np.float32).reshape(n, heads, hd)
    vals = vc.view(bfloat16).reshape(p, d)[:n].astype(np.float32).reshape(n, heads, hd)
    scores = np.einsum("rhi,thi->rht", q.reshape(m, heads, hd), keys) * np.float32(scale)
    causal = np.arange(n)[None, None, :] > (pos + np.arange(m))[:, None, None]  # row r sees 0 .. pos + r
    scores[np.broadcast_to(causal, scores.shape)] = -np.inf
    scores = np.exp(scores - scores.max(axis=2, keepdims=True))
    probs = scores / scores.sum(axis=2, keepdims=True, dtype=np.float32)
    out[: 2 * m * d].view(bfloat16).reshape(m, d)[:] = np.einsum("rht,thi->rhi", probs, vals).reshape(m, d).astype(bfloat16)


def _residual_ln_rows_host(x, y, bias, g, b, xn, state, d, eps, c) -> None:
    d = int(d)
    _, m = prefill_rows(state, int(c))
    if m == 0:
        return
    xf = x[: 4 * m * d].view(np.float32).reshape(m, d)
    xf += y[: 4 * m * d].view(np.float32).reshape(m, d) + _bf(bias[: 2 * d])
    _ln_rows(xf, g, b, xn, eps)


def _bias_gelu_rows_host(y, bias, state, out, n, c) -> None:
    n = int(n)
    _, m = prefill_rows(state, int(c))
    if m:  # the decode step's GELU over m rows, the bias repeated per row
        _bias_gelu_host(y, np.tile(bias[: 2 * n], m), out, m * n)


def _advance_rows_host(state, seq, emb_idx, p, c) -> None:
    pos, m = prefill_rows(state, int(c))
    _next_indices_host(seq, emb_idx, pos + m, int(p))
    state[:16].view(np.uint32)[0] = pos + m


EMBED_ROWS = Kernel(
    "hrx_gpt2_embed_rows",
    buffers=("read", "read", "read", "read", "read", "read", "write", "write"),
    scalars=(np.uint32, np.float32, np.uint32, np.uint32, np.uint32),
    host=_embed_rows_host, cuda=EMBED_ROWS_CUDA,
)
GEMM = Kernel(
    "hrx_gpt2_gemm",
    buffers=("read", "read", "read", "write"),
    scalars=(np.uint32, np.uint32, np.uint32),
    host=_gemm_host, cuda=GEMM_CUDA,
)
KV_ROWS = Kernel(
    "hrx_gpt2_kv_rows",
    buffers=("read", "read", "read", "read_write", "read_write"),
    scalars=(np.uint32, np.uint32, np.uint32),
    host=_kv_rows_host, cuda=KV_ROWS_CUDA,
)
ATTENTION_ROWS = Kernel(
    "hrx_gpt2_attention_rows",
    buffers=("read", "read", "read", "read", "read", "write"),
    scalars=(np.uint32, np.uint32, np.uint32, np.float32, np.uint32),
    host=_attention_rows_host, cuda=ATTENTION_ROWS_CUDA,
)
RESIDUAL_LN_ROWS = Kernel(
    "hrx_gpt2_residual_ln_rows",
    buffers=("read_write", "read", "read", "read", "read", "write", "read"),
    scalars=(np.uint32, np.float32, np.uint32),
    host=_residual_ln_rows_host, cuda=RESIDUAL_LN_ROWS_CUDA,
)
BIAS_GELU_ROWS = Kernel(
    "hrx_gpt2_bias_gelu_rows",
    buffers=("read", "read", "read", "write"),
    scalars=(np.uint32, np.uint32),
    host=_bias_gelu_rows_host, cuda=BIAS_GELU_ROWS_CUDA,
)
ADVANCE_ROWS = Kernel(
    "hrx_gpt2_advance_rows",
    buffers=("read_write", "read", "write"),
    scalars=(np.uint32, np.uint32),
    host=_advance_rows_host, cuda=ADVANCE_ROWS_CUDA,
)

PREFILL = (EMBED_ROWS, GEMM, KV_ROWS, ATTENTION_ROWS, RESIDUAL_LN_ROWS, BIAS_GELU_ROWS, ADVANCE_ROWS)
