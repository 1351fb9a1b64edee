"""Kernels and helpers shared by the model-layer tests (host numpy + CUDA C++)."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.execution import RuntimeOptions
from hrx_core.model import ModelContext

from .kernels import launch_1d

_ADD_BYTES_CUDA = r"""
extern "C" __global__ void add_bytes(const unsigned char* a, const unsigned char* b, unsigned char* out, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (unsigned char)(a[i] + b[i]);
}
"""


def _add_bytes(a: np.ndarray, b: np.ndarray, out: np.ndarray, n: np.uint32) -> None:
    np.add(a[:n], b[:n], out=out[:n])


#: out[i] = a[i] + b[i] (bytes, wrapping)
ADD_BYTES = hrx.Kernel(
    "add_bytes", buffers=("read", "read", "write"), scalars=(np.uint32,), host=_add_bytes, cuda=_ADD_BYTES_CUDA
)

_FILL_BYTE_CUDA = r"""
extern "C" __global__ void set_bytes(unsigned char* out, unsigned char value, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
"""


def _set_bytes(out: np.ndarray, value: np.uint8, n: np.uint32) -> None:
    out[:n] = value


#: out[i] = value
SET_BYTES = hrx.Kernel("set_bytes", buffers=("write",), scalars=(np.uint8, np.uint32), host=_set_bytes, cuda=_FILL_BYTE_CUDA)


def grid(n: int) -> dict[str, int]:
    g, b = launch_1d(n, 64)
    return {"grid": g, "block": b}


@pytest.fixture
def budget() -> hrx.MemoryBudget:
    return hrx.MemoryBudget(64 << 20, name="model")


@pytest.fixture
def ctx(dev, budget):
    context = ModelContext(dev, RuntimeOptions(memory_budget=budget, observe=False))
    yield context
    context.close()
