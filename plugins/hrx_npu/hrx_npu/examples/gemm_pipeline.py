"""GPU preprocessing, NPU 8x8 BF16 matmul, GPU epilogue -- with concurrent requests.

    python examples/gemm_pipeline.py [--m 1024] [--requests 4] [--rounds 5]

Each request uploads F32 features, converts them to BF16 on the GPU (x * scale,
rounded to nearest even) into shared memory the NPU reads through an alias
(``Fabric.allocation_profiles([gpu, npu], coherent=True)``), multiplies them on the
NPU by an included 8x8 BF16 weight fixture (NPU-local) with FP32 outputs into
shared memory, and applies ``relu(c * alpha + beta)`` on the GPU before the
download. Requests have private slots (buffers and graphs); the runtime orders
each request's stages through the hazards of the shared buffers (an alias and its
original are one allocation) and lets stages of different requests overlap across
the GPU and NPU lanes. Every output is checked against the CPU.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import ml_dtypes
import numpy as np

from hrx_core.errors import Unsupported
from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.placement import Fabric

from ..programs import load_matmul8x8, matmul8x8_reference
from .common import engine_arguments, engines, median_ms, new_native_objects, timed
from .kernels import BLOCK, EPILOGUE, TO_BF16, epilogue_reference, grid_for, to_bf16_reference

SCALE, ALPHA, BETA = 0.5, 1.5, -0.25


def weight_fixture(m: int) -> np.ndarray:
    """The included 8x8 BF16 weights (small exact values), one per matrix of the batch."""
    i, j = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    w = ((i * 3 - j * 5) % 7 - 3) / 4.0
    return np.broadcast_to(w, (m, 8, 8)).astype(ml_dtypes.bfloat16).view(np.uint16).reshape(-1)


class Request:
    """One request slot: private buffers and its three stage graphs."""

    def __init__(self, rt: Runtime, fabric: Fabric, profile: Any, prog: Any, w: Any, m: int, index: int) -> None:
        gpu, npu = rt.device, rt.lane("npu").device
        n = 64 * m
        self.x = rt.allocate(4 * n)
        self.y = rt.allocate(4 * n)
        self.a = profile.allocate(2 * n, fabric=fabric)    # GPU writes, NPU reads
        self.c = profile.allocate(4 * n, fabric=fabric)    # NPU writes, GPU reads
        self.pre = rt.graph(f"request{index}.pre")
        self.upload = self.pre.upload(self.x, np.zeros(n, np.float32))
        self.pre.compute("to_bf16", lambda r: r.dispatch(TO_BF16, grid_for(n), [self.x.binding().read(), self.a.on(gpu).binding().write()],
                                                          block=BLOCK, scalars=(SCALE, n)))
        self.mm = rt.graph(f"request{index}.npu")
        inv = prog.invocation([self.a.on(npu), w, self.c.on(npu)])
        self.mm.compute("matmul8x8", inv.record, lane="npu")
        self.epi = rt.graph(f"request{index}.epilogue")
        self.epi.compute("epilogue", lambda r: r.dispatch(EPILOGUE, grid_for(n), [self.c.on(gpu).binding().read(), self.y.binding().write()],
                                                          block=BLOCK, scalars=(ALPHA, BETA, n)))
        self.download = self.epi.download(self.y)
        self.inputs: np.ndarray | None = None

    def graphs(self) -> tuple[Any, Any, Any]:
        return self.pre, self.mm, self.epi

    def close(self) -> None:
        for g in self.graphs():
            g.close()
        for b in (self.x, self.y, self.a, self.c):
            b.close()


def run(m: int = 1024, requests: int = 4, rounds: int = 5, *, gpu_engine: str | None = None, npu_engine: str | None = None,
        columns: int = 1, seed: int = 0, log: Any = None, tick: Any = None) -> dict[str, Any]:
    gpu, npu = engines(gpu_engine, npu_engine)
    fabric = Fabric()
    profiles = fabric.allocation_profiles([gpu, npu], coherent=True)
    if not profiles:
        raise Unsupported(f"no coherent memory reaches both {gpu.name} and {npu.name}")
    rng = np.random.default_rng(seed)
    rt = Runtime(gpu, RuntimeOptions(max_submissions=max(8, 3 * requests)), npu=npu)
    prog = load_matmul8x8(npu, m, columns=min(columns, npu.columns))
    wv = weight_fixture(m)
    w = npu.stream().allocate_from(wv)                   # NPU-local weights
    slots = [Request(rt, fabric, profiles[0], prog, w, m, i) for i in range(requests)]
    checks = {"passed": 0, "failed": 0}

    def feed(slot: Request) -> None:
        slot.inputs = rng.standard_normal(64 * m).astype(np.float32)
        slot.upload.write(slot.inputs)

    def check(slot: Request) -> None:
        assert slot.inputs is not None  # fed before every check
        a = to_bf16_reference(slot.inputs, SCALE).view(np.uint16)
        want = epilogue_reference(matmul8x8_reference(a, wv).reshape(-1), ALPHA, BETA)
        ok = np.array_equal(slot.download.read(np.float32), want)
        checks["passed" if ok else "failed"] += 1

    def concurrent() -> None:
        # all preprocessing first, then the NPU stages, then the epilogues: request r's
        # NPU stage runs while the GPU preprocesses request r+1 and finishes request r-1
        subs = [rt.submit(s.pre) for s in slots]
        subs += [rt.submit(s.mm) for s in slots]
        subs += [rt.submit(s.epi) for s in slots]
        for sub in subs:
            sub.wait()

    def serial() -> None:
        for s in slots:
            for g in s.graphs():
                rt.submit(g).wait()

    for s in slots:  # warm-up
        feed(s)
    concurrent()
    for s in slots:
        check(s)
    before = new_native_objects(gpu, npu)
    times: dict[str, list[float]] = {"serial": [], "concurrent": []}
    for i in range(rounds):
        for mode in (("serial", "concurrent") if i % 2 == 0 else ("concurrent", "serial")):
            for s in slots:
                feed(s)
            times[mode].append(timed(concurrent if mode == "concurrent" else serial))
            for s in slots:
                check(s)
        if tick is not None:  # after each round (a progress bar's update)
            tick()
    created = new_native_objects(gpu, npu, before)
    ser, con = median_ms(times["serial"]), median_ms(times["concurrent"])
    result = {
        "example": "gemm_pipeline",
        "gpu": f"{gpu.name} ({gpu.info.name})",
        "npu": f"{npu.name} ({prog.target}, {prog.columns} columns)", "npu_note": npu.note,
        "m": m, "requests": requests, "rounds": rounds,
        "profile": dict(profiles[0].access), "shared_host_access": profiles[0].host,
        "serial_ms": ser, "concurrent_ms": con, "speedup": ser / con,
        "checks_passed": checks["passed"], "checks_failed": checks["failed"],
        "new_native_objects": created,
        "ok": checks["failed"] == 0 and not any(created.values()),
    }
    for s in slots:
        s.close()
    w.close()
    prog.close()
    rt.close()
    if log is not None:
        log(summary(result))
    return result


def summary(r: dict[str, Any]) -> str:
    return (
        f"gemm_pipeline on {r['gpu']} + {r['npu']}: M={r['m']}, {r['requests']} concurrent requests, {r['rounds']} rounds\n"
        f"  shared memory profile {r['profile']} (host: {r['shared_host_access']})\n"
        f"  one round: requests one at a time {r['serial_ms']:.3f} ms, concurrent {r['concurrent_ms']:.3f} ms ({r['speedup']:.2f}x)\n"
        f"  checks: {r['checks_passed']} outputs exact, {r['checks_failed']} mismatches; "
        f"new native objects during replays: {r['new_native_objects']}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=1024, help="matrices per request")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    engine_arguments(ap)
    args = ap.parse_args(argv)
    r = run(args.m, args.requests, args.rounds, gpu_engine=args.gpu_engine, npu_engine=args.npu_engine, columns=args.columns, log=print)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
