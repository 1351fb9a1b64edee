"""The examples and ``hrx demo`` at small sizes (each checks its own outputs), on every
NPU engine: npu-host, and xdna on the simulated Strix Halo (the GPU side is the host
engine, or cuda on a GPU machine; the amdgpu pairing comes with that engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import NPU_ENGINES, simulated_amd, skip_unless_shared_memory
from hrx_npu.examples import gemm_pipeline, gpu_npu_parallel, resident_exchange, shared_bench, shared_roundtrip

from hrx_core.execution import validate_trace


def _skip_unless_simulated(npu_engine: str) -> None:
    if npu_engine == "xdna":
        pytest.importorskip("hrx_amdf")
        if not simulated_amd():
            pytest.skip("the examples' NPU programs are host builds: xdna runs them on the simulation (hardware: scripts/test-npu-hardware.sh)")


@pytest.fixture(params=NPU_ENGINES)
def npu_engine(request):
    _skip_unless_simulated(request.param)
    return request.param


def _env(npu_engine: str) -> dict[str, str]:
    return dict(os.environ, HRX_ENGINE="host")


def test_gpu_npu_parallel(gpu, npu_engine, tmp_path):
    trace = tmp_path / "trace.json"
    r = gpu_npu_parallel.run(50_000, 40, 3, str(trace), gpu_engine=gpu.info.engine, npu_engine=npu_engine, columns=2)
    assert r["ok"], r
    assert r["npu"].startswith(npu_engine)
    assert r["checks_failed"] == 0 and r["checks_passed"] == 6 * (1 + 3)
    assert r["new_native_objects"] == {"gpu_allocations": 0, "npu_allocations": 0, "npu_imports": 0}
    assert r["sequential_ms"] > 0 and r["parallel_ms"] > 0 and r["ideal_speedup"] >= 1
    data = json.loads(trace.read_text())
    validate_trace(data)
    names = {e.get("name") for e in data["traceEvents"]}
    assert {"gpu int transform", "npu matmul8x8 bf16"} <= names


def test_gemm_pipeline(gpu, npu_engine):
    skip_unless_shared_memory(gpu, npu_engine)
    r = gemm_pipeline.run(24, 3, 2, gpu_engine=gpu.info.engine, npu_engine=npu_engine)
    assert r["ok"], r
    assert r["checks_passed"] == 3 * (1 + 2 * 2)


def test_shared_examples(gpu, npu_engine):
    skip_unless_shared_memory(gpu, npu_engine)
    r = shared_roundtrip.run(8192, 2, gpu_engine=gpu.info.engine, npu_engine=npu_engine)
    assert r["ok"] and r["coherent_ok"] == 2, r
    if gpu.info.host_mappable:
        assert r["cache_maintained_ok"] == 2, r
    r = shared_bench.run(16384, 3, gpu_engine=gpu.info.engine, npu_engine=npu_engine)
    assert r["ok"] and [s["bytes"] for s in r["sizes"]] == [4096, 16384]


def test_resident_exchange(gpu, npu_engine):
    skip_unless_shared_memory(gpu, npu_engine)
    r = resident_exchange.run(6, m=3, slots=2, gpu_engine=gpu.info.engine, npu_engine=npu_engine)
    assert r["ok"], r
    assert r["checks_failed"] == 0 and r["checks_passed"] == (6 + 2) + 6 + (6 + 2)  # one at a time (+2 warm-up), pipelined, graph path
    assert r["counts"] == {"requests": 14, "responses": 14, "gpu": 14, "npu": 14}
    assert r["resident_roundtrip_ms"] > 0 and r["graph_roundtrip_ms"] > 0


def test_resident_throughput_checks_every_word(gpu, npu_engine):
    skip_unless_shared_memory(gpu, npu_engine)
    r = resident_exchange.throughput(4096, 6, 2, gpu_engine=gpu.info.engine, npu_engine=npu_engine, reps=1)
    assert r["ok"] and r["wrong_words"] == 0 and r["exchange_gbps"] > 0 and r["coherent_bound_gbps"] > 0, r
    # the GPU's verification sees a wrong word
    fwd = np.zeros(64, np.uint8)
    resident_exchange._gen_host(np.array([7, 0, 0, 0], np.uint32).view(np.uint8), fwd)
    bwd, rsp = fwd ^ np.uint8(0x5A), np.zeros(16, np.uint8)
    resident_exchange._verify_host(bwd, rsp)
    assert list(rsp.view(np.uint32)[:2]) == [7, 0]
    bwd[9] ^= 1
    resident_exchange._verify_host(bwd, rsp)
    assert list(rsp.view(np.uint32)[:2]) == [7, 1]


def _hrx(*args, cwd, npu_engine="npu-host", **env):
    return subprocess.run([sys.executable, "-m", "hrx_core.cli.main", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(_env(npu_engine), **env), timeout=300, check=False)


QUICK_DEMO = ("demo", "--quick", "--n", "20000", "--m", "16", "--samples", "2", "--requests", "2", "--rounds", "1")


@pytest.mark.parametrize("npu_engine", NPU_ENGINES)
def test_hrx_demo_doctor_prepare(tmp_path, npu_engine):
    _skip_unless_simulated(npu_engine)
    trace = tmp_path / "traces" / "demo.json"
    trace.parent.mkdir()
    r = _hrx(*QUICK_DEMO, "--npu-engine", npu_engine, "--trace", str(trace), cwd=tmp_path, npu_engine=npu_engine)
    assert r.returncode == 0, r.stdout + r.stderr
    for word in ("gpu_npu_parallel", "gemm_pipeline", "resident_exchange", "participants DONE/DONE", "sequential", "parallel", "ok:",
                 "not NPU hardware", str(trace), f"NPU side: {npu_engine}:0"):
        assert word in r.stdout, word
    validate_trace(json.loads(trace.read_text()))
    r = _hrx("doctor", cwd=tmp_path, npu_engine=npu_engine)
    assert r.returncode == 0 and "npu-host" in r.stdout and "not NPU hardware" in r.stdout
    if npu_engine == "xdna":
        text = " ".join(r.stdout.split())  # doctor wraps long cells to fit 100 columns
        assert "8 columns x 6 rows" in text and "used only when named" in text, r.stdout
    r = _hrx("prepare", cwd=tmp_path, npu_engine=npu_engine)
    assert r.returncode == 0 and "npu-host" in r.stdout, r.stdout
    if npu_engine == "xdna":
        assert "xdna: simulated NPU5" in r.stdout, r.stdout


def test_hrx_demo_writes_its_trace_outside_the_working_tree(tmp_path):
    """By default the trace goes to the HRX cache directory (here HRX_CACHE_DIR), the
    output says where, and the working directory stays untouched; '' writes none."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    r = _hrx(*QUICK_DEMO, cwd=work, HRX_CACHE_DIR=str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    trace = cache / "demo" / "trace.json"
    assert f"trace: {trace}" in r.stdout, r.stdout
    validate_trace(json.loads(trace.read_text()))
    assert list(work.iterdir()) == []
    trace.unlink()
    r = _hrx(*QUICK_DEMO, "--trace", "", cwd=work, HRX_CACHE_DIR=str(cache))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "trace:" not in r.stdout and not trace.exists() and list(work.iterdir()) == []


@pytest.mark.parametrize("npu_engine", NPU_ENGINES)
@pytest.mark.parametrize("script", ["gpu_npu_parallel.py 4096 8 1", "gemm_pipeline.py --m 8 --requests 2 --rounds 1",
                                    "shared_roundtrip.py --bytes 4096 --rounds 1", "shared_bench.py --max-bytes 4096 --reps 1",
                                    "resident_exchange.py --payloads 4 --m 2 --slots 2"])
def test_example_scripts(script, npu_engine, tmp_path):
    _skip_unless_simulated(npu_engine)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    name, *args = script.split()
    r = subprocess.run([sys.executable, os.path.join(root, "examples", name), *args, "--npu-engine", npu_engine], capture_output=True,
                       text=True, cwd=tmp_path, env=_env(npu_engine), timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
