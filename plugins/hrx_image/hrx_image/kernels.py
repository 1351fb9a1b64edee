"""The image kernels: one hrx Kernel each, with a CUDA C++ source and a host
implementation whose float arithmetic is the same operation for operation.

The CUDA sources spell every float step with ``__fmul_rn``/``__fadd_rn``/
``__fsub_rn``/``__fdiv_rn`` (never contracted into an FMA) and are compiled with
``--fmad=false`` besides; rounding to uint8 is ``rintf`` (ties to even, as
``np.rint``) followed by a clamp to 0..255 (NaN to 0, as ``np.fmax``/``np.fmin``). Indices and weights of resizing come from
tables computed once on the host (:mod:`.tables`), so both engines read identical
bytes. Every kernel walks (image, row, column) over a 3-D grid -- columns in x, rows
in y, images (or image-channel planes) in z -- grid-stride in each dimension, so any
grid covers any size and no thread divides a flat index.

On the host engine a kernel runs the same CUDA source compiled for the CPU
(:mod:`.native`) where a C++ compiler exists, else the numpy kernel of :mod:`.host`;
the tests hold all three byte for byte equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hrx_core.kernel import Kernel

from . import host, native

#: Threads per block of every image kernel.
BLOCK = 256
#: Most blocks launched (the grid-stride loop covers the rest).
MAX_BLOCKS = 1 << 16

_COMMON = r"""
typedef unsigned long long u64;

// fminf(fmaxf(v, lo), hi) for lo < hi, NaN -> lo included, written as comparisons so
// that the CPU build of this source inlines it instead of calling libm
__device__ __forceinline__ float hrx_clamp(float v, float lo, float hi) {
    return v > lo ? (v < hi ? v : hi) : lo;
}

__device__ __forceinline__ unsigned char hrx_u8(float v) {
    return (unsigned char)hrx_clamp(rintf(v), 0.0f, 255.0f);
}

// q = i / a, r = i % a; 32-bit division where both fit (64-bit division is slow on GPUs)
__device__ __forceinline__ void hrx_divmod(u64 i, u64 a, u64& q, u64& r) {
    if (((i | a) >> 32) == 0) {
        const unsigned int i32 = (unsigned int)i, a32 = (unsigned int)a;
        q = i32 / a32;
        r = i32 - (unsigned int)q * a32;
    } else {
        q = i / a;
        r = i - q * a;
    }
}

#ifndef HRX_FOR_EACH_PIXEL
// image b, row y, column x over a 3-D grid (x: columns, y: rows, z: images), grid-stride
// in each dimension: no index divisions
#define HRX_FOR_EACH_PIXEL(b, y, x, nb, ny, nx) \
    for (u64 b = blockIdx.z; b < (nb); b += gridDim.z) \
        for (u64 y = blockIdx.y; y < (ny); y += gridDim.y) \
            for (u64 x = (u64)blockIdx.x * blockDim.x + threadIdx.x; x < (nx); x += (u64)gridDim.x * blockDim.x)
#endif
"""

NORMALIZE_CUDA = _COMMON + r"""
// Lookup-table normalization: thread per (padded) source pixel (image b, row y, column x);
// the table holds the normalized value of every uint8 input per output channel (float32
// or BF16 bits).
extern "C" __global__ void __launch_bounds__(256)
hrx_image_normalize(const unsigned char* __restrict__ src, const unsigned char* __restrict__ table,
                    unsigned char* __restrict__ dst, unsigned int n, unsigned int h, unsigned int w,
                    unsigned int c, unsigned int cout, unsigned int order, unsigned int patch,
                    unsigned int hp, unsigned int wp, unsigned int esize) {
    __shared__ unsigned int tab[4 * 256];
    const unsigned int entries = cout * 256u;
    for (unsigned int i = threadIdx.x; i < entries; i += blockDim.x)
        tab[i] = esize == 4u ? reinterpret_cast<const unsigned int*>(table)[i]
                             : (unsigned int)reinterpret_cast<const unsigned short*>(table)[i];
    __syncthreads();
    HRX_FOR_EACH_PIXEL(b, y, x, n, hp, wp) {
        const bool inside = x < w && y < h;
        const unsigned char* px = src + ((b * h + y) * w + x) * c;
        u64 base, step;
        if (patch == 0u) {
            base = (b * cout * hp + y) * wp + x;
            step = (u64)hp * wp;
        } else {
            const u64 gw = wp / patch, gh = hp / patch;
            u64 ph, qy, pw, qx;  // patch row/column and the position inside the patch
            hrx_divmod(y, patch, ph, qy);
            hrx_divmod(x, patch, pw, qx);
            base = (b * gh * gw + ph * gw + pw) * cout * patch * patch + qy * patch + qx;
            step = (u64)patch * patch;
        }
        for (unsigned int k = 0; k < cout; ++k) {
            const unsigned int v = inside ? tab[k * 256u + px[(order >> (8u * k)) & 0xFFu]] : 0u;
            const u64 o = base + k * step;
            if (esize == 4u) reinterpret_cast<unsigned int*>(dst)[o] = v;
            else reinterpret_cast<unsigned short*>(dst)[o] = (unsigned short)v;
        }
    }
}
"""

PATCHIFY_CUDA = _COMMON + r"""
// Patchify as a copy of whole patch rows. A source row y of image-channel plane
// (b, k) splits into gw runs of p elements; run pw is row py = y % p of channel k
// inside patch (y / p, pw). Every run is moved in vectors of ``vw`` bytes (16, 8,
// 4, 2 or 1: the widest dividing the run, the row pitch and the first byte, so no
// vector straddles a run, the image edge or an unaligned address). One warp copies
// one source row: lane l takes vectors l, l + 32, ... of the (padded) row, the
// (patch, vector-in-run) position of each found by carrying a constant step -- the
// only divisions are per thread (its first position and step) and per row (y / p,
// b and k of the plane). Vector offsets inside a row of patches are 32-bit where
// that row of patches spans fewer than 2^32 vectors (64-bit otherwise). Padding
// rows and columns (pad='zero') are written as zero vectors.
#ifndef HRX_PATCH_PLANES
#define HRX_LANE_FIRST (threadIdx.x & 31u)
#define HRX_LANE_END (HRX_LANE_FIRST + 1u)
#define HRX_LANES 32u
// image-channel planes over grid y, their source rows over grid x and the block's
// warps (blockDim.x / 32), grid-stride in both
#define HRX_PATCH_PLANES(plane, nplanes, nrows) for (u64 plane = blockIdx.y; plane < (nplanes); plane += gridDim.y)
#define HRX_PATCH_ROWS(y, plane, nplanes, nrows) \
    for (unsigned int y = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); y < (nrows); \
         y += gridDim.x * (blockDim.x >> 5))
#endif

// An all-zero vector (on gfx1151 a memset: clang's code for a value-initialized
// struct there asks for the dispatch pointer, which HRX's dispatch does not provide)
template <typename V>
__device__ __forceinline__ V hrx_zero() {
#ifdef HRX_AMDGPU
    V v;
    __builtin_memset(&v, 0, sizeof(V));
    return v;
#else
    return V();
#endif
}

// One vector of a row: its destination offset ``o`` and value ``v`` (zero past the
// source row or on a padding row); then the position advances by one step.
template <typename V, typename I>
__device__ __forceinline__ bool hrx_patch_step(V& v, I& o, const V* __restrict__ src, unsigned int& cv,
                                               unsigned int& pw, unsigned int& pv, unsigned int ncv,
                                               unsigned int nvalid, unsigned int lanes, unsigned int dpw,
                                               unsigned int dpv, unsigned int vp, I ps) {
    const bool on = cv < ncv;
    o = (I)pw * ps + pv;
    v = hrx_zero<V>();
    if (on && src != 0 && cv < nvalid) v = src[cv];
    cv += lanes;
    pv += dpv;
    pw += dpw;
    if (pv >= vp) {
        pv -= vp;
        ++pw;
    }
    return on;
}

// Copy one source row (``src`` null: a padding row) into its patch runs. ``cv`` is the
// lane's first vector of the row, (pw, pv) its run and vector inside the run; each
// step advances cv by ``lanes`` and (pw, pv) by (dpw, dpv) with a carry. Four
// vectors per round: four loads in flight before the four stores.
template <typename V, typename I>
__device__ __forceinline__ void hrx_patch_row(const V* __restrict__ src, V* __restrict__ dst, unsigned int cv,
                                              unsigned int pw, unsigned int pv, unsigned int ncv, unsigned int nvalid,
                                              unsigned int lanes, unsigned int dpw, unsigned int dpv, unsigned int vp,
                                              I ps) {
    while (cv < ncv) {
        V v0, v1, v2, v3;
        I o0, o1, o2, o3;
        const bool on0 = hrx_patch_step(v0, o0, src, cv, pw, pv, ncv, nvalid, lanes, dpw, dpv, vp, ps);
        const bool on1 = hrx_patch_step(v1, o1, src, cv, pw, pv, ncv, nvalid, lanes, dpw, dpv, vp, ps);
        const bool on2 = hrx_patch_step(v2, o2, src, cv, pw, pv, ncv, nvalid, lanes, dpw, dpv, vp, ps);
        const bool on3 = hrx_patch_step(v3, o3, src, cv, pw, pv, ncv, nvalid, lanes, dpw, dpv, vp, ps);
        if (on0) dst[o0] = v0;
        if (on1) dst[o1] = v1;
        if (on2) dst[o2] = v2;
        if (on3) dst[o3] = v3;
    }
}

template <typename V, typename I>
__device__ __forceinline__ void hrx_patchify(const unsigned char* src_, unsigned char* dst_, unsigned int n,
                                             unsigned int c, unsigned int h, unsigned int w, unsigned int p,
                                             unsigned int hp, unsigned int wp, unsigned int es) {
    const V* src = reinterpret_cast<const V*>(src_);
    V* dst = reinterpret_cast<V*>(dst_);
    const unsigned int vb = sizeof(V);
    const unsigned int vp = p * es / vb;     // vectors per patch run
    const unsigned int nvalid = w * es / vb;  // vectors of a source row (row pitch)
    const unsigned int ncv = wp * es / vb;    // vectors of a padded row
    const unsigned int gw = wp / p;
    const u64 np_ = (u64)(hp / p) * gw;       // patches per image
    const I ps = (I)c * p * vp;              // vectors per patch (patch stride)
    for (unsigned int lane = HRX_LANE_FIRST; lane < HRX_LANE_END; ++lane) {
        const unsigned int lanes = HRX_LANES;
        const unsigned int pw0 = lane / vp, pv0 = lane - pw0 * vp;
        const unsigned int dpw = lanes / vp, dpv = lanes - dpw * vp;
        HRX_PATCH_PLANES(plane, (u64)n * c, hp) {
            // n * c < 2^32 (ImageOps checks it): 32-bit division, once per plane
            const unsigned int b = (unsigned int)plane / c, k = (unsigned int)plane - b * c;
            const V* splane = src + plane * h * nvalid;
            V* dpatches = dst + ((u64)b * np_ * c + k) * p * vp;  // patch 0 of image b, channel k, row 0
            HRX_PATCH_ROWS(y, plane, (u64)n * c, hp) {
                const unsigned int ph = y / p, py = y - ph * p;
                const V* srow = y < h ? splane + (u64)y * nvalid : (const V*)0;
                V* drow = dpatches + ((u64)ph * gw * c * p + py) * vp;
                hrx_patch_row<V, I>(srow, drow, lane, pw0, pv0, ncv, nvalid, lanes, dpw, dpv, vp, ps);
            }
        }
    }
}

template <typename V>
__device__ __forceinline__ void hrx_patchify_v(const unsigned char* src, unsigned char* dst, unsigned int n,
                                               unsigned int c, unsigned int h, unsigned int w, unsigned int p,
                                               unsigned int hp, unsigned int wp, unsigned int es) {
    // a row of patches spans gw * c * p * p * es bytes: 32-bit vector offsets below 2^32 vectors
    if ((u64)wp * c * p * es / sizeof(V) < (1ull << 32))
        hrx_patchify<V, unsigned int>(src, dst, n, c, h, w, p, hp, wp, es);
    else
        hrx_patchify<V, u64>(src, dst, n, c, h, w, p, hp, wp, es);
}

extern "C" __global__ void __launch_bounds__(256)
hrx_image_patchify(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, unsigned int n,
                   unsigned int c, unsigned int h, unsigned int w, unsigned int p, unsigned int hp,
                   unsigned int wp, unsigned int esize, unsigned int vw) {
    switch (vw) {
        case 16u: hrx_patchify_v<uint4>(src, dst, n, c, h, w, p, hp, wp, esize); break;
        case 8u: hrx_patchify_v<uint2>(src, dst, n, c, h, w, p, hp, wp, esize); break;
        case 4u: hrx_patchify_v<unsigned int>(src, dst, n, c, h, w, p, hp, wp, esize); break;
        case 2u: hrx_patchify_v<unsigned short>(src, dst, n, c, h, w, p, hp, wp, esize); break;
        default: hrx_patchify_v<unsigned char>(src, dst, n, c, h, w, p, hp, wp, esize); break;
    }
}
"""

RESIZE_CUDA = _COMMON + r"""
__device__ __forceinline__ void hrx_store(unsigned char* p, float v) { *p = hrx_u8(v); }
__device__ __forceinline__ void hrx_store(float* p, float v) { *p = v; }

// Separable-filter resize, evaluated per output pixel (thread per pixel, all channels):
//   acc = 0 + wy[0]*row(yi[0]) + wy[1]*row(yi[1]) + ...
//   row(r) = 0 + wx[0]*src[r, xi[0]] + wx[1]*src[r, xi[1]] + ...
// in exactly this order (the host computes the same sums row by row).
template <typename T>
__device__ __forceinline__ void hrx_resize(const T* src, const unsigned char* table, T* dst, u64 n, u64 h, u64 w,
                                           unsigned int c, u64 ho, u64 wo, unsigned int kx, unsigned int ky,
                                           bool nearest) {
    const int* xi = reinterpret_cast<const int*>(table);
    const float* xw = reinterpret_cast<const float*>(xi + wo * kx);
    const int* yi = reinterpret_cast<const int*>(xw + wo * kx);
    const float* yw = reinterpret_cast<const float*>(yi + ho * ky);
    HRX_FOR_EACH_PIXEL(b, y, x, n, ho, wo) {
        const T* img = src + b * h * w * c;
        T* out = dst + ((b * ho + y) * wo + x) * c;
        if (nearest) {
            const T* px = img + ((u64)yi[y] * w + (u64)xi[x]) * c;
            for (unsigned int ch = 0; ch < c; ++ch) out[ch] = px[ch];
            continue;
        }
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (unsigned int j = 0; j < ky; ++j) {
            const T* line = img + (u64)yi[y * ky + j] * w * c;
            float row[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned int q = 0; q < kx; ++q) {
                const T* px = line + (u64)xi[x * kx + q] * c;
                const float wgt = xw[x * kx + q];
                #pragma unroll
                for (unsigned int ch = 0; ch < 4; ++ch)
                    if (ch < c) row[ch] = __fadd_rn(row[ch], __fmul_rn(wgt, (float)px[ch]));
            }
            const float wgt = yw[y * ky + j];
            #pragma unroll
            for (unsigned int ch = 0; ch < 4; ++ch)
                if (ch < c) acc[ch] = __fadd_rn(acc[ch], __fmul_rn(wgt, row[ch]));
        }
        #pragma unroll
        for (unsigned int ch = 0; ch < 4; ++ch)
            if (ch < c) hrx_store(out + ch, acc[ch]);
    }
}

extern "C" __global__ void __launch_bounds__(256)
hrx_image_resize(const unsigned char* __restrict__ src, const unsigned char* __restrict__ table,
                 unsigned char* __restrict__ dst, unsigned int n, unsigned int h, unsigned int w, unsigned int c,
                 unsigned int ho, unsigned int wo, unsigned int kx, unsigned int ky, unsigned int is_f32,
                 unsigned int nearest) {
    if (is_f32) hrx_resize(reinterpret_cast<const float*>(src), table, reinterpret_cast<float*>(dst), n, h, w, c, ho, wo, kx, ky, nearest != 0u);
    else hrx_resize(src, table, dst, n, h, w, c, ho, wo, kx, ky, nearest != 0u);
}
"""

AFFINE_CUDA = _COMMON + r"""
// Bilinear sampling through an inverse 2x3 matrix (output pixel -> source position,
// pixel centres at integer coordinates); taps outside the source read zero.
template <typename T>
__device__ __forceinline__ float hrx_tap(const T* px, bool inside, unsigned int ch) {
    return inside ? (float)px[ch] : 0.0f;
}

template <typename T, typename O>
__device__ __forceinline__ void hrx_affine(const T* src, const float* mat, O* dst, u64 n, long long h, long long w,
                                           unsigned int c, u64 ho, u64 wo, bool per_image) {
    const float hx = __fadd_rn((float)w, 1.0f), hy = __fadd_rn((float)h, 1.0f);
    HRX_FOR_EACH_PIXEL(b, y, x, n, ho, wo) {
        const float* m = mat + (per_image ? b * 6 : 0);
        const float xf = (float)x, yf = (float)y;
        float sx = __fadd_rn(__fadd_rn(__fmul_rn(m[0], xf), __fmul_rn(m[1], yf)), m[2]);
        float sy = __fadd_rn(__fadd_rn(__fmul_rn(m[3], xf), __fmul_rn(m[4], yf)), m[5]);
        sx = hrx_clamp(sx, -2.0f, hx);
        sy = hrx_clamp(sy, -2.0f, hy);
        const float x0f = floorf(sx), y0f = floorf(sy);
        const float fx = __fsub_rn(sx, x0f), fy = __fsub_rn(sy, y0f);
        const float gx = __fsub_rn(1.0f, fx), gy = __fsub_rn(1.0f, fy);
        const long long x0 = (long long)x0f, y0 = (long long)y0f;
        // which of the four taps lie inside; positions outside read zero
        const bool ix0 = x0 >= 0 && x0 < w, ix1 = x0 + 1 >= 0 && x0 + 1 < w;
        const bool iy0 = y0 >= 0 && y0 < h, iy1 = y0 + 1 >= 0 && y0 + 1 < h;
        const T* img = src + b * (u64)h * w * c;
        // tap addresses are formed only for taps inside the image
        const T* p00 = img + ((iy0 ? y0 : 0) * w + (ix0 ? x0 : 0)) * c;
        const T* p01 = img + ((iy0 ? y0 : 0) * w + (ix1 ? x0 + 1 : 0)) * c;
        const T* p10 = img + ((iy1 ? y0 + 1 : 0) * w + (ix0 ? x0 : 0)) * c;
        const T* p11 = img + ((iy1 ? y0 + 1 : 0) * w + (ix1 ? x0 + 1 : 0)) * c;
        O* out = dst + ((b * ho + y) * wo + x) * c;
        for (unsigned int ch = 0; ch < c; ++ch) {
            const float r0 = __fadd_rn(__fmul_rn(gx, hrx_tap(p00, iy0 && ix0, ch)),
                                       __fmul_rn(fx, hrx_tap(p01, iy0 && ix1, ch)));
            const float r1 = __fadd_rn(__fmul_rn(gx, hrx_tap(p10, iy1 && ix0, ch)),
                                       __fmul_rn(fx, hrx_tap(p11, iy1 && ix1, ch)));
            const float acc = __fadd_rn(__fmul_rn(gy, r0), __fmul_rn(fy, r1));
            if (sizeof(O) == 1) reinterpret_cast<unsigned char*>(out)[ch] = hrx_u8(acc);
            else reinterpret_cast<float*>(out)[ch] = acc;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
hrx_image_affine(const unsigned char* __restrict__ src, const float* __restrict__ mat, unsigned char* __restrict__ dst,
                 unsigned int n, unsigned int h, unsigned int w, unsigned int c, unsigned int ho, unsigned int wo,
                 unsigned int per_image, unsigned int in_f32, unsigned int out_f32) {
    const float* fs = reinterpret_cast<const float*>(src);
    float* fd = reinterpret_cast<float*>(dst);
    if (in_f32 && out_f32) hrx_affine(fs, mat, fd, n, h, w, c, ho, wo, per_image != 0u);
    else if (in_f32) hrx_affine(fs, mat, dst, n, h, w, c, ho, wo, per_image != 0u);
    else if (out_f32) hrx_affine(src, mat, fd, n, h, w, c, ho, wo, per_image != 0u);
    else hrx_affine(src, mat, dst, n, h, w, c, ho, wo, per_image != 0u);
}
"""

COMPOSITE_CUDA = _COMMON + r"""
// Alpha-over of an RGBA uint8 layer at (ox, oy) onto an RGB/RGBA uint8 image; pixels
// outside the layer are copied. Straight: a = A/255, out = S*a + D*(1-a) (RGB target)
// or ((S*a + D*(da*(1-a))) / oa, oa*255) with oa = a + da*(1-a) (RGBA target; all
// zero where oa == 0). Premultiplied: out = S + D*(1-A/255), alpha A + DA*(1-A/255).
extern "C" __global__ void __launch_bounds__(256)
hrx_image_composite(const unsigned char* __restrict__ base, const unsigned char* __restrict__ layer,
                    unsigned char* __restrict__ dst, unsigned int n, unsigned int h, unsigned int w, unsigned int c,
                    unsigned int lh, unsigned int lw, int ox, int oy, unsigned int premultiplied) {
    HRX_FOR_EACH_PIXEL(b, y, x, n, h, w) {
        const u64 i = (b * h + y) * w + x;
        const unsigned char* d = base + i * c;
        unsigned char* o = dst + i * c;
        const long long lx = (long long)x - ox, ly = (long long)y - oy;
        if (lx < 0 || ly < 0 || lx >= (long long)lw || ly >= (long long)lh) {
            for (unsigned int ch = 0; ch < c; ++ch) o[ch] = d[ch];
            continue;
        }
        const unsigned char* s = layer + ((u64)ly * lw + (u64)lx) * 4u;
        const float sa = (float)s[3];
        if (premultiplied) {
            const float ia = __fsub_rn(1.0f, __fdiv_rn(sa, 255.0f));
            for (unsigned int ch = 0; ch < 3; ++ch) o[ch] = hrx_u8(__fadd_rn((float)s[ch], __fmul_rn((float)d[ch], ia)));
            if (c == 4u) o[3] = hrx_u8(__fadd_rn(sa, __fmul_rn((float)d[3], ia)));
        } else {
            const float a = __fdiv_rn(sa, 255.0f);
            const float ia = __fsub_rn(1.0f, a);
            if (c == 3u) {
                for (unsigned int ch = 0; ch < 3; ++ch)
                    o[ch] = hrx_u8(__fadd_rn(__fmul_rn((float)s[ch], a), __fmul_rn((float)d[ch], ia)));
            } else {
                const float da = __fdiv_rn((float)d[3], 255.0f);
                const float t = __fmul_rn(da, ia);
                const float oa = __fadd_rn(a, t);
                for (unsigned int ch = 0; ch < 3; ++ch)
                    o[ch] = oa > 0.0f ? hrx_u8(__fdiv_rn(__fadd_rn(__fmul_rn((float)s[ch], a), __fmul_rn((float)d[ch], t)), oa)) : (unsigned char)0;
                o[3] = hrx_u8(__fmul_rn(oa, 255.0f));
            }
        }
    }
}
"""

_U32 = np.uint32
_OPTIONS = {"cuda": ("--fmad=false",)}
_SOURCES = (NORMALIZE_CUDA, PATCHIFY_CUDA, RESIZE_CUDA, AFFINE_CUDA, COMPOSITE_CUDA)
#: Run the CUDA sources compiled for the CPU on the host engine where they build
#: (tests switch it off to cover the numpy kernels).
USE_NATIVE = True


def _host(entry: str, buffers: int, numpy_kernel: Callable[..., None]) -> Callable[..., None]:
    """The host callable: the natively compiled CUDA source, else the numpy kernel."""

    def kernel(*args: Any) -> None:
        lib = native.library(_SOURCES) if USE_NATIVE else None
        if lib is None:
            numpy_kernel(*args)
        else:
            native.run(lib, entry, args[:buffers], args[buffers:])

    kernel.__name__ = kernel.__qualname__ = f"{entry}_host"
    return kernel


def _kernel(entry: str, buffers: tuple[str, ...], scalars: tuple[Any, ...], numpy_kernel: Callable[..., None],
            source: str) -> Kernel:
    return Kernel(entry, buffers=buffers, scalars=scalars, host=_host(entry, len(buffers), numpy_kernel), cuda=source,
                  options=_OPTIONS)


NORMALIZE = _kernel("hrx_image_normalize", ("read", "read", "write"), (_U32,) * 10, host.normalize, NORMALIZE_CUDA)
PATCHIFY = _kernel("hrx_image_patchify", ("read", "write"), (_U32,) * 9, host.patchify, PATCHIFY_CUDA)
RESIZE = _kernel("hrx_image_resize", ("read", "read", "write"), (_U32,) * 10, host.resize, RESIZE_CUDA)
AFFINE = _kernel("hrx_image_affine", ("read", "read", "write"), (_U32,) * 9, host.affine, AFFINE_CUDA)
COMPOSITE = _kernel("hrx_image_composite", ("read", "read", "write"),
                    (_U32, _U32, _U32, _U32, _U32, _U32, np.int32, np.int32, _U32), host.composite, COMPOSITE_CUDA)

ALL = (NORMALIZE, PATCHIFY, RESIZE, AFFINE, COMPOSITE)
#: Engines this distribution has kernels for.
ENGINES = ("host", "cuda", "amdgpu")


def kernels_for(engine: str) -> dict[str, Kernel]:
    """The image kernels for ``engine`` by name (empty where there are none)."""
    if engine not in ENGINES:
        return {}
    return {k.name: k for k in ALL}


#: Warps (source rows) per block of patchify.
PATCH_WARPS = BLOCK // 32


def vector_width(bits: int) -> int:
    """The widest of 16, 8, 4, 2, 1 bytes dividing every value OR-ed into ``bits``."""
    bits |= 16
    return bits & -bits


def patch_grid(planes: int, rows: int) -> tuple[int, int, int]:
    """Patchify's grid: source rows (PATCH_WARPS per block) in x, image-channel planes
    in y; grid-stride beyond 65535 in either."""
    return max(1, min(65535, -(-rows // PATCH_WARPS))), max(1, min(65535, planes)), 1


def pixel_grid(n: int, h: int, w: int) -> tuple[int, int, int]:
    """The 3-D grid of the kernels (HRX_FOR_EACH_PIXEL): column blocks, rows, images."""
    return max(1, min(MAX_BLOCKS, -(-w // BLOCK))), min(h, 65535), min(n, 65535)
