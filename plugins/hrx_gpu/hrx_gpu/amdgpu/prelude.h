// HRX prelude for CUDA-dialect kernels compiled for AMD gfx1151 (amdgcn-amd-amdhsa,
// wave32, code object v5) by clang in HIP mode with -nogpuinc -nogpulib: no ROCm
// headers and no device libraries. Everything here is either a clang builtin that
// the AMDGPU backend lowers to instructions, or a short function of our own written
// after a well-known formulation (named where it appears). What is not here does not
// exist for gfx1151 kernels: a call to a missing libm function fails at link time
// ("undefined symbol"), never silently.
//
// Provided:
//   qualifiers   __global__ __device__ __host__ __shared__ __constant__ __forceinline__
//                __launch_bounds__(threads[, min_blocks]) (-> amdgpu_flat_work_group_size)
//                __grid_constant__ (nothing: by-value arguments live in the read-only
//                kernarg segment and are indexed in place)
//   indices      threadIdx blockIdx blockDim gridDim (blockDim and gridDim read the code
//                object v5 implicit kernel arguments), warpSize (32), dim3, __lane_id()
//   types        size_t ptrdiff_t (u)int{8,16,32,64}_t, CUDA vector types
//                {char,uchar,short,ushort,int,uint,long,ulong,longlong,ulonglong,float,
//                double}{1,2,3,4} with CUDA's sizes and alignments, make_<type>N()
//   sync         __syncthreads __syncwarp __threadfence_block __threadfence
//                __threadfence_system
//   warp         __shfl_sync __shfl_up_sync __shfl_down_sync __shfl_xor_sync (any type of
//                4 or 8 bytes, or smaller, width a power of two <= 32), __ballot_sync
//                __any_sync __all_sync __activemask, __reduce_{add,min,max}_sync (int,
//                unsigned) __reduce_{and,or,xor}_sync (unsigned)
//   atomics      atomicAdd/Sub/Exch/Min/Max/And/Or/Xor/CAS/Inc/Dec (+ _block, _system)
//   loads        __ldg __ldcg __ldca __ldcs __ldlu __ldcv (plain or nontemporal loads)
//   float ops    __fadd_rn __fsub_rn __fmul_rn __fdiv_rn __fmaf_rn __fsqrt_rn __frcp_rn
//                __dadd_rn __dsub_rn __dmul_rn __ddiv_rn __fma_rn (never contracted)
//   bits         __float_as_uint __uint_as_float __float_as_int __int_as_float
//                __double_as_longlong __longlong_as_double __popc(ll) __clz(ll) __ffs(ll)
//                __brev(ll) __mulhi __umulhi __mul64hi __umul64hi
//   conversions  __float2int_rn/_rz __float2uint_rn/_rz __int2float_rn __uint2float_rn
//   math (float) fabsf floorf ceilf truncf rintf nearbyintf roundf fminf fmaxf fmaf
//                copysignf sqrtf ldexpf expf exp2f exp10f logf log2f log10f (clang
//                builtins lowered by the AMDGPU backend: exact or correctly rounded, exp/
//                log within about 1 ulp), rsqrtf (v_rsq_f32, about 1 ulp), __expf __logf
//                (v_exp_f32/v_log_f32, fast approximations like CUDA's), tanhf (Cephes
//                tanhf: odd polynomial for |x| < 0.625, 1 - 2/(exp(2|x|) + 1) above),
//                __saturatef, min/max overloads
//   math (double) fabs floor ceil trunc rint sqrt fma fmin fmax
//   time         clock64 clock (shader cycle counter), wall_clock64 (constant 100 MHz)
//   BF16         __nv_bfloat16 __nv_bfloat162 (cuda_bf16.h names): __bfloat162float
//                __float2bfloat16 (= _rn: round to nearest even, NaN stays NaN)
//                __float2bfloat16_rz __bfloat16_as_ushort __ushort_as_bfloat16
//                __floats2bfloat162_rn __float22bfloat162_rn __bfloat1622float2
//                __low2float __high2float __low2bfloat16 __high2bfloat16
//                __halves2bfloat162 __hadd __hsub __hmul __hdiv __hmax __hmin __hneg
//                (arithmetic in F32 and one rounding to BF16: exact, since 24 >= 2*8+2)
#pragma once

#if !defined(__AMDGCN__) || !defined(__HIP__)
#error "hrx prelude: compile with clang -x hip for an amdgcn target"
#endif
#if defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != 32
#error "hrx prelude: the kernels assume wave32 (gfx1151's default)"
#endif

#define HRX_AMDGPU 1

// -- qualifiers -------------------------------------------------------------------------
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __grid_constant__
#define __launch_bounds__(...) __hrx_launch_bounds(__VA_ARGS__, 0)
#define __hrx_launch_bounds(threads, ...) __attribute__((amdgpu_flat_work_group_size(1, threads)))

#define __HRX_DEVICE static __device__ __forceinline__

// -- scalar types -----------------------------------------------------------------------
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __UINTPTR_TYPE__ uintptr_t;

// -- CUDA vector types: structs with CUDA's sizes and alignments -------------------------
#define __HRX_VEC1(name, T, A) \
    struct __attribute__((aligned(A))) name { T x; }; \
    __HRX_DEVICE name make_##name(T x) { name v; v.x = x; return v; }
#define __HRX_VEC2(name, T, A) \
    struct __attribute__((aligned(A))) name { T x, y; }; \
    __HRX_DEVICE name make_##name(T x, T y) { name v; v.x = x; v.y = y; return v; }
#define __HRX_VEC3(name, T) \
    struct name { T x, y, z; }; \
    __HRX_DEVICE name make_##name(T x, T y, T z) { name v; v.x = x; v.y = y; v.z = z; return v; }
#define __HRX_VEC4(name, T, A) \
    struct __attribute__((aligned(A))) name { T x, y, z, w; }; \
    __HRX_DEVICE name make_##name(T x, T y, T z, T w) { name v; v.x = x; v.y = y; v.z = z; v.w = w; return v; }
#define __HRX_VECS(base, T, A1, A2, A4) \
    __HRX_VEC1(base##1, T, A1) __HRX_VEC2(base##2, T, A2) __HRX_VEC3(base##3, T) __HRX_VEC4(base##4, T, A4)

__HRX_VECS(char, signed char, 1, 2, 4)
__HRX_VECS(uchar, unsigned char, 1, 2, 4)
__HRX_VECS(short, short, 2, 4, 8)
__HRX_VECS(ushort, unsigned short, 2, 4, 8)
__HRX_VECS(int, int, 4, 8, 16)
__HRX_VECS(uint, unsigned int, 4, 8, 16)
__HRX_VECS(long, long, 8, 16, 16)
__HRX_VECS(ulong, unsigned long, 8, 16, 16)
__HRX_VECS(longlong, long long, 8, 16, 16)
__HRX_VECS(ulonglong, unsigned long long, 8, 16, 16)
__HRX_VECS(float, float, 4, 8, 16)
__HRX_VECS(double, double, 8, 16, 16)

struct dim3 {
    unsigned int x, y, z;
    __device__ constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
    __device__ constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    __device__ constexpr operator uint3() const { return uint3{x, y, z}; }
};

// -- thread and block indices -----------------------------------------------------------
// Code object v5 implicit kernel arguments (AMDGPUUsage, "Code Object V5 Metadata"):
// hidden_block_count_{x,y,z} (u32) at offsets 0, 4, 8 and hidden_group_size_{x,y,z} (u16)
// at 12, 14, 16 of the implicit argument block. blockDim comes from clang's
// __builtin_amdgcn_workgroup_size_* (which reads hidden_group_size_* under
// -mcode-object-version=5), gridDim from hidden_block_count_*.
__HRX_DEVICE unsigned int __hrx_block_count(int i) {
    return ((const __attribute__((address_space(4))) unsigned int*)__builtin_amdgcn_implicitarg_ptr())[i];
}

#define __HRX_INDEX(type, name, fx, fy, fz) \
    struct type { \
        __declspec(property(get = __get_x)) unsigned int x; \
        __declspec(property(get = __get_y)) unsigned int y; \
        __declspec(property(get = __get_z)) unsigned int z; \
        __device__ __forceinline__ unsigned int __get_x() const { return fx; } \
        __device__ __forceinline__ unsigned int __get_y() const { return fy; } \
        __device__ __forceinline__ unsigned int __get_z() const { return fz; } \
        __device__ __forceinline__ operator dim3() const { return dim3(fx, fy, fz); } \
        __device__ __forceinline__ operator uint3() const { return make_uint3(fx, fy, fz); } \
    }; \
    extern const __device__ __attribute__((weak)) type name;

__HRX_INDEX(__hrx_thread_idx, threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
            __builtin_amdgcn_workitem_id_z())
__HRX_INDEX(__hrx_block_idx, blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
            __builtin_amdgcn_workgroup_id_z())
__HRX_INDEX(__hrx_block_dim, blockDim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
            __builtin_amdgcn_workgroup_size_z())
__HRX_INDEX(__hrx_grid_dim, gridDim, __hrx_block_count(0), __hrx_block_count(1), __hrx_block_count(2))

static constexpr int warpSize = 32;

__HRX_DEVICE unsigned int __lane_id() { return __builtin_amdgcn_mbcnt_lo(~0u, 0u); }

// -- barriers and fences ----------------------------------------------------------------
__HRX_DEVICE void __syncthreads() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__HRX_DEVICE void __syncwarp(unsigned int mask = 0xffffffffu) {
    (void)mask;
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
__HRX_DEVICE void __threadfence_block() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup"); }
__HRX_DEVICE void __threadfence() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
__HRX_DEVICE void __threadfence_system() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); }

// -- warp shuffles (wave32, through ds_bpermute) ----------------------------------------
// Lane arithmetic as CUDA defines it for a segment of `width` lanes; a value is moved
// as 32-bit words, so any trivially copyable type of up to 8 bytes shuffles.
template <typename T>
__HRX_DEVICE T __hrx_bpermute(T v, int lane) {
    static_assert(sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
    int w[2] = {0, 0};
    __builtin_memcpy(w, &v, sizeof(T));
    w[0] = __builtin_amdgcn_ds_bpermute(lane << 2, w[0]);
    if (sizeof(T) > 4) w[1] = __builtin_amdgcn_ds_bpermute(lane << 2, w[1]);
    T out;
    __builtin_memcpy(&out, w, sizeof(T));
    return out;
}
template <typename T>
__HRX_DEVICE T __shfl_sync(unsigned int mask, T v, int src, int width = warpSize) {
    (void)mask;
    const int self = (int)__lane_id();
    return __hrx_bpermute(v, (src & (width - 1)) + (self & ~(width - 1)));
}
template <typename T>
__HRX_DEVICE T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = warpSize) {
    (void)mask;
    const int self = (int)__lane_id();
    const int lane = (self & (width - 1)) < (int)delta ? self : self - (int)delta;
    return __hrx_bpermute(v, lane);
}
template <typename T>
__HRX_DEVICE T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = warpSize) {
    (void)mask;
    const int self = (int)__lane_id();
    const int lane = (self & (width - 1)) + (int)delta >= width ? self : self + (int)delta;
    return __hrx_bpermute(v, lane);
}
template <typename T>
__HRX_DEVICE T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = warpSize) {
    (void)mask;
    const int self = (int)__lane_id();
    const int other = self ^ lane_mask;
    return __hrx_bpermute(v, other >= ((self + width) & ~(width - 1)) ? self : other);
}

__HRX_DEVICE unsigned int __activemask() { return __builtin_amdgcn_ballot_w32(true); }
__HRX_DEVICE unsigned int __ballot_sync(unsigned int mask, int pred) {
    return __builtin_amdgcn_ballot_w32(pred != 0) & mask;
}
__HRX_DEVICE int __any_sync(unsigned int mask, int pred) { return __ballot_sync(mask, pred) != 0u; }
__HRX_DEVICE int __all_sync(unsigned int mask, int pred) {
    return __ballot_sync(mask, pred) == (mask & __activemask());
}

// Reductions over the lanes in `mask` (each must call it with the same mask): with the
// full mask a butterfly of xor shuffles, else one v_readlane per lane of the mask.
#define __HRX_REDUCE(name, T, identity, op) \
    __HRX_DEVICE T name(unsigned int mask, T v) { \
        if (mask == 0xffffffffu) { \
            for (int o = 16; o > 0; o >>= 1) { const T a = v, b = __shfl_xor_sync(mask, v, o); v = (op); } \
            return v; \
        } \
        T acc = identity; \
        for (unsigned int m = mask; m != 0u; m &= m - 1u) { \
            const T a = acc, b = (T)__builtin_amdgcn_readlane((int)v, __builtin_ctz(m)); \
            acc = (op); \
        } \
        return acc; \
    }
__HRX_REDUCE(__reduce_add_sync, unsigned int, 0u, a + b)
__HRX_REDUCE(__reduce_add_sync, int, 0, (int)((unsigned int)a + (unsigned int)b))
__HRX_REDUCE(__reduce_min_sync, unsigned int, 0xffffffffu, a < b ? a : b)
__HRX_REDUCE(__reduce_min_sync, int, 0x7fffffff, a < b ? a : b)
__HRX_REDUCE(__reduce_max_sync, unsigned int, 0u, a > b ? a : b)
__HRX_REDUCE(__reduce_max_sync, int, (-0x7fffffff - 1), a > b ? a : b)
__HRX_REDUCE(__reduce_and_sync, unsigned int, 0xffffffffu, a & b)
__HRX_REDUCE(__reduce_or_sync, unsigned int, 0u, a | b)
__HRX_REDUCE(__reduce_xor_sync, unsigned int, 0u, a ^ b)

// -- atomics (relaxed, as CUDA's; device scope, _block: workgroup, _system: system) -----
#define __HRX_ATOMIC_SCOPES(name, expr) \
    template <typename T> __HRX_DEVICE T name(T* p, T v) { const int scope = __HIP_MEMORY_SCOPE_AGENT; return expr; } \
    template <typename T> __HRX_DEVICE T name##_block(T* p, T v) { const int scope = __HIP_MEMORY_SCOPE_WORKGROUP; return expr; } \
    template <typename T> __HRX_DEVICE T name##_system(T* p, T v) { const int scope = __HIP_MEMORY_SCOPE_SYSTEM; return expr; }
// __hip_atomic_* take the scope as a constant expression: dispatch on it.
#define __HRX_SCOPED(builtin, p, v) \
    (scope == __HIP_MEMORY_SCOPE_WORKGROUP ? builtin(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP) \
     : scope == __HIP_MEMORY_SCOPE_SYSTEM  ? builtin(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM) \
                                           : builtin(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT))
__HRX_ATOMIC_SCOPES(atomicAdd, __HRX_SCOPED(__hip_atomic_fetch_add, p, v))
__HRX_ATOMIC_SCOPES(atomicSub, __HRX_SCOPED(__hip_atomic_fetch_add, p, (T)(0 - v)))
__HRX_ATOMIC_SCOPES(atomicExch, __HRX_SCOPED(__hip_atomic_exchange, p, v))
__HRX_ATOMIC_SCOPES(atomicMin, __HRX_SCOPED(__hip_atomic_fetch_min, p, v))
__HRX_ATOMIC_SCOPES(atomicMax, __HRX_SCOPED(__hip_atomic_fetch_max, p, v))
__HRX_ATOMIC_SCOPES(atomicAnd, __HRX_SCOPED(__hip_atomic_fetch_and, p, v))
__HRX_ATOMIC_SCOPES(atomicOr, __HRX_SCOPED(__hip_atomic_fetch_or, p, v))
__HRX_ATOMIC_SCOPES(atomicXor, __HRX_SCOPED(__hip_atomic_fetch_xor, p, v))

template <typename T>
__HRX_DEVICE T __hrx_cas(T* p, T compare, T v, int scope) {
    if (scope == __HIP_MEMORY_SCOPE_WORKGROUP)
        __hip_atomic_compare_exchange_strong(p, &compare, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
    else if (scope == __HIP_MEMORY_SCOPE_SYSTEM)
        __hip_atomic_compare_exchange_strong(p, &compare, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    else
        __hip_atomic_compare_exchange_strong(p, &compare, v, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    return compare;  // the old value: written back by a failed exchange, equal on success
}
template <typename T> __HRX_DEVICE T atomicCAS(T* p, T compare, T v) { return __hrx_cas(p, compare, v, __HIP_MEMORY_SCOPE_AGENT); }
template <typename T> __HRX_DEVICE T atomicCAS_block(T* p, T compare, T v) { return __hrx_cas(p, compare, v, __HIP_MEMORY_SCOPE_WORKGROUP); }
template <typename T> __HRX_DEVICE T atomicCAS_system(T* p, T compare, T v) { return __hrx_cas(p, compare, v, __HIP_MEMORY_SCOPE_SYSTEM); }

// atomicInc: old >= limit ? 0 : old + 1; atomicDec: (old == 0 || old > limit) ? limit : old - 1
__HRX_DEVICE unsigned int atomicInc(unsigned int* p, unsigned int limit) {
    return __builtin_amdgcn_atomic_inc32(p, limit, __ATOMIC_RELAXED, "agent");
}
__HRX_DEVICE unsigned int atomicDec(unsigned int* p, unsigned int limit) {
    return __builtin_amdgcn_atomic_dec32(p, limit, __ATOMIC_RELAXED, "agent");
}

// -- loads with cache hints ---------------------------------------------------------------
template <typename T> __HRX_DEVICE T __ldg(const T* p) { return *p; }
template <typename T> __HRX_DEVICE T __ldcg(const T* p) { return *p; }
template <typename T> __HRX_DEVICE T __ldca(const T* p) { return *p; }
template <typename T> __HRX_DEVICE T __ldlu(const T* p) { return *p; }
template <typename T> __HRX_DEVICE T __ldcv(const T* p) { return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
// streaming (evict-first) loads: nontemporal, 32-bit words at a time
template <typename T>
__HRX_DEVICE T __ldcs(const T* p) {
    static_assert(sizeof(T) % 4 == 0 && alignof(T) >= 4, "__ldcs loads whole 32-bit words");
    T out;
    unsigned int* d = reinterpret_cast<unsigned int*>(&out);
    const unsigned int* s = reinterpret_cast<const unsigned int*>(p);
    for (unsigned int i = 0; i < sizeof(T) / 4; ++i) d[i] = __builtin_nontemporal_load(s + i);
    return out;
}

// -- bit casts and integer intrinsics -----------------------------------------------------
__HRX_DEVICE unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__HRX_DEVICE float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
__HRX_DEVICE int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
__HRX_DEVICE float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__HRX_DEVICE long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
__HRX_DEVICE double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }

__HRX_DEVICE int __popc(unsigned int x) { return __builtin_popcount(x); }
__HRX_DEVICE int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__HRX_DEVICE int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
__HRX_DEVICE int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
__HRX_DEVICE int __ffs(int x) { return __builtin_ffs(x); }
__HRX_DEVICE int __ffsll(long long x) { return __builtin_ffsll(x); }
__HRX_DEVICE unsigned int __brev(unsigned int x) { return __builtin_bitreverse32(x); }
__HRX_DEVICE unsigned long long __brevll(unsigned long long x) { return __builtin_bitreverse64(x); }
__HRX_DEVICE int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
__HRX_DEVICE unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a * b) >> 32); }
__HRX_DEVICE long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
__HRX_DEVICE unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}

// -- IEEE operations that are never contracted into FMAs ----------------------------------
// (the compiler runs with -ffp-contract=fast-honor-pragmas, or off for --fmad=false)
#define __HRX_EXACT(T, name, expr) \
    __HRX_DEVICE T name(T a, T b) { _Pragma("clang fp contract(off)") return expr; }
__HRX_EXACT(float, __fadd_rn, a + b)
__HRX_EXACT(float, __fsub_rn, a - b)
__HRX_EXACT(float, __fmul_rn, a * b)
__HRX_EXACT(float, __fdiv_rn, a / b)  // correctly rounded: HIP's default f32 division
__HRX_EXACT(double, __dadd_rn, a + b)
__HRX_EXACT(double, __dsub_rn, a - b)
__HRX_EXACT(double, __dmul_rn, a * b)
__HRX_EXACT(double, __ddiv_rn, a / b)
__HRX_DEVICE float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__HRX_DEVICE double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }
__HRX_DEVICE float __fsqrt_rn(float x) { return __builtin_sqrtf(x); }
__HRX_DEVICE float __frcp_rn(float x) { return __fdiv_rn(1.0f, x); }

// -- conversions (out-of-range values are undefined, as in C) ------------------------------
__HRX_DEVICE int __float2int_rn(float x) { return (int)__builtin_rintf(x); }
__HRX_DEVICE int __float2int_rz(float x) { return (int)x; }
__HRX_DEVICE unsigned int __float2uint_rn(float x) { return (unsigned int)__builtin_rintf(x); }
__HRX_DEVICE unsigned int __float2uint_rz(float x) { return (unsigned int)x; }
__HRX_DEVICE float __int2float_rn(int x) { return (float)x; }
__HRX_DEVICE float __uint2float_rn(unsigned int x) { return (float)x; }

// -- math: builtins the AMDGPU backend lowers to instructions -----------------------------
__HRX_DEVICE float fabsf(float x) { return __builtin_fabsf(x); }
__HRX_DEVICE float floorf(float x) { return __builtin_floorf(x); }
__HRX_DEVICE float ceilf(float x) { return __builtin_ceilf(x); }
__HRX_DEVICE float truncf(float x) { return __builtin_truncf(x); }
__HRX_DEVICE float rintf(float x) { return __builtin_rintf(x); }
__HRX_DEVICE float nearbyintf(float x) { return __builtin_nearbyintf(x); }
__HRX_DEVICE float roundf(float x) { return __builtin_roundf(x); }
__HRX_DEVICE float fminf(float a, float b) { return __builtin_fminf(a, b); }
__HRX_DEVICE float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
__HRX_DEVICE float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
__HRX_DEVICE float copysignf(float a, float b) { return __builtin_copysignf(a, b); }
__HRX_DEVICE float sqrtf(float x) { return __builtin_sqrtf(x); }
__HRX_DEVICE float ldexpf(float x, int e) { return __builtin_ldexpf(x, e); }
__HRX_DEVICE float expf(float x) { return __builtin_expf(x); }
__HRX_DEVICE float exp2f(float x) { return __builtin_exp2f(x); }
__HRX_DEVICE float exp10f(float x) { return __builtin_exp10f(x); }
__HRX_DEVICE float logf(float x) { return __builtin_logf(x); }
__HRX_DEVICE float log2f(float x) { return __builtin_log2f(x); }
__HRX_DEVICE float log10f(float x) { return __builtin_log10f(x); }
__HRX_DEVICE float rsqrtf(float x) { return __builtin_amdgcn_rsqf(x); }
__HRX_DEVICE float __expf(float x) { return __builtin_amdgcn_exp2f(x * 1.4426950408889634f); }
__HRX_DEVICE float __logf(float x) { return __builtin_amdgcn_logf(x) * 0.6931471805599453f; }
__HRX_DEVICE float __saturatef(float x) { return __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f); }

// tanhf after Cephes (S. Moshier) tanhf.c: for |x| < 0.625 the odd minimax polynomial
// x + x^3 P(x^2), else 1 - 2 / (exp(2|x|) + 1) with the sign of x (exp overflows to
// infinity for large |x|, giving exactly +-1).
__HRX_DEVICE float tanhf(float x) {
    const float z = __builtin_fabsf(x);
    if (z >= 0.625f) {
        const float r = 1.0f - 2.0f / (__builtin_expf(z + z) + 1.0f);
        return __builtin_copysignf(r, x);
    }
    const float s = x * x;
    const float p = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s
                      + 1.33314422036e-1f) * s - 3.33332819422e-1f);
    return x + x * s * p;
}

__HRX_DEVICE double fabs(double x) { return __builtin_fabs(x); }
__HRX_DEVICE double floor(double x) { return __builtin_floor(x); }
__HRX_DEVICE double ceil(double x) { return __builtin_ceil(x); }
__HRX_DEVICE double trunc(double x) { return __builtin_trunc(x); }
__HRX_DEVICE double rint(double x) { return __builtin_rint(x); }
__HRX_DEVICE double sqrt(double x) { return __builtin_sqrt(x); }
__HRX_DEVICE double fma(double a, double b, double c) { return __builtin_fma(a, b, c); }
__HRX_DEVICE double fmin(double a, double b) { return __builtin_fmin(a, b); }
__HRX_DEVICE double fmax(double a, double b) { return __builtin_fmax(a, b); }

#define __HRX_MINMAX(T) \
    __HRX_DEVICE T min(T a, T b) { return a < b ? a : b; } \
    __HRX_DEVICE T max(T a, T b) { return a > b ? a : b; }
__HRX_MINMAX(int)
__HRX_MINMAX(unsigned int)
__HRX_MINMAX(long long)
__HRX_MINMAX(unsigned long long)
__HRX_DEVICE float min(float a, float b) { return __builtin_fminf(a, b); }
__HRX_DEVICE float max(float a, float b) { return __builtin_fmaxf(a, b); }
__HRX_DEVICE double min(double a, double b) { return __builtin_fmin(a, b); }
__HRX_DEVICE double max(double a, double b) { return __builtin_fmax(a, b); }

// -- clocks ---------------------------------------------------------------------------------
__HRX_DEVICE long long clock64() { return (long long)__builtin_readcyclecounter(); }
__HRX_DEVICE int clock() { return (int)__builtin_readcyclecounter(); }
// s_sendmsg_rtn_b64 MSG_RTN_GET_REALTIME (gfx11+): the 100 MHz constant clock
__HRX_DEVICE unsigned long long wall_clock64() { return __builtin_amdgcn_s_sendmsg_rtnl(0x83); }

// -- BF16 (cuda_bf16.h names) -----------------------------------------------------------------
__HRX_DEVICE constexpr unsigned short __hrx_f32_to_bf16_rn(float f) {
    unsigned int u = __builtin_bit_cast(unsigned int, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN stays a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return (unsigned short)(u >> 16);
}

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __device__ __nv_bfloat16(float f) : __x(__hrx_f32_to_bf16_rn(f)) {}
    __device__ operator float() const { return __builtin_bit_cast(float, (unsigned int)__x << 16); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

__HRX_DEVICE __nv_bfloat16 __ushort_as_bfloat16(unsigned short h) { __nv_bfloat16 b; b.__x = h; return b; }
__HRX_DEVICE unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
__HRX_DEVICE float __bfloat162float(__nv_bfloat16 b) { return __builtin_bit_cast(float, (unsigned int)b.__x << 16); }
__HRX_DEVICE __nv_bfloat16 __float2bfloat16_rn(float f) { return __ushort_as_bfloat16(__hrx_f32_to_bf16_rn(f)); }
__HRX_DEVICE __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
__HRX_DEVICE __nv_bfloat16 __float2bfloat16_rz(float f) {
    const unsigned int u = __builtin_bit_cast(unsigned int, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x40u));
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}
__HRX_DEVICE __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { __nv_bfloat162 v; v.x = a; v.y = b; return v; }
__HRX_DEVICE __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __halves2bfloat162(__float2bfloat16_rn(a), __float2bfloat16_rn(b));
}
__HRX_DEVICE __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
__HRX_DEVICE float2 __bfloat1622float2(__nv_bfloat162 v) { return make_float2(__bfloat162float(v.x), __bfloat162float(v.y)); }
__HRX_DEVICE float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
__HRX_DEVICE float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
__HRX_DEVICE __nv_bfloat16 __low2bfloat16(__nv_bfloat162 v) { return v.x; }
__HRX_DEVICE __nv_bfloat16 __high2bfloat16(__nv_bfloat162 v) { return v.y; }
#define __HRX_BF16_OP(name, expr) \
    __HRX_DEVICE __nv_bfloat16 name(__nv_bfloat16 x, __nv_bfloat16 y) { \
        const float a = __bfloat162float(x), b = __bfloat162float(y); \
        return __float2bfloat16_rn(expr); \
    }
__HRX_BF16_OP(__hadd, __fadd_rn(a, b))
__HRX_BF16_OP(__hsub, __fsub_rn(a, b))
__HRX_BF16_OP(__hmul, __fmul_rn(a, b))
__HRX_BF16_OP(__hdiv, __fdiv_rn(a, b))
__HRX_BF16_OP(__hmax, __builtin_fmaxf(a, b))
__HRX_BF16_OP(__hmin, __builtin_fminf(a, b))
__HRX_DEVICE __nv_bfloat16 __hneg(__nv_bfloat16 x) { return __ushort_as_bfloat16((unsigned short)(x.__x ^ 0x8000u)); }
