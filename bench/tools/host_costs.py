"""What basic host operations cost on this machine (us): a calibration for comparing
host-bound figures between machines -- the clock the benchmarks read, a lock, a Python
call, an object with a __dict__ -- and, with ``--engine``, the median host time of a
runtime resubmission (bench/runtime.py's replay graph, the lane idle before each).
(At 6e3a3f2 it also timed one with ``Runtime._inherits_previous`` patched out; the
compiled resubmission has answered that check's common cases in C since, so that
comparison would measure nothing and was dropped.) A diagnostic for issue 15: it
writes no results file.

    python bench/tools/host_costs.py [--engine cuda]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call(stmt, number: int = 200000, repeat: int = 5, **env) -> float:
    return min(timeit.repeat(stmt, globals=env, number=number, repeat=repeat)) / number * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()

    class Plain:
        def __init__(self, a, b):
            self.a = a
            self.b = b

    lock = threading.Lock()
    print(f"time.perf_counter()        {per_call('pc()', pc=time.perf_counter):.3f} us")
    print(f"time.monotonic()           {per_call('mono()', mono=time.monotonic):.3f} us")
    print(f"lock acquire + release     {per_call('a(); r()', a=lock.acquire, r=lock.release):.3f} us")
    print(f"empty Python call          {per_call('f()', f=lambda: None):.3f} us")
    print(f"object with a __dict__     {per_call('P(1, 2)', P=Plain):.3f} us")
    if args.engine is None:
        return 0
    import hrx_core as hrx

    import runtime as bench_runtime

    dev = hrx.device(args.engine)
    rt, g, region = bench_runtime._replay_setup(dev, False, 100, "lazy")
    s = rt.lane("compute").stream

    def median_submit() -> float:
        ts = []
        for _ in range(args.calls):
            s.synchronize()
            t = time.perf_counter()
            rt.submit(g)
            ts.append(time.perf_counter() - t)
        rt.synchronize()
        return statistics.median(ts) * 1e6

    for _ in range(300):
        rt.submit(g)
    rt.synchronize()
    print(f"submit median              {median_submit():.2f} us")
    fast = g._fast_submit
    print(f"compiled submission hits {fast.hits}, misses {fast.misses}")
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
