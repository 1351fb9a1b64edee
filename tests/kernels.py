"""Test kernels: each has a host callable and CUDA C++, so one test runs on every engine."""

from __future__ import annotations

import numpy as np

import hrx_core as hrx
from hrx_core.testing import ADD_U32  # noqa: F401 - shared with the shipped conformance suite

_XOR_BYTES_CUDA = r"""
extern "C" __global__ void xor_bytes(const unsigned char* src, unsigned char* dst, unsigned char key, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] ^ key;
}
"""


def _xor_bytes(src: np.ndarray, dst: np.ndarray, key: np.uint8, n: np.uint32) -> None:
    np.bitwise_xor(src[:n], key, out=dst[:n])


#: dst[i] = src[i] ^ key, byte-wise; used by the property tests.
XOR_BYTES = hrx.Kernel(
    "xor_bytes", buffers=("read", "write"), scalars=(np.uint8, np.uint32), host=_xor_bytes, cuda=_XOR_BYTES_CUDA
)

_INC_BYTES_CUDA = r"""
extern "C" __global__ void inc_bytes(unsigned char* data, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] = (unsigned char)(data[i] + 1);
}
"""


def _inc_bytes(data: np.ndarray, n: np.uint32) -> None:
    data[:n] += np.uint8(1)


#: data[i] += 1 in place, byte-wise.
INC_BYTES = hrx.Kernel("inc_bytes", buffers=("read_write",), scalars=(np.uint32,), host=_inc_bytes, cuda=_INC_BYTES_CUDA)

_EMPTY_CUDA = r"""extern "C" __global__ void empty() {}"""
EMPTY = hrx.Kernel("empty", buffers=0, host=lambda: None, cuda=_EMPTY_CUDA)

_SLEEPY_CUDA = r"""
extern "C" __global__ void sleepy(unsigned int* flag, unsigned long long ns) {
    unsigned long long start = clock64();
    // spin for roughly ns nanoseconds at ~2 GHz
    while ((unsigned long long)(clock64() - start) < ns * 2ULL) { }
    flag[0] = 1;
}
"""


def _sleepy(flag: np.ndarray, ns: np.uint64) -> None:
    import time

    time.sleep(float(ns) * 1e-9)
    flag.view(np.uint32)[0] = 1


#: Takes about ``ns`` nanoseconds, then writes 1 to flag[0]: for timeouts and ordering.
SLEEPY = hrx.Kernel("sleepy", buffers=("write",), scalars=(np.uint64,), host=_sleepy, cuda=_SLEEPY_CUDA)


def launch_1d(n: int, block: int = 256) -> tuple[int, int]:
    return max(1, -(-n // block)), block
