"""Machine instructions of the compiled hot paths' bookkeeping, without a GPU.

    python bench/tools/host_instructions.py [--calls 3200] [--what replay,rebind,resubmit,observed] [--warm N] [--no-valgrind]

Host times of one launch move by 20-50% between machines and runs; instruction counts
do not. This tool builds, on the host engine, what bench/gpu.py's and bench/runtime.py's
hot figures exercise -- a plain replay (``g.launch()``), a rebinding replay of three
inputs alternating between two mappings (``g.launch(inputs=...)``, staged through a C
staging entry as the cuda engine's are), a runtime resubmission (``rt.submit(g)``, lazy
signals as on cuda, its lane drained before each, uncounted, as bench/runtime.py does),
the same with ``observe=True`` (``observed``, the runtime's default: each submission's
region ends noticed and folded into the statistics) -- and swaps the engine's launch for a C entry that does nothing
(and the staging for one that stages nothing), so that what is counted is hrx_core's
part alone: the compiled entry, the replayer or submitter, their checks, locks, commit,
completion and counters. Under valgrind's callgrind it reports instructions a call
inside ``FastEntry_vectorcall`` (the compiled ``Graph.launch`` / ``Runtime.submit``).
The host engine's queue adds its Python ``submit()`` to each replay (about 1,000
instructions on CPython 3.11; the cuda queue needs none): the tool reports it apart.

With ``--cold`` each call follows a sweep over 8 MiB of other memory (outside the
counted code; the simulated last-level cache is 4 MiB), as a call after a device
synchronization may find its caches (the benchmarks time each launch with the device
idle before it), and the tool reports the cache lines the call misses under
callgrind's cache simulation beside its instructions: instruction and data lines
missing from the first level and from the last level (the ones that go to memory,
about 100 ns each). The counts are of the simulated caches, not of a measured CPU.

Without valgrind (or with ``--no-valgrind``) it prints nanoseconds a call instead. A
diagnostic for issue 15: it writes no results file.
"""

from __future__ import annotations

import argparse
import array
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

import hrx_core as hrx
from hrx_core import fastpath, hotpath
from hrx_core.device import AUTO_FLUSH_OPS
from hrx_core.testing import ADD_U32

WHATS = ("replay", "rebind", "resubmit", "observed")

_CDEF = """
int hrx_instr_entry(void *arg, long long *info);
int hrx_instr_stage(void *arg, const void *prepared, size_t nbytes);
"""
_SOURCE = """
int hrx_instr_entry(void *arg, long long *info) { (void)arg; (void)info; return 0; }
int hrx_instr_stage(void *arg, const void *prepared, size_t nbytes) { (void)arg; (void)prepared; (void)nbytes; return 1; }
"""


def _entries() -> tuple[int, int]:
    mod = hotpath.load("hrx_instr_entries", _CDEF, _SOURCE)
    if not mod.compiled:
        raise SystemExit(f"cannot build the do-nothing entries: {mod.reason}")
    ffi, lib = mod.ffi, mod.lib
    return (int(ffi.cast("uintptr_t", ffi.addressof(lib, "hrx_instr_entry"))),
            int(ffi.cast("uintptr_t", ffi.addressof(lib, "hrx_instr_stage"))))


def _replayer(g: Any, entry: int, stage: Any = None) -> Any:
    """g's compiled replay, launching through ``entry`` (a C function that does nothing)."""
    lib = fastpath.module().lib
    dev, s = g.device, g.stream
    return lib.Replayer(g._plan, g._native, g._record, hrx.buffer.EPOCH, s.slot, s, dev.stats, g._plan[2], None,
                        entry, 1, None, g.owned, AUTO_FLUSH_OPS, stage,
                        (type(g).launches.tally(g, lib), dev.stats.graph_launch_tally(lib)))


class _Prepared(array.array):  # type: ignore[type-arg]
    patches: tuple[Any, ...]


def scenario(what: str, warm: int = 0) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """One call of ``what``, set up on the host engine with the do-nothing entries, and
    what to do (uncounted) before each call: for a resubmission, drain its lane, as
    bench/runtime.py does (a resubmission then follows a finished one). ``warm``: for a
    resubmission, as many submissions first through the runtime's Python path (outside
    the counted entry), so that the counted calls meet a runtime in its steady state --
    a latency reservoir past its capacity, a trace ring that drops as much as it keeps."""
    if not fastpath.module().compiled:
        raise SystemExit(f"the core's compiled replay is not built here: {fastpath.module().reason}")
    entry, stage_entry = _entries()
    dev = hrx.device("host")
    if what in ("resubmit", "observed"):
        from hrx_core.execution import Runtime, RuntimeOptions

        rt = Runtime(dev, RuntimeOptions(observe=what == "observed", signals="lazy"))
        x = rt.allocate(256)
        tg = rt.graph("count")
        tg.compute("add", lambda r: r.dispatch(ADD_U32, 1, [x], block=64, scalars=(1, 64)))
        for _ in range(4):
            rt.submit(tg).wait(10)
        dg = tg.regions[0].device_graph
        dg._fast = _replayer(dg, entry)
        if not tg._fast_submit:
            raise SystemExit("no compiled resubmission for the graph")
        for i in range(warm):
            Runtime._submit_py(rt, tg)
            if i % 32 == 31:
                rt.lane("compute").stream.synchronize()
        rt.synchronize()
        return (lambda: rt.submit(tg)), rt.lane("compute").stream.synchronize
    s = dev.stream()
    sets = [[s.allocate_from(np.zeros(64, np.uint32)) for _ in range(3)] for _ in range(2)]
    g = s.graph()
    if what == "rebind":
        native_type = type(dev.native.build_graph([]))
        log: list[Any] = []

        def prepare_patches(self: Any, patches: Any) -> Any:
            prepared = _Prepared("Q", [0, 0])
            prepared.patches = tuple(patches)
            return prepared

        native_type.prepare_patches = prepare_patches  # type: ignore[method-assign]
        native_type.apply_patches = lambda self, prepared: self.patch_args(prepared.patches)  # type: ignore[method-assign]
        native_type.fast_stage = lambda self: (stage_entry, 0, log, 1 << 40, None)  # type: ignore[method-assign]
        for name, buf in zip("abc", sets[0]):
            g.input(name, buf)
    for buf in sets[0]:
        g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(1, 64), deps=[])
    maps = [dict(zip("abc", bufs)) for bufs in sets]
    g.launch()
    g.launch()
    if what == "replay":
        g._fast = _replayer(g, entry)
        return g.launch, None
    for i in range(4):
        g.launch(inputs=maps[i & 1])
    s.synchronize()
    g._fast = _replayer(g, entry, g._native.fast_stage())
    count = [0]

    def rebind() -> Any:
        count[0] += 1
        if len(log) > 100_000:
            log.clear()
        return g.launch(inputs=maps[count[0] & 1])

    return rebind, None


#: The simulated last-level cache of --cold (bytes, ways, line) and what each call's
#: sweep touches before it: twice its size.
COLD_LL = (4 << 20, 16, 64)
COLD_SWEEP = 8 << 20


def _child(what: str, calls: int, cold: bool = False, warm: int = 0) -> np.ndarray | None:
    """``calls`` calls of ``what`` (what callgrind counts); with ``cold`` each after the
    sweep, whose memory it returns (every word: the number of sweeps)."""
    import gc

    fn, idle = scenario(what, warm)
    sweep = np.zeros(COLD_SWEEP // 8, np.int64) if cold else None
    gc.disable()
    try:
        for _ in range(calls):
            if idle is not None:
                idle()
            if sweep is not None:
                sweep += 1  # every line of it read and written: the caches hold other data
            fn()
    finally:
        gc.enable()
    return sweep


def _valgrind_count(what: str, calls: int, cold: bool = False, warm: int = 0) -> dict[str, int]:
    """Callgrind's events inside FastEntry_vectorcall over ``calls`` calls of ``what``
    (``Ir``: instructions; with ``cold``, the cache simulation's misses too)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=FastEntry_vectorcall"]
        if cold:
            cmd += ["--cache-sim=yes", "--LL={},{},{}".format(*COLD_LL)]
        cmd += [sys.executable, os.path.abspath(__file__), "--child", what, "--calls", str(calls), "--warm", str(warm)]
        cmd += ["--cold"] if cold else []
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=3600)
        text = open(out).read()
    events = re.search(r"^events:\s+(.+)$", text, re.M)
    m = re.search(r"^(?:summary|totals):\s+([\d ]+)$", text, re.M)
    if events is None or m is None:
        raise SystemExit("callgrind wrote no totals")
    return dict(zip(events.group(1).split(), (int(x) for x in m.group(1).split())))


def _time(what: str, calls: int, warm: int = 0) -> float:
    fn, idle = scenario(what, warm)
    best = float("inf")
    for _ in range(5):
        total = 0.0
        for _ in range(calls):
            if idle is not None:
                idle()
            t = time.perf_counter()
            fn()
            total += time.perf_counter() - t
        best = min(best, total / calls * 1e9)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--what", default=",".join(WHATS), help="comma-separated: " + ", ".join(WHATS))
    ap.add_argument("--calls", type=int, default=3200)
    ap.add_argument("--no-valgrind", action="store_true", help="time the calls instead of counting instructions")
    ap.add_argument("--cold", action="store_true", help="evict the caches before each call and count the lines it misses")
    ap.add_argument("--warm", type=int, default=0, metavar="N",
                    help="resubmit, observed: N submissions through the Python path first (uncounted): the steady state")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        sweep = _child(args.child, args.calls, args.cold, args.warm)
        if sweep is not None:  # (what the tests read; callgrind's runs discard it)
            print(f"swept {sweep.nbytes} bytes before each of {int(sweep.min())}..{int(sweep.max())} calls")
        return 0
    whats = [w for w in args.what.split(",") if w]
    unknown = set(whats) - set(WHATS)
    if unknown:
        ap.error(f"--what: unknown {sorted(unknown)}; expected some of {WHATS}")
    count = not args.no_valgrind and shutil.which("valgrind") is not None
    if not count and not args.no_valgrind:
        print("valgrind not found (Debian: apt-get install valgrind): timing instead")
    mod = fastpath.module()
    if not mod.compiled:
        raise SystemExit(f"the core's compiled replay is not built here: {mod.reason}")
    print(f"Python {sys.version.split()[0]}; direct locks: {bool(mod.lib.direct_locks)}")
    for what in whats:
        if count:
            base = _valgrind_count(what, 0, args.cold, args.warm)  # setup only: what the child does before the calls
            total = _valgrind_count(what, args.calls, args.cold, args.warm)
            per = {k: (total[k] - base.get(k, 0)) / args.calls for k in total}
            warmed = f" after {args.warm} uncounted" if args.warm and what in ("resubmit", "observed") else ""
            line = f"{what:9s} {per['Ir']:8.0f} instructions a call (FastEntry_vectorcall, {args.calls} calls{warmed})"
            if args.cold:
                first = per.get("I1mr", 0) + per.get("D1mr", 0) + per.get("D1mw", 0)
                last_i, last_d = per.get("ILmr", 0), per.get("DLmr", 0) + per.get("DLmw", 0)
                line += (f"; lines missed a call, caches swept before it: {first:.0f} first-level, {last_i:.0f} instruction"
                         f" + {last_d:.0f} data last-level")
            print(line)
        elif args.cold:
            ap.error("--cold counts cache misses: it needs valgrind")
        else:
            print(f"{what:9s} {_time(what, args.calls, args.warm):8.0f} ns a call (best of 5 rounds of {args.calls})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
