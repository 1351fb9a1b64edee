"""Where the host time of one ``Runtime.submit`` goes (cProfile), on any engine.

    python bench/tools/profile_runtime.py [--engine cuda] [--nodes 100] [--calls 2000] [--observe false|true|exact]

Submits the replay benchmark's graph (bench/runtime.py: one compute region of
``--nodes`` dispatches) ``--calls`` times, each after the lane went idle, and prints
the host time per submission, the Python calls per submission and the cProfile table
by own time. A diagnostic for issue 15 (runtime resubmission): it writes no results file.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--observe", choices=["false", "true", "exact"], default="false")
    args = ap.parse_args()
    import runtime as bench_runtime

    import hrx_core as hrx

    observe = {"false": False, "true": True, "exact": "exact"}[args.observe]
    dev = hrx.device(args.engine)
    rt, g, _ = bench_runtime._replay_setup(dev, observe, args.nodes)
    lane = rt.lane("compute")
    for _ in range(200):
        lane.stream.synchronize()
        rt.submit(g)
    total = 0.0
    for _ in range(args.calls):
        lane.stream.synchronize()
        t = time.perf_counter()
        rt.submit(g)
        total += time.perf_counter() - t
    print(f"{dev.info.engine}: Runtime.submit of a {args.nodes}-node graph, observe={observe}: "
          f"{total / args.calls * 1e6:.2f} us per submission (lane idle before each)")
    prof = cProfile.Profile()
    for _ in range(args.calls):
        lane.stream.synchronize()
        prof.enable()
        rt.submit(g)
        prof.disable()
    stats = pstats.Stats(prof)
    print(f"{stats.total_calls / args.calls:.1f} Python calls per submission")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(40)
    print(out.getvalue())
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
