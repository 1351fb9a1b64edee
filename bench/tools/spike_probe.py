"""How a hot figure's mean splits into the typical call and the occasional expensive one (any engine).

    python bench/tools/spike_probe.py [--engine cuda] [--calls 1280] [--rounds 5]

bench/gpu.py's ``cuda.graph.replay100`` and bench/runtime.py's ``runtime.replay100``
report a mean host cost per call, each call timed alone after the device went idle.
A mean hides where it comes from: every call paying a little, or every 64th paying
much (a stream's automatic signal every ``AUTO_FLUSH_OPS`` operations, the runtime
settling ``max_submissions`` at once). This probe times the same calls one by one --
a raw ``cuGraphLaunch`` (cuda), ``Graph.launch()`` of the replay graph with no declared
inputs and with three (as bench/gpu.py's), and ``Runtime.submit`` of bench/runtime.py's
graph -- interleaved over ``--rounds`` rounds, and prints per callable: the mean, the
median, the 90th and 99th percentiles, and the share of the mean spent in the calls
above four times the median. A diagnostic for issue 15: it writes no results file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_probe import replay_graph  # noqa: E402 - bench/tools/replay_probe.py
from runtime import _replay_setup  # noqa: E402 - bench/runtime.py

import hrx_core as hrx  # noqa: E402


def split(times: list[float]) -> dict[str, float]:
    xs = sorted(times)
    n = len(xs)
    med = statistics.median(xs)
    mean = sum(xs) / n
    spikes = [x for x in xs if x > 4 * med]
    return {"mean": mean, "median": med, "p90": xs[int(0.9 * (n - 1))], "p99": xs[int(0.99 * (n - 1))],
            "spike_share": sum(spikes) / sum(xs), "spikes": len(spikes) / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--calls", type=int, default=1280)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dev = hrx.device(args.engine) if args.engine else hrx.device()
    s = dev.stream()
    graphs = {k: replay_graph(dev, s, args.nodes, k) for k in (0, 3)}
    rt, tg, _ = _replay_setup(dev, False, args.nodes)
    lane = rt.lane("compute")
    fns: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    if dev.info.engine == "cuda":
        lib = dev.native.driver.lib
        stream = s.native_queue().stream
        exec_ = graphs[3]._native._exec
        launch = lib.cuGraphLaunch

        def idle() -> None:
            lib.cuStreamSynchronize(stream)

        fns["raw"] = (lambda: launch(exec_, stream), idle)
    else:
        idle = s.synchronize
    fns["launch"] = (graphs[0].launch, idle)
    fns["launch3"] = (graphs[3].launch, idle)
    fns["submit"] = ((lambda: rt.submit(tg)), lane.stream.synchronize)
    times: dict[str, list[float]] = {k: [] for k in fns}
    clock = time.perf_counter
    for r in range(args.rounds + 1):  # the first round warms up
        for name, (fn, before) in fns.items():
            out = times[name] if r else []
            for _ in range(args.calls):
                before()
                t = clock()
                fn()
                out.append((clock() - t) * 1e6)
            s.synchronize()
            rt.synchronize()
    print(f"{dev.info.engine}: {args.nodes}-node graphs, {args.rounds} rounds of {args.calls} idle calls (us)")
    for name, xs in times.items():
        d = split(xs)
        print(f"  {name:8s} mean {d['mean']:6.2f} median {d['median']:6.2f} p90 {d['p90']:6.2f} p99 {d['p99']:7.2f}"
              f"  calls above 4x the median: {100 * d['spikes']:.1f}% of calls, {100 * d['spike_share']:.1f}% of the time")
    for g in graphs.values():
        g.close()
    tg.close()
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
