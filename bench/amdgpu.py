"""Host cost of the amdgpu engine's hot paths, next to the cuda engine's, in one run.

    python bench/amdgpu.py [--reps 7] [--calls 400]

amdgpu runs on the simulated Strix Halo (there is no AMD hardware here): what is
measured is the Python the engine runs above the provider -- encoding, arena
layout, ring publication -- not a GPU. Each figure is the CPU time of the *issuing
thread* per call (``time.thread_time``), so the simulation's command processors,
which execute the work on their own threads, are excluded; so is the time the
issuing thread spends in the simulated provider's doorbell (one store on hardware,
Python in the simulation; printed as ``fake_doorbell.*``, the totals with it as
``with_fake_doorbell.*``). The queue is drained between rounds.

Launches are issued back to back; graph replays one at a time with the device idle
(as bench/gpu.py measures the cuda engine's).

On a machine with the cuda engine the same four operations are measured on cuda in
the same run, with the driver's own cost beside them (raw cffi cuLaunchKernel /
cuGraphLaunch / cuGraphExecKernelNodeSetParams + cuGraphLaunch). The goal of issue
16: amdgpu's cost above its provider is at most cuda's host overhead above its
driver call (ratio = amdgpu / (cuda - raw) <= 1). Without cuda the amdgpu figures are
written without a peer. Ids ``amdgpu.*`` in bench/results/<machine>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HRX_AMDF_PROVIDER", "fake")

import hrx_core as hrx  # noqa: E402
from results_file import entry, idle_per_call, report, write_for  # noqa: E402

CMD = "python bench/amdgpu.py"
EMPTY_SRC = 'extern "C" __global__ void empty() {}'
TOUCH_SRC = 'extern "C" __global__ void touch(unsigned int* p, unsigned int v) { if (threadIdx.x == 0 && v == 0xffffffffu) p[0] = v; }'
#: Prebuilt gfx1151 code objects of the two kernels, for machines without clang (the
#: H200 image has none): ``python bench/amdgpu.py --write-code-objects`` rebuilds them.
PREBUILT = Path(__file__).resolve().parent / "data" / "gfx1151"


def _touch(p, v):
    if int(v) == 0xFFFFFFFF:
        p.view(np.uint32)[0] = v


def _kernels() -> tuple[hrx.Kernel, hrx.Kernel]:
    sources = {"empty": {}, "touch": {}}
    try:
        from hrx_gpu.amdgpu.compiler import find_clang

        find_clang()
    except Exception:  # no clang here: the prebuilt code objects stand in
        for name in sources:
            sources[name] = {"gfx1151": (PREBUILT / f"{name}.co").read_bytes()}
    empty = hrx.Kernel("empty", buffers=0, cuda=EMPTY_SRC, host=lambda: None, sources=sources["empty"])
    touch = hrx.Kernel("touch", buffers=("read_write",), scalars=(np.uint32,), cuda=TOUCH_SRC, host=_touch, sources=sources["touch"])
    return empty, touch


EMPTY, TOUCH = _kernels()


def write_code_objects() -> None:
    PREBUILT.mkdir(parents=True, exist_ok=True)
    for kernel, src in ((EMPTY, EMPTY_SRC), (TOUCH, TOUCH_SRC)):
        artifact = hrx.compile(src, target="gfx1151", entry=kernel.name)
        (PREBUILT / f"{kernel.name}.co").write_bytes(artifact.code)
        print(f"wrote {PREBUILT / kernel.name}.co ({len(artifact.code)} bytes)")


def per_call(fn, calls: int, drain, *, idle: bool = False) -> float:
    """Issuing-thread CPU microseconds per call of ``fn(i)``, drained before and after;
    ``idle``: drained before every call too (graph replays: the cost of one launch with
    the device idle, as bench/gpu.py measures the cuda engine's)."""
    drain()
    if idle:
        us = idle_per_call(fn, drain, calls, clock=time.thread_time)
        drain()
        return us
    t = time.thread_time()
    for i in range(calls):
        fn(i)
    dt = (time.thread_time() - t) / calls * 1e6
    drain()
    return dt


class ProviderTime:
    """Issuing-thread CPU time spent in the simulated provider's doorbell while a
    measured call runs. On hardware ringing a doorbell is one store to a mapped page;
    the fake's is Python (its lock, a publication check, waking its command-processor
    thread): the provider's cost, which the figures exclude, as the cuda figures
    exclude the driver's."""

    def __init__(self) -> None:
        from hrx_amdf.fake.queues import FakeDoorbell

        self.seconds = 0.0
        self.measuring = False
        write = FakeDoorbell.write
        clock = self

        def timed_write(doorbell, value: int) -> None:
            if not clock.measuring:
                return write(doorbell, value)
            t = time.thread_time()
            try:
                return write(doorbell, value)
            finally:
                clock.seconds += time.thread_time() - t

        self._restore = (FakeDoorbell, write)
        FakeDoorbell.write = timed_write  # type: ignore[method-assign]

    def close(self) -> None:
        """Put the provider's doorbell back."""
        cls, write = self._restore
        cls.write = write

    def around(self, fn):
        """``fn`` with the doorbell's time counted while it runs."""
        def measured(i: int) -> None:
            self.measuring = True
            try:
                fn(i)
            finally:
                self.measuring = False
        return measured


class Setup:
    """The four measured operations on one device."""

    def __init__(self, dev, nodes: int = 100) -> None:
        self.dev = dev
        self.s = dev.stream()
        self.prepared = self.s.prepare(EMPTY, 1, [])
        scratch = dev.allocate(256)
        self.inputs = [[dev.allocate(256) for _ in range(3)] for _ in range(2)]
        g = self.s.graph()
        for name, buf in zip("abc", self.inputs[0]):
            g.input(name, buf)
        prev: list = []
        for i in range(nodes):
            buf = self.inputs[0][i] if i < 3 else scratch
            prev = [g.dispatch(TOUCH, 1, [buf], block=32, scalars=(i,), deps=prev)]
        g.launch().wait()
        self.g = g
        self.sets = [{n: b for n, b in zip("abc", self.inputs[k])} for k in range(2)]
        self.s.dispatch(EMPTY, 1, [])
        self.s.synchronize()

    def drain(self) -> None:
        self.s.synchronize(timeout=120)

    def prepared_launch(self, i: int) -> None:
        self.prepared.launch()

    def dispatch(self, i: int) -> None:
        self.s.dispatch(EMPTY, 1, [])

    def replay(self, i: int) -> None:
        self.g.launch()

    def rebind(self, i: int) -> None:
        self.g.launch(inputs=self.sets[i & 1])


def cuda_raw(cuda: Setup):
    """The driver's own calls for the same four operations."""
    nd = cuda.dev.native
    lib, ffi = nd.driver.lib, nd.driver.ffi
    stream = cuda.s.native_queue().stream
    func = EMPTY.executable(cuda.dev).function
    native = cuda.g._native
    exec_ = native._exec
    from hrx_core.engine import GraphNode

    limit = cuda.dev.info.limits.max_transfer_bytes
    params = []
    for k in range(2):
        resolved = cuda.g._resolve(cuda.sets[k])
        per = []
        for i in range(3):
            ((kind, p),) = cuda.g._expand(cuda.g.nodes[i], resolved, limit)
            per.append(native._kernel_node_params("kernel", GraphNode(kind, native.nodes[i].deps, p).params))
        params.append(per)
    handles = [native._handles[i] for i in range(3)]
    null = ffi.NULL

    def launch(i: int) -> None:
        lib.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, stream, null, null)

    def graph(i: int) -> None:
        lib.cuGraphLaunch(exec_, stream)

    def rebind(i: int) -> None:
        for h, (p, _keep) in zip(handles, params[i & 1]):
            lib.cuGraphExecKernelNodeSetParams_v2(exec_, h, p)
        lib.cuGraphLaunch(exec_, stream)

    def drain() -> None:
        lib.cuStreamSynchronize(stream)

    return {"launch": launch, "graph": graph, "rebind": rebind}, drain


OPS = [
    ("prepared", "prepared_launch", "launch", "prepared launch (PreparedLaunch.launch) of an empty kernel"),
    ("dispatch", "dispatch", "launch", "eager stream.dispatch of an empty kernel"),
    ("replay100", "replay", "graph", "replay of a 100-node recorded graph"),
    ("replay100_rebind3", "rebind", "rebind", "replay of the 100-node graph with 3 inputs rebound each time"),
]


def _measure(a, amd: Setup, cuda: Setup | None, raw, raw_drain, provider: ProviderTime | None) -> dict[str, float]:
    """Median microseconds per call of each operation (amdgpu, and cuda with its raw
    driver calls where present), rounds alternating engines and operations."""
    samples: dict[str, list[float]] = {}
    for _ in range(a.reps):  # alternate engines and operations within each round
        for key, method, raw_key, _ in OPS:
            idle = raw_key != "launch"
            fn = getattr(amd, method)
            if provider is None:
                samples.setdefault(f"amdgpu.{key}", []).append(per_call(fn, a.calls, amd.drain, idle=idle))
            else:
                before = provider.seconds
                total = per_call(provider.around(fn), a.calls, amd.drain, idle=idle)
                bell = (provider.seconds - before) / a.calls * 1e6
                samples.setdefault(f"amdgpu.{key}", []).append(total - bell)
                samples.setdefault(f"fake_doorbell.{key}", []).append(bell)
                samples.setdefault(f"with_fake_doorbell.{key}", []).append(total)
            if cuda is not None:
                samples.setdefault(f"cuda.{key}", []).append(per_call(getattr(cuda, method), a.calls, cuda.drain, idle=idle))
                samples.setdefault(f"raw.{key}", []).append(per_call(raw[raw_key], a.calls, raw_drain, idle=idle))
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--out", default=None, help="results file name (default: by machine)")
    ap.add_argument("--write-code-objects", action="store_true", help="rebuild bench/data/gfx1151/*.co with clang and exit")
    a = ap.parse_args()
    if a.write_code_objects:
        write_code_objects()
        return 0
    if a.reps < 1 or a.calls < 1:
        print("bench/amdgpu.py: --reps and --calls must be >= 1", file=sys.stderr)
        return 2
    amd = Setup(hrx.device("amdgpu"))
    status = hrx.engine_status().get("cuda")
    cuda = Setup(hrx.device("cuda")) if status is not None and status.available else None
    raw, raw_drain = cuda_raw(cuda) if cuda is not None else ({}, None)
    provider = ProviderTime() if os.environ.get("HRX_AMDF_PROVIDER") == "fake" else None
    try:
        med = _measure(a, amd, cuda, raw, raw_drain, provider)
    finally:
        if provider is not None:
            provider.close()
    entries = []
    for key, _, _, what in OPS:
        value = med[f"amdgpu.{key}"]
        desc = (f"{what}: issuing-thread CPU time per call on amdgpu over the simulated Strix Halo (Python above the provider; "
                "the simulated provider's doorbell, one store on hardware, excluded)")
        if cuda is None:
            entries.append(entry(f"amdgpu.{key}", desc, "us", value, command=CMD))
        else:
            overhead = max(med[f"cuda.{key}"] - med[f"raw.{key}"], 1e-3)
            entries.append(entry(f"amdgpu.{key}", desc, "us", value, peer=f"cuda engine's host overhead above its driver call (cuda {med[f'cuda.{key}']:.2f} - raw {med[f'raw.{key}']:.2f} us)",
                                 peer_value=overhead, goal="<= 1.0", command=CMD))  # fmt: skip
    print("medians (us):", {k: round(v, 3) for k, v in sorted(med.items())})
    path = write_for(cuda.dev if cuda is not None else hrx.device("host"), entries, a.out)
    report(entries)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/amdgpu.py", main))
