"""A/B of the timeline spin on gpu_npu_parallel: the compiled C spin against the sleep(0) fallback, alternating.

    python bench/tools/spin_ab.py [balanced M, 384] [gpu engine, cuda]

Three rounds of bench/npu.py's two parallel figures (M = the example's default, and
the given M for a balanced NPU branch; GPU engine cuda unless named), each with the
compiled spin of hrx_core.timeouts.spin_u64 and with it switched off (the Python
fallback, which sleeps 0 between polls where other threads run: the wait of before
the spin). Prints sequential and parallel medians and the ratio to the ideal speedup.
A diagnostic for the spin's effect on threads beside a wait: it writes no results file.
"""
import sys

import hrx_core.timeouts as t
from hrx_npu.examples import gpu_npu_parallel as p


def main() -> int:
    compiled = t._compiled_spin()
    n, m, pairs = p.DEFAULTS[0], p.DEFAULTS[1], 21
    for rnd in range(3):
        for name, fn in (("c-spin", compiled), ("sleep0", False)):
            t._spin_fn = fn
            for mm, label in ((m, ""), (int(sys.argv[1]) if len(sys.argv) > 1 else 384, ".balanced")):
                r = p.run(n, mm, pairs, None, gpu_engine=sys.argv[2] if len(sys.argv) > 2 else "cuda", columns=1)
                ideal = (r["gpu_branch_ms"] + r["npu_branch_ms"]) / max(r["gpu_branch_ms"], r["npu_branch_ms"])
                print(f"round {rnd} {name:7s}{label:10s} seq {r['sequential_ms']:.3f} par {r['parallel_ms']:.3f} "
                      f"gpu {r['gpu_branch_ms']:.3f} npu {r['npu_branch_ms']:.3f} ratio {r['sequential_ms'] / r['parallel_ms'] / ideal:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
