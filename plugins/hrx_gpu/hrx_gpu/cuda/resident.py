"""The GPU participant of a resident GPU-NPU exchange as a persistent kernel.

:func:`participant_source` returns CUDA-dialect C++ for one thread block that runs
the protocol's GPU role (``hrx_core.resident.protocol.PROTOCOL_C``): thread 0 waits
for RUN, then decides each unit of work (a request to forward, a returned payload to
respond with); the whole block runs the user's stage on it; thread 0 publishes it.
It is launched like any dispatch (grid 1) on a queue the session reserves.

Memory order, at system scope (the GPU and the NPU/host share coherent host memory):

* cuda (NVRTC): ``ld.acquire.sys.global.b64`` / ``st.release.sys.global.b64``, and
  ``__threadfence_system()`` by every thread after its share of a stage and before
  the block barrier that precedes thread 0's release store;
* gfx1151 (clang, HIP mode; the ``amdgpu`` engine reads the same source): GCC
  ``__atomic`` acquire/release, whose default scope on amdgcn is the system.

Never hangs: every wait reads the command word (ABORT ends it at the next poll) and
is bounded by the control block's deadlines, measured on the GPU's own clock
(``%globaltimer`` on NVIDIA, ``wall_clock64`` at 100 MHz on gfx1151); idle polls back
off with ``__nanosleep`` / ``s_sleep``.

The stages are device functions the caller supplies::

    __device__ void hrx_resident_pre(const unsigned char *in, long long in_bytes, unsigned char *out,
                                     long long out_bytes, int tid, int nthreads);   /* request -> forward */
    __device__ void hrx_resident_post(const unsigned char *in, long long in_bytes, unsigned char *out,
                                      long long out_bytes, int tid, int nthreads);  /* backward -> response */
"""

from __future__ import annotations

from hrx_core.errors import InvalidArgument
from hrx_core.resident.protocol import protocol_c

ENTRY = "hrx_resident_gpu"

PRIMITIVES = r"""
typedef long long hrx_i64;
typedef unsigned char hrx_u8;
#if defined(__HIP__)
/* gfx1151: the prelude provides wall_clock64 (100 MHz) and the fences */
#define HRX_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define HRX_STORE_RELEASE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define HRX_NOW_NS() ((hrx_i64)wall_clock64() * 10)
#define HRX_PAUSE(n) do { if ((n) > 64) __builtin_amdgcn_s_sleep(8); } while (0)
#else
__device__ __forceinline__ hrx_i64 hrx_ld_acquire_sys(const hrx_i64 *p) {
    hrx_i64 v;
    asm volatile("ld.acquire.sys.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void hrx_st_release_sys(hrx_i64 *p, hrx_i64 v) {
    asm volatile("st.release.sys.global.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ hrx_i64 hrx_globaltimer(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return (hrx_i64)t;
}
#define HRX_LOAD_ACQUIRE(p) hrx_ld_acquire_sys(p)
#define HRX_STORE_RELEASE(p, v) hrx_st_release_sys((p), (v))
#define HRX_NOW_NS() hrx_globaltimer()
#define HRX_PAUSE(n) do { if ((n) > 64) __nanosleep(500); } while (0)
#endif
#define HRX_RS_FN __device__ __forceinline__
"""

KERNEL = r"""
extern "C" __global__ void __launch_bounds__(1024) hrx_resident_gpu(hrx_u8 *base) {
    __shared__ int go;
    __shared__ hrx_i64 op;
    __shared__ hrx_u8 *in_slot, *out_slot;
    __shared__ hrx_i64 sizes[4];
    hrx_rs s;   /* thread 0's */
    if (threadIdx.x == 0) {
        go = hrx_rs_wait_run(&s, base, HRX_RS_W_GPU_STATE);
        for (int r = 0; r < 4; ++r) sizes[r] = go ? s.bytes[r] : 0;
    }
    __syncthreads();
    if (!go) return;
    for (;;) {
        if (threadIdx.x == 0) {
            hrx_rs_work w = hrx_rs_gpu_poll(&s);
            op = w.op; in_slot = w.in; out_slot = w.out;
        }
        __syncthreads();
        const hrx_i64 mine = op;
        if (mine == HRX_RS_EXIT) return;
        if (mine == HRX_RS_PRE) hrx_resident_pre(in_slot, sizes[0], out_slot, sizes[1], threadIdx.x, blockDim.x);
        else if (mine == HRX_RS_POST) hrx_resident_post(in_slot, sizes[2], out_slot, sizes[3], threadIdx.x, blockDim.x);
        if (mine != HRX_RS_IDLE) __threadfence_system();   /* this thread's share of the slot, before the release */
        __syncthreads();
        if (threadIdx.x == 0 && mine != HRX_RS_IDLE) {
            hrx_rs_work w = {mine, in_slot, out_slot};
            hrx_rs_gpu_commit(&s, w);
        }
        __syncthreads();   /* op is rewritten only after every thread read it */
    }
}
"""


def participant_source(stages: str) -> str:
    """CUDA-dialect source of the persistent GPU participant around ``stages`` (device
    functions ``hrx_resident_pre`` and ``hrx_resident_post``); entry :data:`ENTRY`."""
    if not isinstance(stages, str) or "hrx_resident_pre" not in stages or "hrx_resident_post" not in stages:
        raise InvalidArgument("stages: expected CUDA source defining hrx_resident_pre and hrx_resident_post")
    return PRIMITIVES + protocol_c() + stages + KERNEL


__all__ = ["ENTRY", "participant_source"]
