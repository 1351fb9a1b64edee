"""``hrx pipeline``: a small pipeline that proves an engine end to end.

upload -> kernel (y = a*x + y) -> recorded access graph replayed with new inputs
-> download, each checked against numpy.
"""

from __future__ import annotations

import time

import numpy as np

from .. import plugins as reg
from ..kernel import Kernel
from .args import check_host_memory

AXPY_CUDA = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
"""


def _axpy_host(x: np.ndarray, y: np.ndarray, a: np.float32, n: np.uint32) -> None:
    xf, yf = x.view(np.float32)[:n], y.view(np.float32)[:n]
    yf += a * xf


AXPY = Kernel("axpy", buffers=("read", "read_write"), scalars=(np.float32, np.uint32), host=_axpy_host, cuda=AXPY_CUDA)


def run(engine: str | None, elements: int) -> int:
    n = int(elements)
    check_host_memory("--elements", 6 * 4 * n)  # x, y, x2, their results and checks
    dev = reg.device(engine)
    s = dev.stream()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    t0 = time.perf_counter()
    bx = s.allocate_from(x)
    by = s.allocate(y.nbytes)
    s.upload_blocking(by, y)
    block = 256
    grid = -(-n // block)
    s.dispatch(AXPY, grid, [bx, by], block=block, scalars=(2.0, n))
    out = s.download(by).view(np.float32)
    ok_eager = np.array_equal(out, np.float32(2.0) * x + y)

    g = s.access_graph()
    g.input("x", bx)
    g.dispatch(AXPY, grid, [bx, by], block=block, scalars=(0.5, n))
    g.dispatch(AXPY, grid, [bx, by], block=block, scalars=(0.5, n))
    x2 = rng.standard_normal(n, dtype=np.float32)
    bx2 = s.allocate_from(x2)
    expect = out.copy()
    for xs in (bx, bx2):
        g.launch(inputs={"x": xs})
        xv = x if xs is bx else x2
        expect = np.float32(0.5) * xv + expect
        expect = np.float32(0.5) * xv + expect
    got = s.download(by).view(np.float32)
    ok_graph = np.array_equal(got, expect)
    dt = time.perf_counter() - t0
    print(f"device      {dev.name}  ({dev.info.name})")
    print(f"elements    {n}")
    print(f"eager axpy  {'ok' if ok_eager else 'MISMATCH'}")
    print(f"graph x2    {'ok' if ok_graph else 'MISMATCH'} (replayed with a rebound input, {g.launches} launches)")
    print(f"wall time   {dt * 1e3:.1f} ms (includes compilation and first touch)")
    g.close()
    s.synchronize()
    return 0 if ok_eager and ok_graph else 1
