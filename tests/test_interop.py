"""Zero-copy interop: DLPack both ways; torch/cupy on CUDA."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import live_bytes, open_device


def test_numpy_from_dlpack_shares_host_memory():
    dev = hrx.device("host")
    s = dev.stream()
    buf = s.allocate_from(np.arange(16, dtype=np.uint8))
    assert buf.__dlpack_device__() == (1, 0)
    arr = np.from_dlpack(buf)
    assert arr.dtype == np.uint8 and arr.tolist() == list(range(16))
    view = np.from_dlpack(buf.slice(4, 8))
    assert view.tolist() == list(range(4, 12))
    # same memory: a device fill is visible through the array
    s.fill(buf.slice(4, 4), 0xFF).wait()
    assert view[:4].tolist() == [255] * 4
    # the export retains the allocation after the buffer handle is closed
    live = live_bytes(dev)
    buf.close()
    assert live_bytes(dev) == live
    assert arr[0] == 0
    del arr, view
    gc.collect()
    assert live_bytes(dev) == live - 16


def test_unconsumed_capsule_releases_its_reference():
    dev = hrx.device("host")
    buf = dev.allocate(32)
    live = live_bytes(dev)
    capsule = buf.__dlpack__()
    buf.close()
    assert live_bytes(dev) == live
    del capsule
    gc.collect()
    assert live_bytes(dev) == live - 32


def test_host_buffers_have_no_cuda_array_interface():
    buf = hrx.device("host").allocate(8)
    assert not hasattr(buf, "__cuda_array_interface__")


def test_wrap_numpy_on_host():
    dev = hrx.device("host")
    s = dev.stream()
    arr = np.zeros(64, np.uint8)
    buf = dev.wrap(arr)
    s.fill(buf, 7).wait()
    assert (arr == 7).all()
    with pytest.raises(hrx.Unsupported):
        dev.wrap("not memory")


@pytest.mark.gpu
def test_torch_and_cupy_share_cuda_memory():
    dev = open_device("cuda")
    torch = pytest.importorskip("torch")
    s = dev.stream()
    buf = s.allocate_from(np.arange(256, dtype=np.float32))
    t = torch.from_dlpack(buf).view(torch.float32)
    assert t.is_cuda and t.shape == (256,) and float(t[3]) == 3.0
    t.mul_(2)  # torch writes, HRX sees
    torch.cuda.synchronize()
    assert s.download(buf).view(np.float32)[3] == 6.0
    # torch memory wrapped as an HRX buffer, retaining the tensor
    src = torch.arange(64, dtype=torch.int32, device="cuda")
    wrapped = dev.wrap(src)
    assert wrapped.nbytes == 256
    del src
    gc.collect()
    torch.cuda.synchronize()
    assert s.download(wrapped).view(np.int32).tolist() == list(range(64))
    cupy = pytest.importorskip("cupy")
    c = cupy.asarray(buf)  # __cuda_array_interface__
    assert int(c.view(cupy.float32)[3]) == 6
    cw = dev.wrap(cupy.full(16, 5, dtype=cupy.uint8))
    assert (s.download(cw) == 5).all()
