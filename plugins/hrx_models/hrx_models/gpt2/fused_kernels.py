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

from typing import Any

import numpy as np
from hrx_tensor.kernels import GEMV_BUDGETS, GEMV_CUDA, budget_source, gemv_budget, gemv_lane_share
from hrx_tensor.kernels import _linear_host as _tensor_linear_host

from hrx_core.kernel import Kernel

from .config import MAX_EMBD, MAX_HEAD_DIM
from .attention_streamed import ATTEND_STREAMED_DEVICE
from .kernels import ATTENTION_COMMON_BODY, _attention_host, _PRELUDE, _bf, _bias_gelu_host, _layer_norm_host

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

LN_GEMV_CUDA = _PRELUDE + GEMV_CUDA + f"""
#define HRX_MAX_EMBD {MAX_EMBD}u
""" + r"""
// The block's share of xn . w[n] with xn = bf16(LN(x) g + b), grid and block as
// hrx_tensor.linear (linear_launch(K, N)): xn into shared memory by every block, then the
// GEMV over it; returns the warp's combined sum (valid where r.active, r.piece == 0 and
// r.lane == 0). The caller checks K <= HRX_MAX_EMBD, K % 8 == 0 and 256 threads.
__device__ __forceinline__ float hrx_ln_gemv(const float* __restrict__ x, const unsigned short* __restrict__ g,
                                             const unsigned short* __restrict__ b,
                                             const unsigned short* __restrict__ w, unsigned int K, float eps,
                                             const HrxGemvWarp& r) {
    __shared__ uint4 xs[HRX_MAX_EMBD / 8u];  // xn, BF16: 16 KiB at K = 8192
    __shared__ float red[32];
    __shared__ float partial[32];
    const uint4* wr = reinterpret_cast<const uint4*>(w + (size_t)(r.active ? r.out : 0u) * K);
    HrxGemvLoads first;
    if (r.active) first = hrx_gemv_first(wr, K >> 3, r);  // the weights stream during the prologue
    // prologue: the layer norm of x (L2-resident: K floats), read once into registers as
    // 16-byte vectors (at most HRX_MAX_EMBD / 1024 a thread), two passes over those
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
    float s = 0.f;
    if (r.active) s = hrx_gemv_dot<true>(xs, wr, K >> 3, r, first);
    return hrx_gemv_combine(s, r, partial);
}
"""

LN_LINEAR_CUDA = LN_GEMV_CUDA + r"""
// grid and block as hrx_tensor.linear (linear_launch(K, N)): y[n] = xn . w[n] (F32), or
// with gelu set act[n] = bf16(gelu_new(xn . w[n] + bias[n])), xn = bf16(LN(x) g + b).
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_ln_linear(
        const float* __restrict__ x, const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias,
        float* __restrict__ y, unsigned short* __restrict__ act,
        unsigned int K, unsigned int N, float eps, unsigned int ksplit, unsigned int gelu) {
    hrx_grid_dependencies();
    if (K > HRX_MAX_EMBD || (K & 7u) || K == 0u || blockDim.x != 256u) return;  // the host checks: the whole grid
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    const float s = hrx_ln_gemv(x, g, b, w, K, eps, r);
    if (r.active && r.piece == 0u && r.lane == 0) {
        if (gelu) act[r.out] = hrx_f32_to_bf16_rn(hrx_gelu_new(s + hrx_bf16_to_f32(bias[r.out])));
        else y[r.out] = s;
    }
}
"""

LN_LINEAR_ATTEND_CUDA = LN_GEMV_CUDA + ATTENTION_COMMON_BODY + """
// (the tail's attention at 32 lanes a K/V row and chunks of 2 steps: the fewest live
// registers a lane, for the GEMV's register budget of 32 or 40)
#define HRX_ATTN_ROW_LANES 32u
""" + ATTEND_STREAMED_DEVICE + r"""
// ln_1 + QKV (hrx_gpt2_ln_linear with N = 3 K, no GELU: y = qkv, F32), then the decode
// attention of each head by the block that finishes its head's rows last: a block's rows
// (8 / ksplit of them, dividing hd) are all one head's q, k or v rows, so each block counts
// itself into sync[head] once its rows are written; the head's last block (3 hd / rows
// counted) appends the position's K/V row to the cache and attends over rows 0..pos as
// hrx_gpt2_attention_streamed does with one split (its work where pos < HRX_ATTN_MIN_ROWS),
// at 32 lanes a row and chunks of 2 steps (the streamed kernel's sums in another order:
// the same within F32 rounding), then sets sync[head] back to 0. At pos >=
// HRX_ATTN_MIN_ROWS one block a head is slower than the split kernel, which the decoder
// records for those positions.
extern "C" __global__ void __launch_bounds__(256) hrx_gpt2_ln_linear_attend(
        const float* __restrict__ x, const unsigned short* __restrict__ g, const unsigned short* __restrict__ b,
        const unsigned short* __restrict__ w, const unsigned short* __restrict__ bias, float* y,
        const unsigned int* __restrict__ state, unsigned short* kc, unsigned short* vc,
        unsigned short* __restrict__ out, unsigned int* sync,
        unsigned int K, float eps, unsigned int ksplit, unsigned int hd, unsigned int P, float scale) {
    hrx_grid_dependencies();
    __shared__ float wm[HRX_ATTN_THREADS / 32u];
    __shared__ float wl[HRX_ATTN_THREADS / 32u];
    __shared__ float wacc[HRX_ATTN_THREADS / 32u * HRX_MAX_HEAD_DIM];
    __shared__ unsigned int last;
    // (the host checks all of these: a grid-wide return, so no count is left half made)
    if (K > HRX_MAX_EMBD || (K & 7u) || K == 0u || blockDim.x != 256u || hd > HRX_MAX_HEAD_DIM || hd < 8u
        || (hd & (hd - 1u)) || K % hd || P > HRX_MAX_POSITIONS) return;
#ifdef HRX_ATTN_DPL  // (specialize(head_dim=): the one tail its head_dim takes)
    if ((hd / HRX_ATTN_ROW_LANES > 2u ? hd / HRX_ATTN_ROW_LANES : 2u) != HRX_ATTN_DPL) return;
#endif
    const unsigned int N = 3u * K;
    const HrxGemvWarp r = hrx_gemv_warp(ksplit, N);
    const float s = hrx_ln_gemv(x, g, b, w, K, eps, r);
    if (r.active && r.piece == 0u && r.lane == 0) y[r.out] = s;
    const unsigned int rows = 8u / r.ks;
    const unsigned int head = (blockIdx.x * rows % K) / hd;
    __threadfence();  // this block's rows, before its count
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(sync + head, 1u) == 3u * hd / rows - 1u;
    __syncthreads();
    if (!last) return;
    __threadfence();  // the other blocks' rows (counted before ours), read past L1 (__ldcg)
    const unsigned int pos = state[0], base = head * hd;
    if (pos < P) {
        hrx_attend_append(y, bias, kc, vc, K, hd, base, pos);
#ifdef HRX_ATTN_DPL
        hrx_attend_rows<HRX_ATTN_DPL, 2u>(y, bias, kc, vc, K, hd, base, pos, 0u, pos + 1u, scale, wm, wl, wacc);
#else  // (the generic kernel: all three tails, whose registers the GEMV's budget holds at once)
        const unsigned int dpl = hd / HRX_ATTN_ROW_LANES;
        if (dpl <= 2u) hrx_attend_rows<2, 2u>(y, bias, kc, vc, K, hd, base, pos, 0u, pos + 1u, scale, wm, wl, wacc);
        else if (dpl == 4u) hrx_attend_rows<4, 2u>(y, bias, kc, vc, K, hd, base, pos, 0u, pos + 1u, scale, wm, wl, wacc);
        else hrx_attend_rows<8, 2u>(y, bias, kc, vc, K, hd, base, pos, 0u, pos + 1u, scale, wm, wl, wacc);
#endif
        float M, l;
        for (unsigned int i = threadIdx.x; i < hd; i += blockDim.x) {
            const float a = hrx_attend_combine(i, hd, wm, wl, wacc, &M, &l);
            out[base + i] = hrx_f32_to_bf16_rn(a / l);
        }
    }
    if (threadIdx.x == 0) sync[head] = 0u;  // for the next launch (stream-ordered after this one)
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


def _ln_linear_attend_host(x, g, b, w, bias, y, state, kc, vc, out, sync, k, eps, ksplit, hd, p, scale) -> None:
    _ln_linear_host(x, g, b, w, bias, y, y, k, 3 * int(k), eps, ksplit, 0)
    _attention_host(y, bias, state, kc, vc, out, None, sync, k, hd, p, scale, 1)


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
#: ln_1 + QKV + the decode attention in one kernel (the fused step's first two of a layer
#: where pos < ATTENTION_MIN_ROWS): buffers x, ln g, ln b, c_attn weight, c_attn bias,
#: qkv (F32, written), state, K cache, V cache, attention output, the attention's sync
#: counters (n_head, 0 between launches); scalars K = n_embd, eps, ksplit (of
#: linear_launch(K, 3 K)), head_dim, positions, scale. Grid and block: linear_launch(K, 3 K).
LN_LINEAR_ATTEND = Kernel(
    "hrx_gpt2_ln_linear_attend",
    buffers=("read", "read", "read", "read", "read", "write", "read", "read_write", "read_write", "write", "read_write"),
    scalars=(np.uint32, np.float32, np.uint32, np.uint32, np.uint32, np.float32),
    host=_ln_linear_attend_host, cuda=LN_LINEAR_ATTEND_CUDA, programmatic=True,
)
LINEAR_RESIDUAL = Kernel(
    "hrx_gpt2_linear_residual",
    buffers=("read", "read", "read", "read_write"),
    scalars=(np.uint32, np.uint32, np.uint32),
    host=_linear_residual_host, cuda=LINEAR_RESIDUAL_CUDA, programmatic=True,
)

FUSED = (EMBED, LN_LINEAR, LN_LINEAR_ATTEND, LINEAR_RESIDUAL)


# -- register budgets of the fused GEMVs (CUDA) ---------------------------------------

#: The budgets a CUDA plan chooses between (hrx_tensor's, the same GEMV body): minimum
#: blocks of 256 threads an SM -> 16-byte weight loads a lane keeps in flight; six fit
#: 40 registers with four loads, eight fit 32 with two. ``ln_linear`` reaches 40 only
#: compiled for the model's width (HRX_MAX_EMBD): at the generic 8192 it holds eight
#: float4 of x a thread and takes 64 registers (four blocks an SM). Measured on the H200
#: (bench/tools/occupancy_ab.py, greedy decode, us a token, generic kernels / every GEMV
#: at six / every GEMV at eight): GPT-2 small 272.6 / 238.0 / 246.3, gpt2-medium 722.6
#: / 609.6 / 550.2, 1.3B 1261.4 / 1200.7 / 1133.7; eight blocks with four loads spill
#: (small 275.2, 1.3B 1641.4). Which budget a GEMV takes: fused_gemv_blocks
#: (hrx_tensor.kernels.gemv_budget, whose doc has the rule and its measurements).
FUSED_GEMV_BUDGETS = GEMV_BUDGETS
fused_gemv_blocks = gemv_budget
lane_share = gemv_lane_share


def width_class(n_embd: int) -> int:
    """HRX_MAX_EMBD of a specialized ``ln_linear`` for widths up to ``n_embd``: the
    width rounded up to a multiple of 1024 (at most MAX_EMBD)."""
    if not 0 < n_embd <= MAX_EMBD:
        raise ValueError(f"n_embd {n_embd} is not in 1..{MAX_EMBD}")
    return -(-n_embd // 1024) * 1024


_SPECIALIZED: dict[tuple[Any, ...], Kernel] = {}


def attend_dpl(head_dim: int) -> int:
    """BF16 values a lane of ``ln_linear_attend``'s attention tail takes of a K/V row (32
    lanes a row, at least 2): the tail a kernel specialized for ``head_dim`` compiles."""
    if not (8 <= head_dim <= MAX_HEAD_DIM and head_dim & (head_dim - 1) == 0):
        raise ValueError(f"head_dim {head_dim}: expected a power of two in 8..{MAX_HEAD_DIM}")
    return max(2, head_dim // 32)


def specialize(kernel: Kernel, *, blocks: int, width: int | None = None, head_dim: int | None = None) -> Kernel:
    """``kernel`` (``ln_linear``, ``ln_linear_attend`` or ``linear_residual``, or a variant
    of their sources) compiled for a register budget: at least ``blocks`` blocks an SM with
    FUSED_GEMV_BUDGETS[blocks] loads in flight a lane, (``ln_linear*``) layer norms of at
    most width_class(``width``) values and (``ln_linear_attend``, required there) only the
    attention tail of ``head_dim`` (:func:`attend_dpl`: the generic kernel's three tails
    spill under a budget; one does not at head_dim 64 -- ``python
    bench/tools/kernel_spills.py``). A kernel of its own name (``..._w2048_b8``,
    ``..._w2048_d4_b8``), so that sessions hold several; the host mirror is the base
    kernel's (the budget changes only the CUDA code). Cached: equal requests get the same
    Kernel."""
    if blocks not in FUSED_GEMV_BUDGETS:
        raise ValueError(f"blocks {blocks}: expected one of {sorted(FUSED_GEMV_BUDGETS)}")
    src = kernel.sources.get("cuda")
    if kernel.entry != kernel.name or not isinstance(src, str):
        raise ValueError(f"kernel {kernel.name!r} has no CUDA source with a register budget to specialize")
    embd = f"#define HRX_MAX_EMBD {MAX_EMBD}u\n"
    ln = embd in src
    if ln != (width is not None):
        raise ValueError(f"kernel {kernel.name!r}: width is for ln_linear (and required there)")
    if ln:
        width = width_class(width)  # type: ignore[arg-type]
    attend = "#ifdef HRX_ATTN_DPL" in src
    if attend != (head_dim is not None):
        raise ValueError(f"kernel {kernel.name!r}: head_dim is for ln_linear_attend (and required there)")
    dpl = attend_dpl(head_dim) if head_dim is not None else None
    key = (kernel.name, src, blocks, width, dpl)
    found = _SPECIALIZED.get(key)
    if found is not None:
        return found
    name = f"{kernel.name}_w{width}" if ln else kernel.name
    name += f"_d{dpl}_b{blocks}" if attend else f"_b{blocks}"
    body = budget_source(src, kernel.name, name, blocks)  # (ValueError where it has no launch bounds to set)
    if ln:
        body = body.replace(embd, f"#define HRX_MAX_EMBD {width}u\n")
    if attend:
        body = f"#define HRX_ATTN_DPL {dpl}\n" + body
    sources = {**kernel.sources, "cuda": body}
    found = Kernel(name, buffers=kernel.buffer_access, scalars=kernel.scalar_types, sources=sources,
                   options=kernel.options, programmatic=kernel.programmatic)
    _SPECIALIZED[key] = found
    return found
