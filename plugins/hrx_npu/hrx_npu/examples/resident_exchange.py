"""A resident GPU stage and NPU stage exchanging a stream of payloads, every output
checked against the CPU.

    python examples/resident_exchange.py [--payloads 64] [--m 1] [--slots 8]

Per payload (``m`` 8x8 matrix pairs): the host sends 64*m uint32 values; the GPU
participant applies gpu_npu_parallel's integer transform and turns each result into
two small integers as BF16 -- matrices A and B -- and forwards them; the NPU
participant multiplies them (8x8 BF16 matmul, FP32 out, k order) and returns C; the
GPU participant applies the epilogue ``relu(0.5 C + 1)`` and responds. GPU and NPU
exchange the payloads through coherent shared memory with the WAIT/RUN/ABORT
protocol (hrx_core.resident) -- no host round trip between them.

It reports the round trip of one payload at a time through the resident session
against the same three stages through a tracked graph (upload, GPU kernel, NPU
program, GPU kernel, download: the runtime's host completion checks between the
devices), and the pipelined rate with ``slots`` payloads in flight.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import ml_dtypes
import numpy as np

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.resident import KernelParticipant, Layout, ResidentSession, ResidentStartup, host_gpu_kernel

from ..programs import matmul8x8_reference
from ..resident import ProgramParticipant, load_participant
from .common import engine_arguments, engines, table
from .kernels import GOLDEN, epilogue_reference, int_transform_reference

ALPHA, BETA = 0.5, 1.0
BLOCK = 256

#: The GPU stages, as device functions (the resident participant) and as standalone
#: kernels (the graph path): the same code on both paths.
STAGES_CUDA = r"""
/* request (64m uint32) -> forward (A then B: 64m BF16 each) */
__device__ void hrx_resident_pre(const unsigned char *in, long long in_bytes, unsigned char *out, long long out_bytes, int tid, int n) {
    const unsigned int *x = (const unsigned int *)in;
    long long count = in_bytes / 4;
    unsigned short *a = (unsigned short *)out, *b = a + count;
    for (long long i = tid; i < count; i += n) {
        unsigned int v = x[i], y = (v * 2654435761u) ^ (v >> 13);
        float fa = (float)((int)(y & 15u) - 8), fb = (float)((int)((y >> 4) & 15u) - 8);
        a[i] = (unsigned short)(__float_as_uint(fa) >> 16);   /* small integers: exact in BF16 */
        b[i] = (unsigned short)(__float_as_uint(fb) >> 16);
    }
}
/* backward (C: 64m FP32) -> response (relu(0.5 C + 1), FP32) */
__device__ void hrx_resident_post(const unsigned char *in, long long in_bytes, unsigned char *out, long long out_bytes, int tid, int n) {
    const float *c = (const float *)in;
    float *y = (float *)out;
    for (long long i = tid; i < out_bytes / 4; i += n) {
        float v = __fadd_rn(__fmul_rn(c[i], 0.5f), 1.0f);
        y[i] = v > 0.0f ? v : 0.0f;
    }
}
"""

STANDALONE_CUDA = STAGES_CUDA + r"""
extern "C" __global__ void rs_pre(const unsigned char *x, unsigned char *ab, long long nbytes) {
    hrx_resident_pre(x, nbytes, ab, nbytes, threadIdx.x, blockDim.x);
}
extern "C" __global__ void rs_post(const unsigned char *c, unsigned char *y, long long nbytes) {
    hrx_resident_post(c, nbytes, y, nbytes, threadIdx.x, blockDim.x);
}
"""

#: The NPU stage (C build): forward (A, B) -> backward (C = A @ B, FP32, k order).
STEP_C = r"""
static void hrx_resident_step(const uint8_t *in, int64_t in_bytes, uint8_t *out, int64_t out_bytes) {
    int64_t m = out_bytes / 256;
    const uint16_t *a = (const uint16_t *)in, *b = a + 64 * m;
    float *c = (float *)out, af[64], bf[64];
    (void)in_bytes;
    for (int64_t t = 0; t < m; ++t) {
        for (int i = 0; i < 64; ++i) { af[i] = hrx_bf16_to_f32(a[t * 64 + i]); bf[i] = hrx_bf16_to_f32(b[t * 64 + i]); }
        for (int i = 0; i < 8; ++i)
            for (int j = 0; j < 8; ++j) {
                float acc = 0.0f;
                for (int k = 0; k < 8; ++k) acc += af[i * 8 + k] * bf[k * 8 + j];
                c[t * 64 + i * 8 + j] = acc;
            }
    }
}
"""


def to_matrices(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A and B (BF16 bits, uint16) of request values ``x``: two 4-bit fields of the transform, minus 8."""
    y = int_transform_reference(x)
    a = ((y & 15).astype(np.int32) - 8).astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    b = (((y >> 4) & 15).astype(np.int32) - 8).astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    return a, b


def reference(x: np.ndarray) -> np.ndarray:
    """The response to request ``x``, computed on the CPU."""
    a, b = to_matrices(x)
    return epilogue_reference(matmul8x8_reference(a, b).reshape(-1), ALPHA, BETA)


def _pre_host(req: np.ndarray, fwd: np.ndarray) -> None:
    a, b = to_matrices(req.view(np.uint32))
    half = fwd.nbytes // 2
    fwd[:half] = a.view(np.uint8)
    fwd[half:] = b.view(np.uint8)


def _post_host(bwd: np.ndarray, rsp: np.ndarray) -> None:
    rsp.view(np.float32)[:] = epilogue_reference(bwd.view(np.float32), ALPHA, BETA)


def _step_numpy(fwd: np.ndarray, bwd: np.ndarray) -> None:
    half = fwd.nbytes // 2
    bwd.view(np.float32)[:] = matmul8x8_reference(fwd[:half], fwd[half:]).reshape(-1)


def _rs_pre_host(x: np.ndarray, ab: np.ndarray, nbytes: np.int64) -> None:
    _pre_host(x[:nbytes], ab[:nbytes])


def _rs_post_host(c: np.ndarray, y: np.ndarray, nbytes: np.int64) -> None:
    _post_host(c[:nbytes], y[:nbytes])


RS_PRE = hrx.Kernel("rs_pre", buffers=("read", "write"), scalars=(np.int64,), host=_rs_pre_host, cuda=STANDALONE_CUDA)
RS_POST = hrx.Kernel("rs_post", buffers=("read", "write"), scalars=(np.int64,), host=_rs_post_host, cuda=STANDALONE_CUDA)


def gpu_participant_kernel() -> hrx.Kernel:
    """The resident GPU participant: Python protocol on the host engine, the persistent
    kernel on cuda (and gfx1151, whose compiler reads the same source)."""
    from hrx_gpu.cuda.resident import participant_source

    return host_gpu_kernel("resident_gpu", _pre_host, _post_host, cuda=participant_source(STAGES_CUDA))


def open_session(gpu: Any, npu: Any, m: int, slots: int, *, fabric: Any = None, budget: Any = None,
                 start_timeout: float = 10.0, idle_timeout: float = 10.0, spin: float = 50e-6, columns: int = 1) -> ResidentSession:
    """A session for payloads of ``m`` matrices (not yet submitted)."""
    nbytes = 256 * m
    layout = Layout(slots, nbytes, nbytes, nbytes, nbytes)
    startup = ResidentStartup(gpu, npu, layout, fabric=fabric, budget=budget, start_timeout=start_timeout, idle_timeout=idle_timeout,
                              spin=spin)
    try:
        block = BLOCK if gpu.info.kind == "gpu" else 1
        gpu_part = KernelParticipant("gpu", gpu, gpu_participant_kernel(), block=block)
        prog = load_participant(npu, layout, "hrx_resident_matmul8x8", step_c=STEP_C, step_numpy=_step_numpy, columns=columns)
        npu_part = ProgramParticipant(prog)
        session = ResidentSession(startup, gpu_part, npu_part)
    except BaseException:
        startup.close()
        raise
    session.program = prog  # type: ignore[attr-defined]  # closed by the caller after the session
    return session


def _coherent_profile(fabric: Any, gpu: Any, npu: Any) -> Any:
    """The coherent, host-visible profile both devices reach (what a ResidentStartup picks)."""
    return next(p for p in fabric.allocation_profiles([gpu, npu], coherent=True) if p.host == "coherent")


def _graph_path(gpu: Any, npu: Any, m: int, reps: int, rng: np.random.Generator) -> tuple[float, int]:
    """Median round trip (s) of the same stages through a tracked graph; checks passed."""
    from hrx_core.placement import Fabric

    from ..programs import load_matmul8x8

    nbytes = 256 * m
    fabric = Fabric()
    profile = _coherent_profile(fabric, gpu, npu)
    prog = load_matmul8x8(npu, m)
    times, ok = [], 0
    block = BLOCK if gpu.info.kind == "gpu" else 1
    with Runtime(gpu, RuntimeOptions(observe=False), npu=npu) as rt, profile.allocate(nbytes, fabric=fabric) as ab, \
            profile.allocate(nbytes, fabric=fabric) as c:
        x, y = rt.allocate(nbytes), rt.allocate(nbytes)
        g = rt.graph("resident exchange, host-mediated")
        up = g.upload(x, np.zeros(nbytes, np.uint8), name="request")
        g.compute("gpu pre", lambda r: r.dispatch(RS_PRE, 1, [x, ab.on(gpu)], block=block, scalars=[nbytes]))
        a_v, b_v = ab.on(npu).slice(0, nbytes // 2), ab.on(npu).slice(nbytes // 2, nbytes // 2)
        g.compute("npu matmul", lambda r: prog.record(r, [a_v, b_v, c.on(npu)]), lane="npu")
        g.compute("gpu post", lambda r: r.dispatch(RS_POST, 1, [c.on(gpu), y], block=block, scalars=[nbytes]))
        down = g.download(y, name="response")
        for i in range(reps + 2):
            req = rng.integers(0, 1 << 32, 64 * m, dtype=np.uint32)
            up.write(req.view(np.uint8))
            t = time.perf_counter()
            rt.submit(g).wait()
            got = down.read(np.float32)
            if i >= 2:  # warm-up excluded
                times.append(time.perf_counter() - t)
            ok += int(np.array_equal(got, reference(req)))
        g.close()
        x.close()
        y.close()
    prog.close()
    return statistics.median(times), ok


def run(payloads: int = 64, m: int = 1, slots: int = 8, *, gpu_engine: str | None = None, npu_engine: str | None = None,
        columns: int = 1, spin: float = 50e-6, log: Any = None) -> dict[str, Any]:
    gpu, npu = engines(gpu_engine, npu_engine)
    say = log or (lambda *_: None)
    rng = np.random.default_rng(19)
    passed = failed = 0
    session = open_session(gpu, npu, m, slots, columns=columns, spin=spin)
    try:
        # either order is allowed: the NPU participant first here, then the GPU's
        session.submit_npu()
        session.submit_gpu()
        session.start()
        # one payload at a time: the round trip GPU -> NPU -> GPU plus the host's ends
        rtt = []
        for i in range(payloads + 2):
            req = rng.integers(0, 1 << 32, 64 * m, dtype=np.uint32)
            t = time.perf_counter()
            session.send(req)
            got = session.receive(timeout=30).view(np.float32)
            if i >= 2:
                rtt.append(time.perf_counter() - t)
            ok = np.array_equal(got, reference(req))
            passed, failed = passed + ok, failed + (not ok)
        # pipelined: up to `slots` payloads in flight
        reqs = [rng.integers(0, 1 << 32, 64 * m, dtype=np.uint32) for _ in range(payloads)]
        t = time.perf_counter()
        inflight: list[np.ndarray] = []
        outs = []
        for req in reqs:
            if len(inflight) == slots:
                outs.append(session.receive(timeout=30).view(np.float32))
                inflight.pop(0)
            session.send(req)
            inflight.append(req)
        while inflight:
            outs.append(session.receive(timeout=30).view(np.float32))
            inflight.pop(0)
        pipelined = time.perf_counter() - t
        for req, got in zip(reqs, outs):
            ok = np.array_equal(got, reference(req))
            passed, failed = passed + ok, failed + (not ok)
        counts = session.stop(timeout=30)
        states = session.states()
    finally:
        session.close()
        session.program.close()  # type: ignore[attr-defined]
    graph_s, graph_ok = _graph_path(gpu, npu, m, max(5, min(payloads, 50)), rng)
    resident_ms = statistics.median(rtt) * 1e3
    nbytes = 256 * m
    result = {
        "example": "resident_exchange", "gpu": gpu.name, "npu": npu.name, "payloads": payloads, "m": m, "slots": slots,
        "resident_roundtrip_ms": resident_ms, "graph_roundtrip_ms": graph_s * 1e3,
        "speedup": graph_s * 1e3 / resident_ms if resident_ms else float("nan"),
        "pipelined_payloads_per_s": payloads / pipelined,
        "exchange_gbps": 2 * nbytes * payloads / pipelined / 1e9,
        "checks_passed": passed + graph_ok, "checks_failed": failed + (max(5, min(payloads, 50)) + 2 - graph_ok),
        "counts": counts, "states": states,
    }
    result["ok"] = result["checks_failed"] == 0 and states["gpu"] == "DONE" and states["npu"] == "DONE"
    say(summary(result))
    return result


# -- throughput: the GPU generates large payloads, the NPU transforms them, the GPU verifies --------

KEY32 = 0x5A5A5A5A

#: GPU stages of the throughput exchange: a request carries a seed; the GPU fills the
#: forward payload (word 0 the seed, word i seed * GOLDEN + i), the NPU xors it with
#: 0x5A, the GPU checks every word of the backward payload and responds (seed, wrong words).
STREAM_CUDA = r"""
/* 16-byte accesses (slots are 64-byte aligned, payloads multiples of 64 bytes): fewer,
   wider transactions over the bus to the coherent memory */
__device__ void hrx_resident_pre(const unsigned char *in, long long in_bytes, unsigned char *out, long long out_bytes, int tid, int n) {
    unsigned int seed = *(const unsigned int *)in;
    uint4 *o = (uint4 *)out;
    for (long long q = tid; q < out_bytes / 16; q += n) {
        unsigned int i = (unsigned int)(q * 4), base = seed * 2654435761u + i;
        o[q] = make_uint4(q == 0 ? seed : base, base + 1u, base + 2u, base + 3u);
    }
}
__device__ void hrx_resident_post(const unsigned char *in, long long in_bytes, unsigned char *out, long long out_bytes, int tid, int n) {
    __shared__ unsigned int bad;
    const uint4 *w = (const uint4 *)in;
    unsigned int seed = ((const unsigned int *)in)[0] ^ 0x5A5A5A5Au, mine = 0;
    if (tid == 0) bad = 0;
    __syncthreads();
    for (long long q = tid; q < in_bytes / 16; q += n) {
        uint4 v = w[q];
        unsigned int i = (unsigned int)(q * 4), base = seed * 2654435761u + i;
        mine += (q != 0 && (v.x ^ 0x5A5A5A5Au) != base) + ((v.y ^ 0x5A5A5A5Au) != base + 1u)
              + ((v.z ^ 0x5A5A5A5Au) != base + 2u) + ((v.w ^ 0x5A5A5A5Au) != base + 3u);
    }
    if (mine) atomicAdd(&bad, mine);
    __syncthreads();
    if (tid == 0) { ((unsigned int *)out)[0] = seed; ((unsigned int *)out)[1] = bad; }
}
"""

STREAM_STEP_C = r"""
static void hrx_resident_step(const uint8_t *in, int64_t in_bytes, uint8_t *out, int64_t out_bytes) {
    int64_t n = in_bytes < out_bytes ? in_bytes : out_bytes, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, in + i, 8);
        v ^= 0x5A5A5A5A5A5A5A5AULL;
        memcpy(out + i, &v, 8);
    }
    for (; i < n; ++i) out[i] = in[i] ^ 0x5A;
}
"""


def _pattern(seed: int, nbytes: int) -> np.ndarray:
    words = np.arange(nbytes // 4, dtype=np.uint32)
    out = np.uint32(seed * GOLDEN & 0xFFFFFFFF) + words
    out[0] = seed
    return out


def _gen_host(req: np.ndarray, fwd: np.ndarray) -> None:
    fwd.view(np.uint32)[:] = _pattern(int(req.view(np.uint32)[0]), fwd.nbytes)


def _xor_numpy(fwd: np.ndarray, bwd: np.ndarray) -> None:
    np.bitwise_xor(fwd, np.uint8(0x5A), out=bwd)


def _verify_host(bwd: np.ndarray, rsp: np.ndarray) -> None:
    w = bwd.view(np.uint32) ^ np.uint32(KEY32)
    seed = int(w[0])
    bad = int(np.count_nonzero(w[1:] != _pattern(seed, bwd.nbytes)[1:]))
    rsp.view(np.uint32)[:2] = (seed, bad)


def coherent_bandwidth(gpu: Any, npu: Any, nbytes: int, reps: int) -> dict[str, float]:
    """GB/s each side reaches copying ``nbytes`` between two buffers of the coherent
    attachment: the GPU with a device copy, the NPU with a copy program."""
    from hrx_core.placement import Fabric

    from ..programs import load_xor_copy

    fabric = Fabric()
    profile = _coherent_profile(fabric, gpu, npu)
    prog = load_xor_copy(npu, nbytes)
    with profile.allocate(nbytes, fabric=fabric) as a, profile.allocate(nbytes, fabric=fabric) as b:
        gs, ns = gpu.stream(), npu.stream()
        inv = prog.invocation([a.on(npu), b.on(npu)])
        gpu_t, npu_t = [], []
        for i in range(reps + 1):
            t = time.perf_counter()
            gs.copyto(b.on(gpu), a.on(gpu)).wait()
            if i:
                gpu_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            inv.launch(ns).wait()
            if i:
                npu_t.append(time.perf_counter() - t)
    prog.close()
    return {"gpu_gbps": nbytes / statistics.median(gpu_t) / 1e9, "npu_gbps": nbytes / statistics.median(npu_t) / 1e9}


def throughput(nbytes: int = 1 << 20, payloads: int = 64, slots: int = 4, *, gpu_engine: str | None = None,
               npu_engine: str | None = None, reps: int = 5, spin: float = 50e-6, log: Any = None) -> dict[str, Any]:
    """Payload throughput of a resident exchange of ``nbytes`` payloads (the GPU
    generates them, the NPU transforms them, the GPU verifies every word) against the
    coherent bandwidth both sides reach in the same run (``coherent_bandwidth``)."""
    from hrx_gpu.cuda.resident import participant_source

    gpu, npu = engines(gpu_engine, npu_engine)
    nbytes = max(64, nbytes // 64 * 64)
    layout = Layout(slots, 16, nbytes, nbytes, 16)
    startup = ResidentStartup(gpu, npu, layout, spin=spin)
    kernel = host_gpu_kernel("resident_stream", _gen_host, _verify_host, cuda=participant_source(STREAM_CUDA))
    prog = load_participant(npu, layout, "hrx_resident_xor", step_c=STREAM_STEP_C, step_numpy=_xor_numpy)
    session = ResidentSession(startup, KernelParticipant("gpu", gpu, kernel, block=1024 if gpu.info.kind == "gpu" else 1),
                              ProgramParticipant(prog))
    bad = wrong_seed = 0
    try:
        session.submit_gpu()
        session.submit_npu()
        session.start()
        seeds = list(range(1, payloads + 1))
        for seed in seeds[:slots]:  # warm-up
            session.send(np.array([seed], np.uint32))
        for seed in seeds[:slots]:
            session.receive(timeout=60)
        t = time.perf_counter()
        pending = 0
        out = []
        for seed in seeds:
            if pending == slots:
                out.append(session.receive(timeout=60).view(np.uint32))
                pending -= 1
            session.send(np.array([seed], np.uint32))
            pending += 1
        while pending:
            out.append(session.receive(timeout=60).view(np.uint32))
            pending -= 1
        elapsed = time.perf_counter() - t
        for seed, r in zip(seeds, out):
            wrong_seed += int(r[0]) != seed
            bad += int(r[1])
        session.stop(timeout=60)
    finally:
        session.close()
        prog.close()
    bw = coherent_bandwidth(gpu, npu, nbytes, reps)
    gbps = 2 * nbytes * payloads / elapsed / 1e9
    bound = 2 * min(bw["gpu_gbps"], bw["npu_gbps"])
    result = {"gpu": gpu.name, "npu": npu.name, "bytes": nbytes, "payloads": payloads, "exchange_gbps": gbps,
              "coherent_bound_gbps": bound, **bw, "ratio": gbps / bound, "wrong_words": bad, "wrong_seeds": wrong_seed,
              "ok": bad == 0 and wrong_seed == 0}
    if log is not None:
        log(f"resident throughput {gpu.name} <-> {npu.name}, {nbytes:,}-byte payloads: {gbps:.2f} GB/s exchanged "
            f"(GPU->NPU + NPU->GPU) vs {bound:.2f} GB/s (2 x the slower side's coherent copy: GPU {bw['gpu_gbps']:.2f}, "
            f"NPU {bw['npu_gbps']:.2f} GB/s); {bad} wrong words")
    return result


def summary(r: dict[str, Any]) -> str:
    rows = [
        ["resident session", f"{r['resident_roundtrip_ms']:.4f}", f"{r['pipelined_payloads_per_s']:.0f}/s pipelined"],
        ["graph + host completion checks", f"{r['graph_roundtrip_ms']:.4f}", ""],
    ]
    return "\n".join([
        f"resident_exchange {r['gpu']} <-> {r['npu']}: {r['payloads']} payloads of {r['m']} 8x8 matrices, {r['slots']} slots",
        table(rows, ["path", "round trip ms (median)", "rate"]),
        f"resident is {r['speedup']:.1f}x faster per round trip; {r['checks_passed']} outputs exact, {r['checks_failed']} wrong; "
        f"participants {r['states']['gpu']} / {r['states']['npu']}",
    ])


def main(argv: list[str] | None = None) -> int:
    from hrx_core.cli.args import count

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--payloads", type=count("--payloads", limit=1 << 20), default=64)
    ap.add_argument("--m", type=count("--m", limit=1 << 16), default=1, help="8x8 matrix pairs per payload")
    ap.add_argument("--slots", type=count("--slots", limit=1 << 12), default=8)
    ap.add_argument("--spin-us", type=float, default=50.0, help="how long participants poll without backing off after progress")
    engine_arguments(ap)
    args = ap.parse_args(argv)
    if not 0 <= args.spin_us <= 1e6:
        ap.error("--spin-us: expected 0..1000000")
    r = run(args.payloads, args.m, args.slots, gpu_engine=args.gpu_engine, npu_engine=args.npu_engine, columns=args.columns,
            spin=args.spin_us * 1e-6, log=print)
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
