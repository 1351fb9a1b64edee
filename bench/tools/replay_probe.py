"""Where the host time of one plain ``Graph.launch()`` goes: the layers of the replay, each timed alone (any engine).

    python bench/tools/replay_probe.py [--engine cuda] [--nodes 100] [--calls 2000] [--rounds 5] [--inputs 3]

Builds bench/gpu.py's replay graph (a chain of ``--nodes`` dispatches) and times, per
call, with the device idle before each call (as ``cuda.graph.replay100`` does) and
back to back without it, interleaved over ``--rounds`` rounds (medians):

* ``raw``: cffi ``cuGraphLaunch`` of the same CUDA graph (cuda only);
* ``entry``: the engine's C entry of the compiled replay, called through cffi (cuda:
  ``hrx_graph_fast``, a context check and ``cuGraphLaunch``);
* ``replayer``: the core's compiled replay called directly (``g._fast(g)``);
* ``launch``: ``g.launch()``, what users call;
* ``python``: the Python replay path (``g._launch_signaled_py``).

The replayer's hits and misses are printed after (a miss ran the Python path). A
diagnostic for issue 15's ``cuda.graph.replay100``: it writes no results file.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from results_file import idle_per_call  # noqa: E402 - bench/results_file.py
from runtime import TOUCH  # noqa: E402 - bench/runtime.py

import hrx_core as hrx  # noqa: E402


def replay_graph(dev, s, nodes: int, ninputs: int):
    """bench/gpu.py's replay graph on stream ``s``: a chain of ``nodes`` dispatches, the
    first ``ninputs`` bound to declared inputs (a, b, ...), replayed twice (the second
    replay goes through the compiled replay where it is built)."""
    scratch = dev.allocate(256)
    inputs = [dev.allocate(256) for _ in range(ninputs)]
    g = s.graph()
    for name, buf in zip("abcdefgh", inputs):
        g.input(name, buf)
    prev: list = []
    for i in range(nodes):
        buf = inputs[i] if i < ninputs else scratch
        prev = [g.dispatch(TOUCH, 1, [buf], block=32, scalars=(i,), deps=prev)]
    g.launch().wait()
    g.launch().wait()
    return g


def back_to_back(fn, calls: int) -> float:
    t = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - t) / calls * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default=None)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--inputs", type=int, default=0, choices=range(9), help="declared inputs bound by the first nodes (bench/gpu.py: 3)")
    args = ap.parse_args()
    dev = hrx.device(args.engine)
    s = dev.stream()
    g = replay_graph(dev, s, args.nodes, args.inputs)
    fast = g._fast
    print(f"{dev.info.engine}: {args.nodes}-node graph; compiled replay: {fast is not None}"
          f"{'' if fast is None else f', C entry: {fast.compiled_entry}'}")
    fns = {}
    idle = s.synchronize
    if dev.info.engine == "cuda":
        native = g._native
        lib, ffi = dev.native.driver.lib, dev.native.driver.ffi
        stream = s.native_queue().stream
        exec_ = native._exec
        launch = lib.cuGraphLaunch
        fns["raw"] = lambda i: launch(exec_, stream)

        def idle() -> None:
            lib.cuStreamSynchronize(stream)

        entry = native.fast_launch(s.native_queue())
        if entry is not None:
            hffi = native._hot.ffi
            c_entry = hffi.cast("int (*)(void *, long long *)", entry[0])
            arg = hffi.cast("void *", entry[1])
            info = hffi.new("long long[2]")
            keep = entry  # noqa: F841 - keeps the argument alive
            fns["entry"] = lambda i: c_entry(arg, info)
    if fast is not None:
        fns["replayer"] = lambda i: fast(g)
    fns["launch"] = lambda i: g.launch()
    fns["python"] = lambda i: g._launch_signaled_py(s, True)
    for fn in fns.values():  # warm-up
        for i in range(50):
            fn(i)
        s.synchronize()
    idle_us: dict[str, list[float]] = {k: [] for k in fns}
    b2b_us: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            idle_us[name].append(idle_per_call(fn, idle, args.calls))
            s.synchronize()
            b2b_us[name].append(back_to_back(fn, args.calls))
            s.synchronize()
    for name in fns:
        print(f"  {name:9s} idle before each {statistics.median(idle_us[name]):7.2f} us   "
              f"back to back {statistics.median(b2b_us[name]):7.2f} us")
    if fast is not None:
        print(f"replayer hits {fast.hits}, misses {fast.misses}")
    g.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
