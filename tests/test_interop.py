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
    s.fill(buf.slice(4, 4), pattern=0xFF).wait()
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
    s.fill(buf, pattern=7).wait()
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


# -- DeviceTensor ------------------------------------------------------------------------------


def _tensor(dev, array, **kw):
    from hrx_core.model.tensor import DeviceTensor

    s = dev.stream()
    return DeviceTensor(s.allocate_from(np.ascontiguousarray(array)), array.shape, array.dtype, **kw), s


def test_device_tensor_exports_shape_strides_and_dtype_through_dlpack():
    dev = hrx.device("host")
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    t, s = _tensor(dev, base)
    assert t.__dlpack_device__() == (1, 0)
    arr = np.from_dlpack(t)
    assert arr.shape == (4, 6) and arr.dtype == np.float32
    np.testing.assert_array_equal(arr, base)
    s.fill(t.rows(1, 1), 9.0).wait()  # same memory: a device fill is visible through the array
    assert (arr[1] == 9).all() and arr[0, 0] == 0
    ints, _ = _tensor(dev, np.arange(-4, 4, dtype=np.int16).reshape(2, 2, 2))
    np.testing.assert_array_equal(np.from_dlpack(ints), np.arange(-4, 4, dtype=np.int16).reshape(2, 2, 2))
    # a strided view: every other column of a (4, 6) float32 matrix
    from hrx_core.model.tensor import DeviceTensor

    cols = DeviceTensor(t.view, (4, 3), np.float32, strides=(24, 8))
    np.testing.assert_array_equal(np.from_dlpack(cols), np.from_dlpack(t)[:, ::2])
    odd = DeviceTensor(t.view.slice(0, 10), (2,), np.float32, strides=(6,))
    with pytest.raises(hrx.Unsupported, match="not multiples"):
        odd.__dlpack__()


def test_device_tensor_export_keeps_memory_and_lease():
    from hrx_core.model.tensor import DeviceTensor, SharedHold

    dev = hrx.device("host")
    released = []
    buf = dev.stream().allocate_from(np.arange(8, dtype=np.float32))
    t = DeviceTensor(buf, (8,), np.float32, hold=SharedHold(lambda: released.append(1)))
    arr = np.from_dlpack(t)
    t.close()
    buf.close()
    assert released == [] and arr[3] == 3.0  # the consumer still holds the lease and the memory
    del arr
    gc.collect()
    assert released == [1]
    capsule_holder = DeviceTensor(dev.allocate(8), (2,), np.float32, hold=SharedHold(lambda: released.append(2)))
    capsule = capsule_holder.__dlpack__()
    capsule_holder.close()
    del capsule
    gc.collect()
    assert released == [1, 2]  # an unconsumed capsule gives the lease back too
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        capsule_holder.__dlpack__()


def test_device_tensor_export_waits_for_a_failed_producer():
    from hrx_core.model.tensor import DeviceTensor, SharedHold

    from .kernels import SLEEPY

    dev = hrx.device("host")
    s = dev.stream()
    flag = s.allocate_from(np.zeros(4, np.uint32))
    done = s.dispatch(SLEEPY, 1, [flag], scalars=(20_000_000,))
    released = []
    t = DeviceTensor(flag, (4,), np.uint32, completion=done, hold=SharedHold(lambda: released.append(1)))
    assert np.from_dlpack(t)[0] == 1  # waited for the producer
    boom = hrx.Kernel("boom_tensor_export", buffers=("write",), host=lambda b: 1 / 0)
    failed = s.dispatch(boom, 1, [flag])
    bad = DeviceTensor(flag, (4,), np.uint32, completion=failed, hold=SharedHold(lambda: released.append(2)))
    with pytest.raises(hrx.HRXError):
        bad.__dlpack__()
    bad.close()
    assert 2 in released  # the lease taken for the export was given back
    with pytest.raises(hrx.HRXError):
        s.synchronize()


def test_np_asarray_of_a_device_tensor_raises_pointing_at_numpy():
    dev = hrx.device("host")
    t, _ = _tensor(dev, np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match=r"tensor\.numpy\(\)"):
        np.asarray(t)
    with pytest.raises(TypeError, match=r"tensor\.numpy\(\)"):
        np.array(t, dtype=np.float32)
    np.testing.assert_array_equal(t.numpy(), np.ones((2, 3), np.float32))  # the explicit way


@pytest.mark.gpu
def test_torch_reads_a_device_tensor_through_dlpack():
    from hrx_core.model.tensor import DeviceTensor

    dev = open_device("cuda")
    torch = pytest.importorskip("torch")
    s = dev.stream()
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = DeviceTensor(s.allocate_from(base), (4, 6), np.float32)
    assert t.__dlpack_device__() == (2, dev.info.index)
    x = torch.from_dlpack(t)
    assert x.is_cuda and x.shape == (4, 6) and x.dtype == torch.float32
    np.testing.assert_array_equal(x.cpu().numpy(), base)
    cols = DeviceTensor(t.view, (4, 3), np.float32, strides=(24, 8))
    np.testing.assert_array_equal(torch.from_dlpack(cols).cpu().numpy(), base[:, ::2])
    with pytest.raises(TypeError, match=r"tensor\.numpy\(\)"):
        np.asarray(t)
