"""Where the host time of one ``Runtime.submit`` or ``Graph.launch`` goes (cProfile), on any engine.

    python bench/tools/profile_runtime.py [--engine cuda] [--nodes 100] [--calls 2000] [--observe false|true|exact] [--graph]

Submits the replay benchmark's graph (bench/runtime.py: one compute region of
``--nodes`` dispatches) ``--calls`` times, each after the lane went idle, and prints
the host time per submission, the Python calls per submission and the cProfile table
by own time. With ``--graph``: bench/gpu.py's replay graph instead (a chain of
``--nodes`` dispatches, the first three bound to declared inputs a, b, c), launched
with its default bindings and with the three inputs rebound to one of two sets on
every launch (``replay100_rebind3``). A diagnostic for issue 15 (graph replay,
rebinding and runtime resubmission): it writes no results file.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from results_file import idle_per_call  # noqa: E402 - bench/results_file.py


def profile(label: str, fn, idle, calls: int, top: int) -> None:
    """Time ``calls`` calls ``fn(i)``, ``idle()`` before each (untimed); then the same
    under cProfile, and print both."""
    for i in range(200):
        idle()
        fn(i)
    print(f"{label}: {idle_per_call(fn, idle, calls):.2f} us per call (idle before each)")
    prof = cProfile.Profile()
    for i in range(calls):
        idle()
        prof.enable()
        fn(i)
        prof.disable()
    stats = pstats.Stats(prof)
    print(f"{stats.total_calls / calls:.1f} Python calls per call")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue())


def graph_launches(dev, nodes: int, calls: int, top: int) -> None:
    from runtime import TOUCH

    s = dev.stream()
    scratch = dev.allocate(256)
    inputs = [[dev.allocate(256) for _ in range(3)] for _ in range(2)]
    g = s.graph()
    for name, buf in zip("abc", inputs[0]):
        g.input(name, buf)
    prev: list = []
    for i in range(nodes):
        buf = inputs[0][i] if i < 3 else scratch
        prev = [g.dispatch(TOUCH, 1, [buf], block=32, scalars=(i,), deps=prev)]
    g.launch().wait()
    sets = [dict(zip("abc", inputs[k])) for k in range(2)]
    profile(f"{dev.info.engine}: Graph.launch of a {nodes}-node graph", lambda i: g.launch(), s.synchronize, calls, top)
    profile(f"{dev.info.engine}: Graph.launch of it, 3 inputs rebound", lambda i: g.launch(inputs=sets[i & 1]),
            s.synchronize, calls, top)
    s.synchronize()
    g.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--observe", choices=["false", "true", "exact"], default="false")
    ap.add_argument("--graph", action="store_true", help="profile Graph.launch (plain and rebinding) instead")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    import runtime as bench_runtime

    import hrx_core as hrx

    dev = hrx.device(args.engine)
    if args.graph:
        graph_launches(dev, args.nodes, args.calls, args.top)
        return 0
    observe = {"false": False, "true": True, "exact": "exact"}[args.observe]
    rt, g, _ = bench_runtime._replay_setup(dev, observe, args.nodes)
    lane = rt.lane("compute")
    profile(f"{dev.info.engine}: Runtime.submit of a {args.nodes}-node graph, observe={observe}",
            lambda i: rt.submit(g), lane.stream.synchronize, args.calls, args.top)
    rt.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
