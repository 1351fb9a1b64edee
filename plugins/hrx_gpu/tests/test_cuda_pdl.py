"""Programmatic dependent launch inside CUDA graphs, on the GPU.

A kernel declared ``programmatic=True`` waits for its predecessors itself
(``griddepcontrol.wait``), so a graph joins it to its kernel predecessors with
programmatic edges and the driver may launch it while they still run. The consumer
below copies what a slow producer (a clock spin, then an increment of every element)
wrote: each replay must see the producer's whole output, never the previous one's.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_status")]

PRODUCE = r"""
extern "C" __global__ void produce(unsigned int* a, unsigned int n, unsigned long long spin) {
    const unsigned long long start = clock64();
    while ((unsigned long long)(clock64() - start) < spin) { }
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += 1u;
}
"""

CONSUME = r"""
extern "C" __global__ void consume(const unsigned int* a, unsigned int* b, unsigned int n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] = a[i];
}
"""


def test_programmatic_consumer_sees_its_producer_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    import hrx_core as hrx
    from hrx_gpu.cuda.graph import CudaGraph

    edges = []
    add = CudaGraph._add_programmatic_edges

    def counted(self, graph, sources, node, context):  # type: ignore[no-untyped-def]
        edges.append(len(sources))
        return add(self, graph, sources, node, context)

    monkeypatch.setattr(CudaGraph, "_add_programmatic_edges", counted)
    monkeypatch.setenv("HRX_CUDA_PDL", "1")  # opt-in (see CudaDevice.programmatic_edges)
    from hrx_gpu.cuda.device import programmatic_edges_usable

    dev = hrx.device("cuda")
    usable = programmatic_edges_usable(dev.native.driver, dev.info.properties["compute_capability"])
    monkeypatch.setattr(dev.native, "programmatic_edges", usable)
    n = 1 << 20
    produce = hrx.Kernel("produce", buffers=("read_write",), scalars=(np.uint32, np.uint64), cuda=PRODUCE)
    consume = hrx.Kernel("consume", buffers=("read", "write"), scalars=(np.uint32,), cuda=CONSUME, programmatic=True)
    s = dev.stream()
    a, b = dev.allocate(4 * n), dev.allocate(4 * n)
    s.fill(a, np.uint32(0))
    s.fill(b, np.uint32(0))
    g = s.access_graph()
    grid = n // 256
    g.dispatch(produce, grid, [a], block=256, scalars=(np.uint32(n), np.uint64(200_000)))
    g.dispatch(consume, grid, [a.view().read(), b.view().write()], block=256, scalars=(np.uint32(n),))
    for replay in range(1, 11):
        g.launch(s)
        got = s.download(b).view(np.uint32)
        assert (got == replay).all(), f"replay {replay}: {np.count_nonzero(got != replay)} elements read early"
    assert edges == ([1] if usable else [])
    g.close()
    a.close()
    b.close()
