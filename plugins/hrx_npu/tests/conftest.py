"""Fixtures: a fresh npu-host device per test (its own array and columns), and the
GPU-side engines present (host always; cuda on a GPU machine)."""

from __future__ import annotations

import hrx_npu
import numpy as np
import pytest
from hrx_npu import BufferContract, KernelContract

import hrx_core as hrx
from hrx_core.testing import engine_params, open_device


@pytest.fixture
def npu():
    dev = hrx_npu.open_device("npu-host")
    yield dev
    dev.close()


@pytest.fixture(params=engine_params())
def gpu(request):
    return open_device(request.param)


def numpy_artifact(fn, entry=None):
    """A numpy program (target "host") for npu-host."""
    return hrx.compile(fn, target="host", entry=entry or fn.__name__)


def rw_contract(*lengths: int, scratch: int = 0) -> KernelContract:
    return KernelContract([BufferContract.read_write(n) for n in lengths], scratch_bytes=scratch)


def add_one(x, *, scratch, column, columns):
    """Adds 1 to every uint32 of the column's share."""
    v = x.view(np.uint32)
    per = -(-len(v) // columns)
    v[column * per : (column + 1) * per] += 1
