"""Where ``Runtime.submit``'s host time goes beside the replay it makes (any engine).

    python bench/tools/submit_probe.py [--engine cuda] [--nodes 100] [--calls 300] [--rounds 7] [--only] [--gc] [--others] [--warm] [--loop N]

bench/runtime.py's replay graph (one compute region of ``--nodes`` dispatches, lazy
signals) timed per call with its lane idle before each: ``Runtime.submit`` of it, the
region's device graph replayed through the core's compiled replay alone, and (cuda) a
raw ``cuGraphLaunch``; then the replayer's hits and misses. A diagnostic for issue 15:
it writes no results file.
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
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", action="store_true", help="Runtime.submit alone (no interleaved peers)")
    ap.add_argument("--gc", action="store_true", help="collect and disable the cyclic GC while timing")
    ap.add_argument("--warm", action="store_true",
                    help="also time each callable back to back (bursts of 32, the lane settled between bursts): "
                         "what an idle call pays for cold caches after the wait shows as the difference")
    ap.add_argument("--observe", choices=["false", "true"], default="false")
    ap.add_argument("--loop", type=int, default=0,
                    help="only make this many submissions, the lane idle before each, and print nothing else "
                         "(a workload for a native profiler: perf record -g python bench/tools/submit_probe.py --loop 20000)")
    ap.add_argument("--others", action="store_true",
                    help="keep bench/runtime.py's three other runtimes (observe=True, observe='exact', signals='each') "
                         "alive, each having submitted 200 times, as that benchmark's process does")
    args = ap.parse_args()
    import hrx_core as hrx
    import runtime as bench_runtime

    dev = hrx.device(args.engine) if args.engine else hrx.device()
    rt, g, region = bench_runtime._replay_setup(dev, args.observe == "true", args.nodes, "lazy")
    lane = rt.lane("compute")
    s = lane.stream
    others = []
    if args.others:
        for observe, signals in ((True, "auto"), ("exact", "auto"), (False, "each")):
            ort, og, _ = bench_runtime._replay_setup(dev, observe, args.nodes, signals)
            for _ in range(200):
                ort.submit(og)
            ort.synchronize()
            others.append((ort, og))
    dg = region.device_graph
    if args.loop:
        for _ in range(args.loop):
            s.synchronize()
            rt.submit(g)
        rt.synchronize()
        print(f"{args.loop} submissions; compiled: {g._fast_submit.hits if g._fast_submit else 0}")
        return 0

    each: dict[str, list[float]] = {}
    tails: dict[str, list[float]] = {}

    def per(fn, name=None):
        total = 0.0
        times = each.setdefault(name, [])
        for _ in range(args.calls):
            s.synchronize()
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            total += dt
            times.append(dt * 1e6)
        s.synchronize()
        t = time.perf_counter()
        rt.synchronize()
        t1 = time.perf_counter()
        rt.stats.snapshot()
        t2 = time.perf_counter()
        total += t2 - t
        tails.setdefault(name, []).append(((t1 - t) * 1e6, (t2 - t1) * 1e6))
        return total / args.calls * 1e6

    fns = {"submit": lambda: rt.submit(g)}
    if args.only:
        fns = {}
    if dg._fast is not None:
        fast = dg._fast
        fns["replayer"] = lambda: fast(dg)
    if dev.info.engine == "cuda":
        lib = dev.native.driver.lib
        exec_, stream = dg._native._exec, s.native_queue().stream
        fns["raw"] = lambda: lib.cuGraphLaunch(exec_, stream)
    if args.only:
        fns["submit"] = lambda: rt.submit(g)
    if args.gc:
        import gc

        gc.collect()
        gc.disable()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        per(fn)
    each.clear()
    for _ in range(args.rounds):
        for k, fn in fns.items():
            samples[k].append(per(fn, k))
    print(f"{dev.info.engine}: {args.nodes}-node region, observe={args.observe}, lane idle before each call")
    for k, v in samples.items():
        calls = sorted(each[k])
        print(f"  {k:9s} {statistics.median(v):8.2f} us a call with the round's settling; one call: median "
              f"{calls[len(calls) // 2]:.2f}, p90 {calls[len(calls) * 9 // 10]:.2f}, p99 {calls[len(calls) * 99 // 100]:.2f}, "
              f"max {calls[-1]:.1f} us; mean {statistics.fmean(calls):.2f}")
        syncs, snaps = zip(*tails[k])
        print(f"  {'':9s} the round's end: Runtime.synchronize() {statistics.median(syncs):.1f} us, "
              f"stats.snapshot() {statistics.median(snaps):.1f} us (medians; {args.calls} calls a round)")
    if args.warm:
        print("  back to back (bursts of 32, medians of 100 bursts):")
        for k, fn in fns.items():
            bursts = []
            for _ in range(100):
                t = time.perf_counter()
                for _ in range(32):
                    fn()
                bursts.append((time.perf_counter() - t) / 32 * 1e6)
                s.synchronize()
                rt.synchronize()
            print(f"  {k:9s} {statistics.median(bursts):8.2f} us a call")
    fs = g._fast_submit
    print(f"  compiled submission: hits {fs.hits}, misses {fs.misses}" if fs else "  no compiled submission")
    if dg._fast is not None:
        print(f"  replayer hits {dg._fast.hits}, misses {dg._fast.misses}")
    else:
        print("  no compiled replay for the region's graph")
    g.close()
    rt.close()
    for ort, og in others:
        og.close()
        ort.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
