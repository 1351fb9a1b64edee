"""Does a persistent kernel with grid barriers beat a graph of dependent kernels? (cuda)

    python bench/tools/barrier_probe.py [--phases 60] [--mib 1,4,14] [--blocks 1,2,4]

The question behind issue 18's decode goal: GPT-2's decode step is ~60 dependent
kernels a token, each streaming 1-14 MiB of weights. Here every phase streams its own
``--mib`` MiB slice of a weight array (16-byte streaming loads, a grid-stride loop);
the phases run (a) as a CUDA graph of ``--phases`` dependent kernels and (b) as one
persistent kernel whose blocks meet at a grid barrier (an atomic counter and a
generation word) after each phase, (c) the same with the next phase's first lines
prefetched into L2 before the barrier, (d) the same with all of the next phase
prefetched, and three graphs that hand phase p + 1's weights to L2 while phase p runs:
(e) each kernel prefetches the next phase's at its start, (f) at its end, (g) a small
kernel on a side branch that starts with phase p does. Grids of ``--blocks`` blocks of 256 threads per
SM (all resident, so the barrier cannot deadlock). Prints the GPU time per phase (CUDA
events, best of 5 rounds of 10 runs) beside the phase's bandwidth floor at 3.9 TB/s.
Needs CuPy (NVRTC). A diagnostic: it writes no results file.

On the H200 (2026-12-01): the graph chain won every configuration -- 1 MiB phases 1.5-1.9
us a phase against 2.4-3.2 us persistent; 4 MiB 2.6-4.7 against 3.4-5.4; 14 MiB 5.7-13
against 6.8-13.8 -- so the decode step keeps one kernel per stage. Variants (d)-(g) on
an H100 (2026-12-07, 60 phases, us a phase; graph / next-at-start / next-at-end /
side-prefetch / persistent / persistent+prefetch / persistent+prefetch-all): 1 MiB,
1 block/SM 1.88 / 1.80 / 1.72 / 1.66 / 2.92 / 2.52 / 2.54; 1 MiB, 2 blocks 1.61 / 1.59 /
1.54 / 1.61 / 2.85 / 2.71 / 2.74; 4 MiB, 1 block 4.75 / 3.81 / 3.78 / 3.91 / 5.62 / 5.03
/ 4.12; 4 MiB, 2 blocks 3.40 / 3.19 / 3.07 / 3.38 / 4.37 / 3.84 / 3.88. The prefetch
shortens these synthetic phases (up to 20% at 4 MiB, 1 block an SM), but the same
prefetch in GPT-2's fused GEMVs made decode 9-12% slower on that H100 (the option was
removed; docs/performance.md, twenty-sixth session).
"""

from __future__ import annotations

import argparse

import numpy as np

SOURCE = r'''
extern "C" __device__ __forceinline__ float sum4(uint4 v) {
    return __int_as_float(v.x) + __int_as_float(v.y) + __int_as_float(v.z) + __int_as_float(v.w);
}
extern "C" __global__ void __launch_bounds__(256) phase(const uint4* __restrict__ w, float* out, unsigned long long units) {
    float acc = 0.f;
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < units; i += gridDim.x * 256ull) acc += sum4(__ldcs(w + i));
    if (acc == 1234.5f) out[blockIdx.x] = acc;  // keeps the loads
}
// every 128-byte line of [p, p + units * 16) handed to L2 as a prefetch, spread over the grid
__device__ __forceinline__ void prefetch_all(const uint4* p, unsigned long long units) {
    const char* c = (const char*)p;
    const unsigned long long bytes = units * 16ull;
    for (unsigned long long off = (blockIdx.x * 256ull + threadIdx.x) * 128ull; off < bytes; off += gridDim.x * 256ull * 128ull)
        asm volatile("prefetch.global.L2::evict_last [%0];" :: "l"(c + off));
}
// only the prefetch: a side branch of the graph beside the phase before the one it feeds
extern "C" __global__ void __launch_bounds__(256) prefetch_only(const uint4* next, unsigned long long units) {
    prefetch_all(next, units);
}
// a phase that hands the next phase's weights to L2: before its own loop (when = 0) or after it (1)
extern "C" __global__ void __launch_bounds__(256) phase_next(const uint4* __restrict__ w, float* out, unsigned long long units,
                                                             const uint4* next, int when) {
    if (next && when == 0) prefetch_all(next, units);
    float acc = 0.f;
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < units; i += gridDim.x * 256ull) acc += sum4(__ldcs(w + i));
    if (acc == 1234.5f) out[blockIdx.x] = acc;
    if (next && when == 1) prefetch_all(next, units);
}
__device__ __forceinline__ void grid_sync(unsigned int* count, volatile unsigned int* gen, unsigned int nblocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int g = *gen;
        __threadfence();
        if (atomicAdd(count, 1u) == nblocks - 1u) { *count = 0u; __threadfence(); atomicAdd((unsigned int*)gen, 1u); }
        else { while (*gen == g) { __nanosleep(32); } }
        __threadfence();
    }
    __syncthreads();
}
extern "C" __global__ void __launch_bounds__(256) persistent(const uint4* __restrict__ w, float* out, unsigned long long units,
                                                              unsigned int phases, unsigned int* bar, int prefetch) {
    for (unsigned int p = 0; p < phases; p++) {
        const uint4* wp = w + (unsigned long long)p * units;
        float acc = 0.f;
        for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < units; i += gridDim.x * 256ull) acc += sum4(__ldcs(wp + i));
        if (acc == 1234.5f) out[blockIdx.x] = acc;
        if (prefetch == 2 && p + 1 < phases) prefetch_all(wp + units, units);  // all of the next phase
        if (prefetch == 1 && p + 1 < phases) {  // the next phase's first lines into L2, before the barrier
            const char* nx = (const char*)(wp + units);
            const unsigned long long first = (blockIdx.x * 256ull + threadIdx.x) * 16ull;
            for (int k = 0; k < 4; k++) {
                const unsigned long long off = first + k * gridDim.x * 256ull * 16ull;
                if (off < units * 16ull) asm volatile("prefetch.global.L2 [%0];" :: "l"(nx + off));
            }
        }
        grid_sync(bar, bar + 1, gridDim.x);
    }
}
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", type=int, default=60)
    ap.add_argument("--mib", default="1,4,14", help="MiB streamed a phase, comma-separated (default: %(default)s)")
    ap.add_argument("--blocks", default="1,2,4", help="blocks of 256 threads per SM, comma-separated (default: %(default)s)")
    args = ap.parse_args()
    import cupy as cp

    mod = cp.RawModule(code=SOURCE, options=("--std=c++17",))
    phase_k, pers_k = mod.get_function("phase"), mod.get_function("persistent")
    next_k = mod.get_function("phase_next")
    pf_k = mod.get_function("prefetch_only")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    phases = args.phases
    for mib in (int(x) for x in args.mib.split(",")):
        units = mib * (1 << 20) // 16
        w = cp.ones(phases * units * 4, dtype=cp.uint32)
        out = cp.zeros(4096, dtype=cp.float32)
        bar = cp.zeros(2, dtype=cp.uint32)
        for per_sm in (int(x) for x in args.blocks.split(",")):
            grid = sms * per_sm
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                s.begin_capture()
                for p in range(phases):
                    phase_k((grid,), (256,), (w[p * units * 4:], out, np.uint64(units)))
                g = s.end_capture()
            chained = []
            for when in (0, 1):  # the next phase's weights into L2 at the start / at the end of each kernel
                with s:
                    s.begin_capture()
                    for p in range(phases):
                        nxt = w[(p + 1) * units * 4:] if p + 1 < phases else None
                        next_k((grid,), (256,), (w[p * units * 4:], out, np.uint64(units),
                                                 nxt if nxt is not None else np.uint64(0), np.int32(when)))
                    chained.append(s.end_capture())
            side = None
            try:  # phase p + 1's weights prefetched by a side branch that starts with phase p
                s2 = cp.cuda.Stream(non_blocking=True)
                with s:
                    s.begin_capture()
                    started = cp.cuda.Event(disable_timing=True)
                    started.record(s)
                    for p in range(phases):
                        if p + 1 < phases:
                            s2.wait_event(started)
                            pf_k((max(1, grid // 8),), (256,), (w[(p + 1) * units * 4:], np.uint64(units)), stream=s2)
                        phase_k((grid,), (256,), (w[p * units * 4:], out, np.uint64(units)), stream=s)
                        started = cp.cuda.Event(disable_timing=True)
                        started.record(s)
                    done = cp.cuda.Event(disable_timing=True)
                    done.record(s2)
                    s.wait_event(done)
                    side = s.end_capture()
            except Exception as e:  # noqa: BLE001 -- a diagnostic: report and go on
                print(f"side-branch variant not built: {e!r}", flush=True)

            def persistent(pf: int, grid: int = grid, s: cp.cuda.Stream = s) -> None:
                pers_k((grid,), (256,), (w, out, np.uint64(units), np.uint32(phases), bar, np.int32(pf)), stream=s)

            ways = (("graph", lambda g=g, s=s: g.launch(s)),
                    ("graph+next-at-start", lambda g=chained[0], s=s: g.launch(s)),
                    ("graph+next-at-end", lambda g=chained[1], s=s: g.launch(s)),
                    *((("graph+side-prefetch", lambda g=side, s=s: g.launch(s)),) if side is not None else ()),
                    ("persistent", lambda: persistent(0)),
                    ("persistent+prefetch", lambda: persistent(1)), ("persistent+prefetch-all", lambda: persistent(2)))
            per_phase = {}
            for name, fn in ways:
                fn()
                s.synchronize()
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                best = float("inf")
                for _ in range(5):
                    e0.record(s)
                    for _ in range(10):
                        fn()
                    e1.record(s)
                    e1.synchronize()
                    best = min(best, cp.cuda.get_elapsed_time(e0, e1) / 10 * 1e3)
                per_phase[name] = best / phases
            floor = mib * (1 << 20) / 3.9e12 * 1e6
            print(f"{mib:3d} MiB a phase, {per_sm} blocks/SM: us a phase " + ", ".join(f"{k} {v:.2f}" for k, v in per_phase.items())
                  + f" (floor {floor:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
