"""One argument order for transfers (destination first: copyto/upload/fill, as
numpy.copyto) with the old ``copy(src, dst)`` deprecated, and typed fills (a value
and a dtype; bytes only when asked), on every engine."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from ml_dtypes import bfloat16

import hrx_core as hrx
from hrx_core.execution import Runtime, RuntimeOptions
from hrx_core.model.tensor import DeviceTensor


def _pair(s, n=64):
    src = s.allocate_from(np.arange(n, dtype=np.uint8))
    dst = s.allocate_from(np.full(n, 0xAB, np.uint8))
    return src, dst


def test_copyto_is_destination_first(stream):
    s = stream
    src, dst = _pair(s)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.copyto(dst, src).wait()
    np.testing.assert_array_equal(s.download(dst), np.arange(64, dtype=np.uint8))
    assert (s.download(src) == np.arange(64)).all()  # the source is untouched


def test_graph_and_runtime_copyto_are_destination_first(dev):
    s = dev.stream()
    src, dst = _pair(s)
    g = s.access_graph()
    g.copyto(dst.slice(0, 32), src.slice(32, 32))
    g.launch().wait()
    np.testing.assert_array_equal(s.download(dst)[:32], np.arange(32, 64, dtype=np.uint8))
    rt = Runtime(dev, RuntimeOptions())
    a, b = rt.allocate(16), rt.allocate(16)
    ig = rt.graph()
    ig.upload(a, np.arange(16, dtype=np.uint8))
    ig.copyto(b, a)
    down = ig.download(b)
    rt.submit(ig).wait()
    np.testing.assert_array_equal(down.read(np.uint8), np.arange(16, dtype=np.uint8))


def test_the_old_copy_order_still_works_with_a_deprecation_warning(dev):
    s = dev.stream()
    src, dst = _pair(s)
    with pytest.warns(DeprecationWarning, match=r"Stream.copyto\(dst, src\)") as record:
        s.copy(src, dst).wait()
    assert record[0].filename == __file__  # points at the caller
    np.testing.assert_array_equal(s.download(dst), np.arange(64, dtype=np.uint8))
    src2, dst2 = _pair(s)
    g = s.access_graph()
    with pytest.warns(DeprecationWarning, match=r"Graph.copyto\(dst, src\)"):
        g.copy(src2, dst2)
    g.launch().wait()
    np.testing.assert_array_equal(s.download(dst2), np.arange(64, dtype=np.uint8))
    rt = Runtime(dev, RuntimeOptions())
    a, b = rt.allocate(16), rt.allocate(16)
    ig = rt.graph()
    ig.upload(a, np.arange(16, dtype=np.uint8))
    with pytest.warns(DeprecationWarning, match=r"InferenceGraph.copyto\(dst, src\)"):
        ig.copy(a, b)
    down = ig.download(b)
    rt.submit(ig).wait()
    np.testing.assert_array_equal(down.read(np.uint8), np.arange(16, dtype=np.uint8))


# -- typed fills ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "dtype"),
    [(1, np.float32), (1.5, np.float32), (-2, np.int16), (1, "bf16"), (65535, np.uint16), (-0.0, np.float16),
     (np.float32(3.25), None), (np.int8(-3), None), (7, np.uint8), (np.float64(2.0), np.int32), (True, np.bool_)],
)
def test_fill_writes_a_typed_value(stream, value, dtype):
    s = stream
    dt = np.dtype(bfloat16) if dtype == "bf16" else np.dtype(dtype if dtype is not None else value.dtype)
    n = 64 // dt.itemsize
    buf = s.allocate_from(np.full(64, 0xAB, np.uint8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.fill(buf, value, dtype=dtype).wait()
    np.testing.assert_array_equal(s.download(buf).view(dt), np.full(n, value, dt))


def test_fill_takes_a_tensors_dtype(dev):
    """``fill(x, 1)`` on float32 data writes 1.0, not the byte 0x01 (the issue's bug)."""
    s = dev.stream()
    t = DeviceTensor(s.allocate(64), (4, 4), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.fill(t, 1).wait()
    np.testing.assert_array_equal(t.numpy(stream=s), np.ones((4, 4), np.float32))
    g = s.access_graph()
    g.fill(t, 2)
    g.launch().wait()
    np.testing.assert_array_equal(t.numpy(stream=s), np.full((4, 4), 2, np.float32))
    rt = Runtime(dev, RuntimeOptions())
    h = DeviceTensor(rt.allocate(32), (16,), "bf16")
    ig = rt.graph()
    ig.fill(h, 0.5)
    down = ig.download(h.view)
    rt.submit(ig).wait()
    np.testing.assert_array_equal(down.read(bfloat16), np.full(16, 0.5, bfloat16))
    # an explicit byte pattern still fills bytes, whatever the tensor's dtype
    s.fill(t, pattern=b"\x00\x00\x80\x3f").wait()
    np.testing.assert_array_equal(t.numpy(stream=s), np.ones((4, 4), np.float32))
    with pytest.raises(hrx.InvalidArgument, match="not contiguous"):
        s.fill(DeviceTensor(t.view, (2, 2), np.float32, strides=(32, 4)), 1)


def test_byte_patterns_only_when_asked(stream):
    s = stream
    buf = s.allocate_from(np.full(64, 0xAB, np.uint8))
    s.fill(buf, pattern=7).wait()
    assert (s.download(buf) == 7).all()
    s.fill(buf, pattern=b"\x01\x02").wait()
    assert s.download(buf)[:4].tolist() == [1, 2, 1, 2]
    s.fill(buf, pattern=np.uint8(9)).wait()
    assert (s.download(buf) == 9).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.fill(buf, 0).wait()  # zero is zero bytes in every dtype: no dtype needed
    assert (s.download(buf) == 0).all()


def test_a_plain_int_without_dtype_is_deprecated(stream):
    s = stream
    buf = s.allocate(16)
    with pytest.warns(DeprecationWarning, match=r"fills every byte with 0x05.*dtype=.*pattern=5") as record:
        s.fill(buf, 5).wait()
    assert record[0].filename == __file__
    assert (s.download(buf) == 5).all()  # the old behaviour, for one release


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"value": 1.0}, "needs dtype="),
        ({"value": 256}, "needs dtype="),
        ({"value": 300, "dtype": np.uint8}, "outside uint8's range 0..255"),
        ({"value": -1, "dtype": np.uint32}, "outside uint32's range"),
        ({"value": 1.5, "dtype": np.int32}, "not an integer"),
        ({"value": 1e6, "dtype": np.float16}, "outside float16's range"),
        ({"value": 10**400, "dtype": np.float32}, "outside float32's range"),
        ({"value": 1, "dtype": np.float64}, "1-, 2- or 4-byte elements; float64 has 8"),
        ({"value": 1, "dtype": "nope"}, "is not a dtype"),
        ({"value": 1, "pattern": 1}, "not both"),
        ({"pattern": 1, "dtype": np.uint8}, "has no dtype"),
        ({"pattern": 256}, "0..255"),
        ({"pattern": b"abc"}, "1, 2 or 4 bytes"),
        ({"pattern": 1.0}, "expected bytes"),
        ({"value": b"\x01", "dtype": np.uint8}, "bytes are a pattern"),
        ({}, "got None"),
        ({"value": True}, "bool fill value needs dtype="),
        ({"value": "1", "dtype": np.float32}, "expected a scalar number"),
        ({"value": np.array([1.0]), "dtype": np.float32}, "expected a scalar number"),
        ({"value": np.complex64(1), "dtype": np.float32}, "not a real number"),
    ],
)
def test_bad_fills_are_refused_and_change_nothing(stream, kwargs, match):
    s = stream
    buf = s.allocate_from(np.full(64, 0xAB, np.uint8))
    g = s.access_graph()
    with pytest.raises(hrx.InvalidArgument, match=match):
        s.fill(buf, **kwargs)
    with pytest.raises(hrx.InvalidArgument, match=match):
        g.fill(buf, **kwargs)
    assert len(g.nodes) == 0
    assert (s.download(buf) == 0xAB).all()
