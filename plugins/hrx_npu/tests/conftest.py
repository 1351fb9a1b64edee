"""Fixtures: a fresh NPU device per test (its own array and columns) of every NPU
engine -- npu-host, and xdna on the simulated Strix Halo -- and the GPU-side engines
present (host always; cuda on a GPU machine)."""

from __future__ import annotations

import os

import hrx_npu
import numpy as np
import pytest
from hrx_npu import BufferContract, KernelContract

import hrx_core as hrx
from hrx_core.testing import engine_params, open_device

#: The NPU engines the suites run on. xdna runs on the simulated NPU5 (test sessions
#: default HRX_AMDF_PROVIDER=fake), where it is available only when named.
NPU_ENGINES = ("npu-host", "xdna")


def simulated_amd() -> bool:
    """Whether the AMD engines run on the simulated Strix Halo in this session."""
    return os.environ.get("HRX_AMDF_PROVIDER", "fake") == "fake"


def skip_unless_shared_memory(gpu, npu_engine: str) -> None:
    """Skips GPU/NPU pairs that cannot share memory: the simulated NPU5 lives in this
    process and no physical GPU (cuda on an H200) reaches its allocations. On the
    simulation xdna shares memory with the host engine and with amdgpu (one provider)."""
    if npu_engine == "xdna" and simulated_amd() and gpu.info.engine not in ("host", "amdgpu"):
        pytest.skip(f"the simulated NPU5 shares no memory with a physical GPU ({gpu.info.engine})")


def open_npu(name: str, **options):
    """A new NPU device of engine ``name``. The suites' programs are host builds, which
    xdna loads only on the simulation (stand-in images); on an NPU they skip, and
    test_xdna_hardware.py runs compiled images instead."""
    if name == "xdna":
        pytest.importorskip("hrx_amdf")
        if not simulated_amd():
            pytest.skip("xdna on libamdf loads compiled .xdna images only; the suites' host-built programs run on the simulation")
    return hrx_npu.open_device(name, **options)


@pytest.fixture(params=NPU_ENGINES)
def npu(request):
    dev = open_npu(request.param)
    yield dev
    dev.close()


@pytest.fixture(params=engine_params())
def gpu(request):
    return open_device(request.param)


def numpy_artifact(fn, entry=None):
    """A numpy program (target "host"): npu-host runs it; xdna on the simulation loads
    it through a stand-in image and runs it as the program's reference."""
    return hrx.compile(fn, target="host", entry=entry or fn.__name__)


def rw_contract(*lengths: int, scratch: int = 0) -> KernelContract:
    return KernelContract([BufferContract.read_write(n) for n in lengths], scratch_bytes=scratch)


def add_one(x, *, scratch, column, columns):
    """Adds 1 to every uint32 of the column's share."""
    v = x.view(np.uint32)
    per = -(-len(v) // columns)
    v[column * per : (column + 1) * per] += 1
