"""Where ``cuda.copy.d2d_2gib``'s gap to torch comes from (cuda only).

    python bench/tools/d2d_probe.py [--gib 2] [--reps 15]

bench/gpu.py times ``stream.copyto(b, a).wait()`` of 2 GiB against torch's ``copy_``
between two torch tensors, each synchronized before and after. This times, in
interleaved rounds (the median of ``--reps``), read+write TB/s of:

- ``hrx``: the benchmark's HRX call (``copyto(...).wait()``);
- ``hrx_sync``: the same copy ended by ``stream.synchronize()`` instead of the wait;
- ``hrx_cusync``: the same copy ended by a raw ``cuStreamSynchronize`` (HRX's issue, the driver's wait);
- ``hrx_spin``: the copy, its signal flushed, then a bare loop on the timeline's counter;
- ``hrx_spin0``: the same loop with ``time.sleep(0)`` in it (the timeline's wait spins so);
- ``raw_hrx``: a raw cffi ``cuMemcpyAsync`` + ``cuStreamSynchronize`` between the HRX buffers;
- ``raw_torch``: the same raw calls between the torch tensors (on HRX's stream);
- ``torch``: the benchmark's torch peer;
- ``torch_hrx``: torch ``copy_`` between the HRX buffers (wrapped as torch tensors by DLPack).

So the call path (hrx against raw_hrx), the wait (hrx against hrx_sync) and where the
memory came from (raw_hrx against raw_torch, torch against torch_hrx) show apart. A
diagnostic for the closed copy issue's miss: it writes no results file.
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
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    import torch

    import hrx_core as hrx

    nbytes = int(args.gib * (1 << 30))
    dev = hrx.device("cuda")
    s = dev.stream()
    lib = dev.native.driver.lib
    stream = s.native_queue().stream
    a, b = dev.allocate(nbytes), dev.allocate(nbytes)
    s.fill(a, pattern=7).wait()
    ta = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    tb = torch.empty_like(ta)
    tb.fill_(3)
    torch.cuda.synchronize()
    pa, pb = a.allocation.native.dptr, b.allocation.native.dptr
    tpa, tpb = ta.data_ptr(), tb.data_ptr()
    try:
        ha, hb = torch.from_dlpack(a), torch.from_dlpack(b)
    except Exception as exc:  # noqa: BLE001 - a peer missing: say so, time the rest
        print(f"torch_hrx unavailable: {type(exc).__name__}: {exc}")
        ha = hb = None
    tbytes = 2 * nbytes / 1e12

    def timed(fn):
        def run() -> float:
            s.synchronize()
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn()
            return tbytes / (time.perf_counter() - t)
        return run

    def raw(dst: int, src: int):
        def fn() -> None:
            lib.cuMemcpyAsync(dst, src, nbytes, stream)
            lib.cuStreamSynchronize(stream)
        return fn

    def torch_copy(dst, src):
        def fn() -> None:
            dst.copy_(src)
            torch.cuda.synchronize()
        return fn

    def hrx_sync() -> None:
        s.copyto(b, a)
        s.synchronize()

    issue: list[float] = []

    def hrx_cusync() -> None:
        t = time.perf_counter()
        s.copyto(b, a)
        issue.append(time.perf_counter() - t)
        lib.cuStreamSynchronize(stream)

    def spin(yield_: bool):
        def fn() -> None:
            c = s.copyto(b, a)
            c.slot.flush()
            tl, value = c.slot.timeline, c.value
            if yield_:
                while tl.completed() < value:
                    time.sleep(0)
            else:
                while tl.completed() < value:
                    pass
            lib.cuStreamSynchronize(stream)
        return fn

    import threading

    print("threads:", [t.name for t in threading.enumerate()])
    fns = {"hrx": timed(lambda: s.copyto(b, a).wait()), "hrx_sync": timed(hrx_sync), "hrx_cusync": timed(hrx_cusync),
           "hrx_spin": timed(spin(False)), "hrx_spin0": timed(spin(True)),
           "raw_hrx": timed(raw(pb, pa)), "raw_torch": timed(raw(tpa, tpb)), "torch": timed(torch_copy(ta, tb))}
    if ha is not None:
        fns["torch_hrx"] = timed(torch_copy(hb, ha))
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.reps):
        for k, fn in fns.items():
            samples[k].append(fn())
    med = {k: statistics.median(v) for k, v in samples.items()}
    for k, v in med.items():
        print(f"{k:10s} {v:.3f} TB/s  ({v / med['torch']:.3f}x torch, {v / med['raw_hrx']:.3f}x raw_hrx)"
              f"  spread {min(samples[k]):.3f}-{max(samples[k]):.3f}")
    print(f"copyto's host time (hrx_cusync): median {statistics.median(issue) * 1e6:.1f} us, "
          f"max {max(issue) * 1e6:.1f} us; a copy of {nbytes / 2**30:g} GiB at raw speed: "
          f"{tbytes / med['raw_hrx'] * 1e6:.1f} us")
    print("threads:", [t.name for t in threading.enumerate()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
