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
* ``GEMM_TILED`` / ``GEMM_GELU_TILED`` (CUDA sm_80+): the same contract in larger tiles
  (:class:`GemmTiles`, :func:`gemm_tiles_for`), fragments read by ``ldmatrix`` from
  swizzled shared rows; the ``_gelu`` form writes ``gelu_new(y + bias)`` in BF16 (the
  GEMM and ``bias_gelu_rows`` in one kernel).
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

import attrs
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

_CP_ASYNC_CUDA = r"""
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// 16 bytes global -> shared without registers; src_bytes 0 writes zeros (src is not read)
__device__ __forceinline__ void hrx_cp_async16(unsigned short* dst, const unsigned short* src, unsigned int src_bytes) {
    unsigned int d;
    asm volatile("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }\n" : "=r"(d) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(src_bytes) : "memory");
}
#endif
"""

_MMA_CUDA = r"""
// c += a b for one m16n8k16 tile: BF16 tensor cores, F32 accumulation (sm_80+; the
// kernels that call it are chosen on CUDA sm_80+ only)
// Ends the kernel with an error: code for CUDA sm_80+ reached elsewhere (the decoder
// chooses the tensor-core kernels on CUDA sm_80+ only; NVRTC has no __builtin_trap)
__device__ __forceinline__ void hrx_sm80_only() {
#if defined(__AMDGCN__)
    __builtin_trap();
#else
    asm volatile("trap;");
#endif
}

__device__ __forceinline__ void hrx_mma_bf16(float (&c)[4], const unsigned int (&a)[4], unsigned int b0, unsigned int b1) {
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    hrx_sm80_only();  // callers branch to their portable path elsewhere, or are not chosen
#endif
}

"""

GEMM_CUDA = _PRELUDE + _ROWS_CUDA + _CP_ASYNC_CUDA + _MMA_CUDA + f"""
#define HRX_GEMM_BM {GEMM_BM}u
#define HRX_GEMM_BN {GEMM_BN}u
""" + r"""
#define HRX_GEMM_BK 32u
#define HRX_GEMM_LD 40u  // BF16 per shared row: 80 bytes keep 16-byte stores aligned and fragment reads conflict-free
#define HRX_GEMM_STAGES 4u  // k stages in flight (sm_80+): 40 KiB of shared memory

#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define HRX_GEMM_BUFFERS HRX_GEMM_STAGES
#else
#define HRX_GEMM_BUFFERS 1u
#endif

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
        for (int j = 0; j < 4; ++j) hrx_mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
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
    // sm_80+: a pipeline of HRX_GEMM_STAGES k stages in shared memory filled by cp.async (16
    // bytes a copy, zero-filled past m / N / K), the loads of stages ahead in flight while a
    // stage is multiplied, one barrier an iteration; elsewhere one stage through registers
    __shared__ uint4 as4[HRX_GEMM_BUFFERS * HRX_GEMM_BM * HRX_GEMM_LD / 8u];  // uint4: 16-byte aligned tiles
    __shared__ uint4 ws4[HRX_GEMM_BUFFERS * HRX_GEMM_BN * HRX_GEMM_LD / 8u];
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
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned int tiles = (K + HRX_GEMM_BK - 1u) / HRX_GEMM_BK;
    // stage s holds k0 = 32 kt: 64 rows x 32 k of a and of w, 256 16-byte vectors each, two per thread
    auto load = [&](unsigned int kt) {
        const unsigned int stage = kt % HRX_GEMM_STAGES, k0 = kt * HRX_GEMM_BK;
        #pragma unroll
        for (unsigned int s = 0; s < 2u; ++s) {
            const unsigned int v = tid + s * 128u;
            const unsigned int r = v >> 2, kv = (v & 3u) * 8u, k = k0 + kv;
            const bool ka = row0 + r < m && k < K, kw = col0 + r < N && k < K;
            hrx_cp_async16(As + (stage * HRX_GEMM_BM + r) * HRX_GEMM_LD + kv,
                           ka ? a + (size_t)(row0 + r) * K + k : a, ka ? 16u : 0u);
            hrx_cp_async16(Ws + (stage * HRX_GEMM_BN + r) * HRX_GEMM_LD + kv,
                           kw ? w + (size_t)(col0 + r) * K + k : w, kw ? 16u : 0u);
        }
    };
    #pragma unroll
    for (unsigned int s = 0; s + 1u < HRX_GEMM_STAGES; ++s) {
        if (s < tiles) load(s);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (unsigned int kt = 0; kt < tiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(HRX_GEMM_STAGES - 2));  // stage kt has landed
        __syncthreads();  // ... for every thread; and every warp is done with stage kt - 1
        if (kt + HRX_GEMM_STAGES - 1u < tiles) load(kt + HRX_GEMM_STAGES - 1u);  // into stage kt - 1's buffers
        asm volatile("cp.async.commit_group;\n" ::);  // (an empty group past the end keeps the count)
        const unsigned int stage = kt % HRX_GEMM_STAGES;
        hrx_gemm_k16(acc, As + stage * HRX_GEMM_BM * HRX_GEMM_LD, Ws + stage * HRX_GEMM_BN * HRX_GEMM_LD, wm, wn, 0u, g, t);
        hrx_gemm_k16(acc, As + stage * HRX_GEMM_BM * HRX_GEMM_LD, Ws + stage * HRX_GEMM_BN * HRX_GEMM_LD, wm, wn, 16u, g, t);
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
#else
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
#endif
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

@attrs.frozen
class GemmTiles:
    """One tensor-core tiling of the prefill GEMM (CUDA sm_80+): a block of ``warps_m x
    warps_n`` warps computes ``bm x bn`` outputs, each warp ``bm / warps_m`` rows x ``bn /
    warps_n`` columns, through a ``stages``-deep cp.async pipeline of 32-wide k stages."""

    bm: int
    bn: int
    warps_m: int
    warps_n: int
    stages: int

    @property
    def name(self) -> str:
        return f"hrx_gpt2_gemm_{self.bm}x{self.bn}_w{self.warps_m}x{self.warps_n}_s{self.stages}"

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * 32 * 2

    def grid(self, n: int, rows: int) -> tuple[int, int]:
        return -(-n // self.bn), -(-rows // self.bm)


def _gemm_tiles_cuda(v: GemmTiles, gelu: bool = False) -> str:
    """The CUDA source of a tiling: a shared row holds one row's 32 k of a stage (four
    16-byte chunks), chunk ``c`` of row ``r`` stored at ``c ^ ((r >> 1) & 3)``, so that the
    eight 16-byte rows one ``ldmatrix`` phase reads fall in eight distinct bank groups; each
    thread's cp.async sources and destinations are fixed per stage and advance by 32 k.
    With ``gelu`` the entry is ``<name>_gelu`` and its epilogue is bias_gelu_rows':
    ``out[r, n] = gelu_new(y[r, n] + bias[n])`` in BF16, in place of the F32 ``y``."""
    mi, nj = v.bm // v.warps_m // 16, v.bn // v.warps_n // 8
    copies = (v.bm + v.bn) * 4
    assert mi >= 1 and nj >= 2 and nj % 2 == 0 and v.shared_bytes <= 48 * 1024, v
    assert copies % v.threads == 0 and (v.bm * 4) % v.threads == 0, v
    return _PRELUDE + _ROWS_CUDA + _CP_ASYNC_CUDA + _MMA_CUDA + f"""
#define HRX_BM {v.bm}u
#define HRX_BN {v.bn}u
#define HRX_WN {v.warps_n}u
#define HRX_MI {mi}
#define HRX_NJ {nj}
#define HRX_STAGES {v.stages}u
#define HRX_THREADS {v.threads}u
#define HRX_COPIES {copies // v.threads}
#define HRX_GELU {int(gelu)}
""" + r"""
#define HRX_BK 32u
#define HRX_STAGE_BYTES ((HRX_BM + HRX_BN) * HRX_BK * 2u)

// y[r, n] = sum_k a[r, k] * w[n, k] for the chunk's rows r < m and n < N (the hrx_gpt2_gemm
// contract), tiled HRX_BM x HRX_BN on tensor cores; sm_80+ only (the decoder's choice).
// HRX_GELU: y is BF16 gelu_new(sum + bias[n]) instead.
extern "C" __global__ void __launch_bounds__(HRX_LAUNCH_BOUND) HRX_ENTRY(
        const unsigned short* __restrict__ a, const unsigned short* __restrict__ w,
        const unsigned int* __restrict__ state,
#if HRX_GELU
        const unsigned short* __restrict__ bias, unsigned short* __restrict__ y,
#else
        float* __restrict__ y,
#endif
        unsigned int K, unsigned int N, unsigned int C) {
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // one stage: HRX_BM rows of a, then HRX_BN rows of w, 64 bytes each
    __shared__ uint4 tiles4[HRX_STAGES * HRX_STAGE_BYTES / 16u];
    const unsigned int m = hrx_prefill_rows(state, C);
    const unsigned int row0 = blockIdx.y * HRX_BM, col0 = blockIdx.x * HRX_BN;
    if (row0 >= m || col0 >= N || (K & 7u) || blockDim.x != HRX_THREADS) return;  // the whole block
    const unsigned int tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const unsigned int wm = (warp / HRX_WN) * (16u * HRX_MI), wn = (warp % HRX_WN) * (8u * HRX_NJ);
    const unsigned int g = lane >> 2, t = lane & 3u;
    unsigned int smem;
    asm volatile("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }\n" : "=r"(smem) : "l"(tiles4));
    // this thread's copies: 16 bytes of shared row r (a's rows, then w's), chunk c
    const unsigned short* src[HRX_COPIES];
    unsigned int dst[HRX_COPIES], kc[HRX_COPIES];
    bool live[HRX_COPIES];
    #pragma unroll
    for (int s = 0; s < HRX_COPIES; ++s) {
        const unsigned int v = tid + (unsigned int)s * HRX_THREADS, r = v >> 2, c = v & 3u;
        const bool isa = r < HRX_BM;
        const unsigned int row = isa ? row0 + r : col0 + (r - HRX_BM);
        live[s] = isa ? row < m : row < N;
        src[s] = (isa ? a : w) + (size_t)(live[s] ? row : 0u) * K + c * 8u;
        dst[s] = smem + r * 64u + ((c ^ ((r >> 1) & 3u)) << 4);
        kc[s] = c * 8u;
    }
    float acc[HRX_MI][HRX_NJ][4];
    #pragma unroll
    for (int i = 0; i < HRX_MI; ++i)
        #pragma unroll
        for (int j = 0; j < HRX_NJ; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    const unsigned int tiles = (K + HRX_BK - 1u) / HRX_BK;
    auto load = [&](unsigned int kt) {  // stage kt % STAGES: zeros past m / N / K
        const unsigned int stage = (kt % HRX_STAGES) * HRX_STAGE_BYTES, k0 = kt * HRX_BK;
        #pragma unroll
        for (int s = 0; s < HRX_COPIES; ++s) {
            const bool in = live[s] && k0 + kc[s] < K;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                         :: "r"(dst[s] + stage), "l"(in ? src[s] + k0 : a), "r"(in ? 16u : 0u) : "memory");
        }
    };
    // ldmatrix.x4 addresses: lane l gives row l & 7 of matrix q = l >> 3. For a (16 x 16 of
    // rows x k): q & 1 picks rows + 8, q >> 1 picks k + 8 (a0..a3 of m16n8k16). For w (two
    // n8 x k16 B fragments): q & 1 picks k + 8, q >> 1 picks the next 8 columns.
    const unsigned int q = lane >> 3, swz = (lane >> 1) & 3u;
    unsigned int a_row[HRX_MI], w_row[HRX_NJ / 2];
    #pragma unroll
    for (int i = 0; i < HRX_MI; ++i) a_row[i] = smem + (wm + 16u * i + (q & 1u) * 8u + (lane & 7u)) * 64u;
    #pragma unroll
    for (int j = 0; j < HRX_NJ / 2; ++j) w_row[j] = smem + (HRX_BM + wn + 16u * j + (q >> 1) * 8u + (lane & 7u)) * 64u;
    #pragma unroll
    for (unsigned int s = 0; s + 1u < HRX_STAGES; ++s) {
        if (s < tiles) load(s);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (unsigned int kt = 0; kt < tiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(HRX_STAGES - 2u));  // stage kt has landed
        __syncthreads();  // ... for every thread; and every warp is done with stage kt - 1
        if (kt + HRX_STAGES - 1u < tiles) load(kt + HRX_STAGES - 1u);  // into stage kt - 1's buffers
        asm volatile("cp.async.commit_group;\n" ::);
        const unsigned int stage = (kt % HRX_STAGES) * HRX_STAGE_BYTES;
        #pragma unroll
        for (unsigned int kk = 0; kk < 2u; ++kk) {  // k16 halves: chunks 2 kk and 2 kk + 1
            const unsigned int a_off = stage + (((2u * kk + (q >> 1)) ^ swz) << 4);
            const unsigned int w_off = stage + (((2u * kk + (q & 1u)) ^ swz) << 4);
            unsigned int af[HRX_MI][4], bf[HRX_NJ][2];
            #pragma unroll
            for (int i = 0; i < HRX_MI; ++i)
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3]) : "r"(a_row[i] + a_off));
            #pragma unroll
            for (int j = 0; j < HRX_NJ / 2; ++j)
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(bf[2 * j][0]), "=r"(bf[2 * j][1]), "=r"(bf[2 * j + 1][0]), "=r"(bf[2 * j + 1][1])
                             : "r"(w_row[j] + w_off));
            #pragma unroll
            for (int i = 0; i < HRX_MI; ++i)
                #pragma unroll
                for (int j = 0; j < HRX_NJ; ++j) hrx_mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    #pragma unroll
    for (int i = 0; i < HRX_MI; ++i)
        #pragma unroll
        for (int j = 0; j < HRX_NJ; ++j)
            #pragma unroll
            for (int h = 0; h < 2; ++h) {  // C: row g (+ 8), columns 2t, 2t + 1: one store of the pair
                const unsigned int r = row0 + wm + 16u * i + g + 8u * h;
                const unsigned int n = col0 + wn + 8u * j + 2u * t;
                if (r >= m) continue;
#if HRX_GELU
                const float v0 = n < N ? hrx_gelu_new(acc[i][j][2 * h] + hrx_bf16_to_f32(bias[n])) : 0.f;
                const float v1 = n + 1u < N ? hrx_gelu_new(acc[i][j][2 * h + 1] + hrx_bf16_to_f32(bias[n + 1u])) : 0.f;
                if (n + 1u < N && !(N & 1u)) {  // a 4-byte aligned pair (N even), the lower index in the low half
                    *reinterpret_cast<unsigned int*>(y + (size_t)r * N + n) =
                        (unsigned int)hrx_f32_to_bf16_rn(v0) | ((unsigned int)hrx_f32_to_bf16_rn(v1) << 16);
                } else {
                    if (n < N) y[(size_t)r * N + n] = hrx_f32_to_bf16_rn(v0);
                    if (n + 1u < N) y[(size_t)r * N + n + 1u] = hrx_f32_to_bf16_rn(v1);
                }
#else
                if (n + 1u < N && !(N & 1u)) {  // an 8-byte aligned pair (N even)
                    float2 v2;
                    v2.x = acc[i][j][2 * h];
                    v2.y = acc[i][j][2 * h + 1];
                    *reinterpret_cast<float2*>(y + (size_t)r * N + n) = v2;
                } else {
                    if (n < N) y[(size_t)r * N + n] = acc[i][j][2 * h];
                    if (n + 1u < N) y[(size_t)r * N + n + 1u] = acc[i][j][2 * h + 1];
                }
#endif
            }
#else
    hrx_sm80_only();  // the decoder chooses these tilings on CUDA sm_80+ only
#endif
}
""".replace("HRX_ENTRY", v.name + ("_gelu" if gelu else "")).replace("HRX_LAUNCH_BOUND", str(v.threads))  # literal: tools read them


#: Tensor-core tilings of the prefill GEMM (sm_80+); bench/tools/gemm_tiles.py compares
#: them with the portable 64 x 64 kernel (a 4-stage cp.async pipeline on sm_80+ too, its
#: fragments read 32 bits at a time) and torch. The decoder uses the first three
#: (:func:`gemm_tiles_for`); 64 x 128 is measured beside them.
GEMM_TILINGS = (
    GemmTiles(64, 64, 2, 2, 4),
    GemmTiles(128, 64, 2, 2, 4),
    GemmTiles(128, 128, 2, 2, 3),
    GemmTiles(64, 128, 2, 2, 4),
)
GEMM_SMALL, GEMM_MEDIUM, GEMM_LARGE = GEMM_TILINGS[:3]


def _blocks(t: GemmTiles, rows: int, n: int) -> int:
    return -(-n // t.bn) * -(-rows // t.bm)


def gemm_tiles_for(rows: int, k: int, n: int) -> GemmTiles:
    """The tensor-core tiling for a ``rows x k`` by ``k x n`` projection: the largest
    whose grid still fills the GPU. From bench/tools/gemm_tiles.py on the H200 (GPT-2
    small and 1.3B projections, chunks of 128, 512 and 1024 rows; every choice within 7%
    of the fastest tiling measured): 128 x 128 tiles (the least shared-memory traffic per
    product, but 234 registers a thread: two blocks an SM) from 512 blocks (1.3B c_fc at
    1024 rows: 96 us, 128 x 64: 105 us); 128 x 64 from 256 blocks, or 384 where K < 1024
    (its longer prologue then weighs more: GPT-2 small c_attn at 1024 rows, 288 blocks,
    ran 21.7 us against 19.0 with 64 x 64); elsewhere 64 x 64 (every 128-row chunk)."""
    if _blocks(GEMM_LARGE, rows, n) >= 512:
        return GEMM_LARGE
    if _blocks(GEMM_MEDIUM, rows, n) >= (256 if k >= 1024 else 384):
        return GEMM_MEDIUM
    return GEMM_SMALL


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

#: Head dimensions with a tensor-core attention_rows kernel (CUDA sm_80+), and the keys of
#: one of its shared-memory K/V tiles.
ATTENTION_MMA_HEAD_DIMS = (64, 128)
ATTENTION_MMA_KEYS = 64


def attention_mma_warps(heads: int, chunk: int) -> int:
    """Warps (16 query rows each) of one tensor-core attention_rows block: 4, unless that
    leaves fewer than 256 blocks for a chunk (GPT-2 small's 12 heads x 512 rows: 96), then 2."""
    return 4 if heads * -(-chunk // 64) >= 256 else 2


def _attention_mma_cuda(hd: int) -> str:
    return (_PRELUDE + _ROWS_CUDA + _MMA_CUDA + f"""
#define HRX_HD {hd}u
#define HRX_BC {ATTENTION_MMA_KEYS}u
#define HRX_KV_LD ({hd}u + 8u)  // BF16 a staged K/V row: 16 bytes of padding keep fragment reads conflict-free
#define HRX_NEG_INF __uint_as_float(0xff800000u)
""" + r"""
__device__ __forceinline__ unsigned int hrx_pack_bf16(float lo, float hi) {
    return (unsigned int)hrx_f32_to_bf16_rn(lo) | ((unsigned int)hrx_f32_to_bf16_rn(hi) << 16);
}

// Four 8 x 8 BF16 matrices from shared memory, transposed (lanes 8 i .. 8 i + 7 give the
// row addresses of matrix i, 16-byte aligned): r[i] holds rows 2t, 2t + 1 of column g of
// matrix i -- a B fragment half of m16n8k16 from key-major rows.
__device__ __forceinline__ void hrx_ldmatrix_x4_trans(unsigned int (&r)[4], const unsigned short* row) {
#if !defined(__AMDGCN__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned int a;
    asm volatile("{ .reg .u64 p; cvta.to.shared.u64 p, %1; cvt.u32.u64 %0, p; }\n" : "=r"(a) : "l"(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
    hrx_sm80_only();  // the decoder chooses this kernel on CUDA sm_80+ only
#endif
}

// Causal attention of the chunk's rows on BF16 tensor cores (m16n8k16, F32 accumulation),
// flash-attention style. grid (n_head, ceil(C / (16 * warps))), 32 * warps threads:
// warp w of block (h, b) owns query rows r = 16 (b * warps + w) .. + 15 (positions pos + r)
// and keeps their queries (with bias, BF16) as A fragments; the block stages 64 cache rows
// of K and V at a time in shared memory; per tile a warp computes S = Q K^T, an online
// softmax (exp2, per-row max reduced over the quad that holds the row) and O += P V with P
// taken straight from the S fragments and V's fragments by ldmatrix.trans. Thread (g, t) = (lane / 4, lane % 4) holds rows g
// and g + 8 of its warp's 16 (the C fragment layout).
extern "C" __global__ void __launch_bounds__(128) HRX_ENTRY(
        const float* __restrict__ qkv, const unsigned short* __restrict__ bias,
        const unsigned int* __restrict__ state, const unsigned short* __restrict__ kc,
        const unsigned short* __restrict__ vc, unsigned short* __restrict__ out,
        unsigned int D, unsigned int hd, unsigned int P, float scale, unsigned int C) {
    __shared__ uint4 ks4[HRX_BC * HRX_KV_LD / 8u];
    __shared__ uint4 vs4[HRX_BC * HRX_KV_LD / 8u];
    unsigned short* Ks = reinterpret_cast<unsigned short*>(ks4);
    unsigned short* Vs = reinterpret_cast<unsigned short*>(vs4);
    const unsigned int m = hrx_prefill_rows(state, C), pos = state[0];
    const unsigned int warps = blockDim.x >> 5, rows_per_block = 16u * warps;
    const unsigned int r0 = blockIdx.y * rows_per_block;
    // the whole block returns together (before any barrier)
    if (r0 >= m || pos + m > P || hd != HRX_HD || (blockDim.x & 31u) || warps == 0u || warps > 4u) return;
    const unsigned int tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const unsigned int g = lane >> 2, t = lane & 3u;
    const unsigned int base = blockIdx.x * HRX_HD;
    const unsigned int rw = r0 + 16u * warp;  // the warp's first row
    const unsigned int block_rows = m - r0 < rows_per_block ? m - r0 : rows_per_block;
    const unsigned int last = pos + r0 + block_rows - 1u;  // the block's last position
    const unsigned int wlast = pos + (rw + 15u < m ? rw + 15u : m - 1u);  // the warp's (if it has rows)
    const bool active = rw < m;  // uniform across the warp
    // queries (row g / g + 8, dimensions 16 kk + 2t, + 1 / + 8): rows past m are zeros
    unsigned int qf[HRX_HD / 16u][4];
    #pragma unroll
    for (unsigned int kk = 0; kk < HRX_HD / 16u; ++kk) {
        #pragma unroll
        for (unsigned int e = 0; e < 4u; ++e) {
            const unsigned int r = rw + g + 8u * (e & 1u), d = 16u * kk + 2u * t + 8u * (e >> 1);
            float lo = 0.f, hi = 0.f;
            if (r < m) {
                const float* q = qkv + (size_t)r * 3u * D + base + d;
                lo = q[0] + hrx_bf16_to_f32(bias[base + d]);
                hi = q[1] + hrx_bf16_to_f32(bias[base + d + 1u]);
            }
            qf[kk][e] = hrx_pack_bf16(lo, hi);
        }
    }
    float o[HRX_HD / 8u][4];
    #pragma unroll
    for (unsigned int j = 0; j < HRX_HD / 8u; ++j)
        #pragma unroll
        for (unsigned int e = 0; e < 4u; ++e) o[j][e] = 0.f;
    float mx[2] = {HRX_NEG_INF, HRX_NEG_INF}, l[2] = {0.f, 0.f};
    const float sl2 = scale * 1.4426950408889634f;  // scores in the log2 domain: exp2
    const unsigned int prow[2] = {pos + rw + g, pos + rw + g + 8u};
    for (unsigned int t0 = 0; t0 <= last; t0 += HRX_BC) {
        __syncthreads();  // the previous tile is read
        for (unsigned int i = tid; i < HRX_BC * (HRX_HD / 8u); i += blockDim.x) {
            const unsigned int key = i / (HRX_HD / 8u), c = (i % (HRX_HD / 8u)) * 8u;
            uint4 kv, vv;
            kv.x = kv.y = kv.z = kv.w = 0u;
            vv = kv;
            if (t0 + key <= last) {
                kv = *reinterpret_cast<const uint4*>(kc + (size_t)(t0 + key) * D + base + c);
                vv = *reinterpret_cast<const uint4*>(vc + (size_t)(t0 + key) * D + base + c);
            }
            *reinterpret_cast<uint4*>(Ks + key * HRX_KV_LD + c) = kv;
            *reinterpret_cast<uint4*>(Vs + key * HRX_KV_LD + c) = vv;
        }
        __syncthreads();
        if (!active || t0 > wlast) continue;  // keys past every row of this warp
        float sc[HRX_BC / 8u][4];
        #pragma unroll
        for (unsigned int j = 0; j < HRX_BC / 8u; ++j) {
            sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
            const unsigned short* kr = Ks + (8u * j + g) * HRX_KV_LD + 2u * t;  // B: key 8j + g, dims 2t.. of each k16
            #pragma unroll
            for (unsigned int kk = 0; kk < HRX_HD / 16u; ++kk)
                hrx_mma_bf16(sc[j], qf[kk], *reinterpret_cast<const unsigned int*>(kr + 16u * kk),
                             *reinterpret_cast<const unsigned int*>(kr + 16u * kk + 8u));
        }
        float tmax[2] = {HRX_NEG_INF, HRX_NEG_INF};
        #pragma unroll
        for (unsigned int j = 0; j < HRX_BC / 8u; ++j)
            #pragma unroll
            for (unsigned int e = 0; e < 4u; ++e) {
                const unsigned int key = t0 + 8u * j + 2u * t + (e & 1u);
                const float v = key <= prow[e >> 1] ? sc[j][e] * sl2 : HRX_NEG_INF;
                sc[j][e] = v;
                tmax[e >> 1] = fmaxf(tmax[e >> 1], v);
            }
        float corr[2];
        #pragma unroll
        for (unsigned int h = 0; h < 2u; ++h) {
            tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 1));
            tmax[h] = fmaxf(tmax[h], __shfl_xor_sync(0xffffffffu, tmax[h], 2));
            const float mnew = fmaxf(mx[h], tmax[h]);  // finite: key 0 is every row's, in the first tile
            corr[h] = exp2f(mx[h] - mnew);
            mx[h] = mnew;
            l[h] *= corr[h];
        }
        #pragma unroll
        for (unsigned int j = 0; j < HRX_HD / 8u; ++j)
            #pragma unroll
            for (unsigned int e = 0; e < 4u; ++e) o[j][e] *= corr[e >> 1];
        #pragma unroll
        for (unsigned int kk = 0; kk < HRX_BC / 16u; ++kk) {
            // P of keys 16 kk .. + 15 as an A fragment: the C fragments of n-tiles 2 kk and 2 kk + 1
            float pv[2][4];
            #pragma unroll
            for (unsigned int h = 0; h < 2u; ++h)
                #pragma unroll
                for (unsigned int e = 0; e < 4u; ++e) {
                    pv[h][e] = exp2f(sc[2u * kk + h][e] - mx[e >> 1]);
                    l[e >> 1] += pv[h][e];
                }
            const unsigned int pa[4] = {hrx_pack_bf16(pv[0][0], pv[0][1]), hrx_pack_bf16(pv[0][2], pv[0][3]),
                                        hrx_pack_bf16(pv[1][0], pv[1][1]), hrx_pack_bf16(pv[1][2], pv[1][3])};
            // B of dims 8 j .. 8 j + 15 (two n-tiles): ldmatrix.trans of keys 16 kk + 0..7 / 8..15 at
            // dims 8 j / 8 j + 8 (lanes 0-7, 8-15, 16-23, 24-31 address those four matrices' rows)
            const unsigned short* vr = Vs + (16u * kk + (lane & 7u) + (lane & 8u)) * HRX_KV_LD + ((lane >> 4) << 3);
            #pragma unroll
            for (unsigned int j = 0; j < HRX_HD / 8u; j += 2u) {
                unsigned int b[4];
                hrx_ldmatrix_x4_trans(b, vr + 8u * j);
                hrx_mma_bf16(o[j], pa, b[0], b[1]);
                hrx_mma_bf16(o[j + 1u], pa, b[2], b[3]);
            }
        }
    }
    if (!active) return;
    #pragma unroll
    for (unsigned int h = 0; h < 2u; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        l[h] = 1.f / l[h];
    }
    #pragma unroll
    for (unsigned int j = 0; j < HRX_HD / 8u; ++j)
        #pragma unroll
        for (unsigned int h = 0; h < 2u; ++h) {
            const unsigned int r = rw + g + 8u * h;
            if (r < m)
                *reinterpret_cast<unsigned int*>(out + (size_t)r * D + base + 8u * j + 2u * t) =
                    hrx_pack_bf16(o[j][2u * h] * l[h], o[j][2u * h + 1u] * l[h]);
        }
}
""").replace("HRX_ENTRY", f"hrx_gpt2_attention_rows_mma{hd}")  # the name itself: tools find kernels by it


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


def _gemm_gelu_host(a, w, state, bias, out, k, n, c) -> None:
    _, m = prefill_rows(state, int(c))
    if m:  # the GEMM then bias_gelu_rows (F32 in between, as on the device)
        y = np.empty(4 * m * int(n), np.uint8)
        _gemm_host(a, w, state, y, k, n, c)
        _bias_gelu_rows_host(y, bias, state, out, n, c)


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
#: The tensor-core attention_rows kernels by head dimension (CUDA sm_80+; the host mirror
#: is attention_rows'). The decoder launches them with (n_head, ceil(C / (16 * warps)))
#: blocks of 32 * warps threads (:func:`attention_mma_warps`).
ATTENTION_ROWS_MMA = {
    hd: Kernel(
        f"hrx_gpt2_attention_rows_mma{hd}",
        buffers=("read", "read", "read", "read", "read", "write"),
        scalars=(np.uint32, np.uint32, np.uint32, np.float32, np.uint32),
        host=_attention_rows_host, cuda=_attention_mma_cuda(hd),
    )
    for hd in ATTENTION_MMA_HEAD_DIMS
}
GEMM_TILED = {
    v: Kernel(v.name, buffers=("read", "read", "read", "write"), scalars=(np.uint32, np.uint32, np.uint32),
              host=_gemm_host, cuda=_gemm_tiles_cuda(v))
    for v in GEMM_TILINGS
}
#: The same tilings with bias_gelu_rows as their epilogue: buffers (a, w, state, bias,
#: out) with ``out`` BF16 ``gelu_new(a @ w.T + bias)``, scalars (K, N, C) as the GEMM's.
GEMM_GELU_TILED = {
    v: Kernel(v.name + "_gelu", buffers=("read", "read", "read", "read", "write"),
              scalars=(np.uint32, np.uint32, np.uint32), host=_gemm_gelu_host, cuda=_gemm_tiles_cuda(v, gelu=True))
    for v in GEMM_TILINGS
}
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
