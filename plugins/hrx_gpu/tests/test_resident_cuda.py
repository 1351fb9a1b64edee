"""The resident exchange's persistent GPU participant (hrx_gpu.cuda.resident).

Without a GPU: its CUDA source compiles for sm_90 with nvcc where the toolkit is
installed, with system-scope acquire loads, release stores and fences and the
global timer in the PTX. On the H200 (gpu marker): it waits for RUN on its own clock
and gives up, it is stopped by ABORT while its peer stalls, and it never leaves the
GPU or the process hung -- the device runs ordinary work right after.
The exchange itself on cuda + npu-host is in plugins/hrx_npu/tests/test_resident.py.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

hrx_npu = pytest.importorskip("hrx_npu")

from hrx_gpu.cuda.resident import ENTRY, participant_source
from hrx_npu.examples import resident_exchange as rx
from hrx_npu.resident import ProgramParticipant, load_participant

import hrx_core as hrx
from hrx_core.errors import InvalidArgument
from hrx_core.resident import KernelParticipant, Layout, ResidentSession, ResidentStartup


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)


@pytest.mark.parametrize("stages", ["STAGES_CUDA", "STREAM_CUDA"])
def test_participant_source_compiles_to_system_scope_ptx(tmp_path: Path, stages: str) -> None:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("no nvcc (the CUDA toolkit) on this machine")
    src = tmp_path / "participant.cu"
    src.write_text(participant_source(getattr(rx, stages)))
    out = subprocess.run([nvcc, "-arch=sm_90", "-ptx", "-o", str(tmp_path / "p.ptx"), str(src)], capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    ptx = (tmp_path / "p.ptx").read_text()
    assert f".entry {ENTRY}" in ptx
    for needle in ("ld.acquire.sys.global.b64", "st.release.sys.global.b64", "%globaltimer", "nanosleep", "membar.sys"):  # membar.sys: __threadfence_system
        assert needle in ptx, needle
    with pytest.raises(InvalidArgument):
        participant_source("__device__ void nothing() {}")


@pytest.fixture
def cuda_pair(cuda_status):  # type: ignore[no-untyped-def]
    gpu = hrx.open_device("cuda")
    npu = hrx_npu.open_device("npu-host")
    yield gpu, npu
    npu.close()
    gpu.close()


def _session(gpu, npu, step, **timeouts):  # type: ignore[no-untyped-def]
    layout = Layout(4, 256, 256, 256, 256)
    budget = hrx.MemoryBudget(1 << 30)
    startup = ResidentStartup(gpu, npu, layout, budget=budget, **timeouts)
    prog = load_participant(npu, layout, "rs_cuda_test", step_numpy=step)
    session = ResidentSession(startup, KernelParticipant("gpu", gpu, rx.gpu_participant_kernel(), block=rx.BLOCK),
                              ProgramParticipant(prog))
    return session, prog, budget


def _gpu_still_runs(gpu) -> None:  # type: ignore[no-untyped-def]
    x = gpu.stream().allocate_from(np.arange(1024, dtype=np.uint32))
    y = gpu.allocate(4096)
    s = gpu.stream()
    s.dispatch(rx.RS_PRE, 1, [x, y], block=256, scalars=[4096]).wait(30)
    a, _ = rx.to_matrices(np.arange(1024, dtype=np.uint32))
    assert np.array_equal(s.download(y)[:2048].view(np.uint16), a)
    x.close()
    y.close()


@pytest.mark.gpu
def test_persistent_kernel_gives_up_waiting_for_run_on_its_own_clock(cuda_pair) -> None:  # type: ignore[no-untyped-def]
    gpu, npu = cuda_pair
    session, prog, budget = _session(gpu, npu, rx._step_numpy, start_timeout=0.5)
    t = time.monotonic()
    session.submit_gpu()  # the NPU side never comes; nobody calls start()
    states = session.wait(timeout=30)
    assert (states["gpu"], states["gpu_reason"]) == ("TIMED_OUT", "RUN never came (start timeout)")
    assert time.monotonic() - t < 20
    assert session.close() and budget.used_bytes == 0
    prog.close()
    _gpu_still_runs(gpu)


@pytest.mark.gpu
def test_persistent_kernel_is_stopped_by_abort_while_its_peer_stalls(cuda_pair) -> None:  # type: ignore[no-untyped-def]
    gpu, npu = cuda_pair
    gate = threading.Event()

    def stalls(fwd, bwd):  # type: ignore[no-untyped-def]
        gate.wait(60)
        rx._step_numpy(fwd, bwd)

    session, prog, budget = _session(gpu, npu, stalls, start_timeout=60, idle_timeout=60)
    session.submit_gpu()
    session.submit_npu()
    session.start()
    session.send(np.arange(64, dtype=np.uint32))
    t = time.monotonic()
    assert session.close(timeout=1.0) is False  # the NPU stage is still inside its stall: quarantined
    assert time.monotonic() - t < 10
    assert session.states()["gpu"] == "ABORTED"  # the kernel left at ABORT, long before its deadlines
    assert session._launched["gpu"].is_complete
    _gpu_still_runs(gpu)
    gate.set()
    deadline = time.monotonic() + 30
    while session.owned and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not session.owned and budget.used_bytes == 0
    prog.close()
