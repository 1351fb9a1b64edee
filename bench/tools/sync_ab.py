"""Runtime.synchronize's batch settle against a wait a submission, in one process.

    python bench/tools/sync_ab.py [--engine cuda] [--rounds 21] [--calls 200]

bench/runtime.py's replay graph (one compute region of 100 dispatches, lazy signals)
submitted ``--calls`` times a round, the lane idle before each (as that benchmark
does); each round ends with ``Runtime.synchronize()`` (timed), alternating between the
batch settle (one wait a queue and one ``_settle_finished``: what synchronize does) and
a wait a submission (``Runtime._settle_all`` switched off: what it did before). Prints
the medians. A diagnostic for issue 15: it writes no results file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    import hrx_core as hrx
    import runtime as bench_runtime

    dev = hrx.device(args.engine) if args.engine else hrx.device()
    rt, g, _ = bench_runtime._replay_setup(dev, False, 100, "lazy")
    s = rt.lane("compute").stream
    times: dict[str, list[float]] = {"batch": [], "each": []}
    pending: list[int] = []
    for i in range(2 * args.rounds + 2):
        variant = "batch" if i % 2 == 0 else "each"
        if variant == "each":
            rt._settle_all = lambda pending, deadline: None  # type: ignore[method-assign]
        for _ in range(args.calls):
            s.synchronize()
            rt.submit(g)
        s.synchronize()
        pending.append(len(rt._pending))
        t = time.perf_counter()
        rt.synchronize()
        dt = (time.perf_counter() - t) * 1e6
        if variant == "each":
            del rt._settle_all
        if i >= 2:  # (the first two rounds warm up)
            times[variant].append(dt)
    print(f"{dev.info.engine}: Runtime.synchronize() after {args.calls} submissions ({max(pending)} pending at most), "
          f"medians of {args.rounds} rounds each: batch {statistics.median(times['batch']):.1f} us, "
          f"a wait each {statistics.median(times['each']):.1f} us")
    g.close()
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
