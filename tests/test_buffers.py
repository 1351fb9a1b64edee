"""Buffers, views, bindings, host mapping guards and cache control (every engine)."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import live_bytes
from hrx_core import Access, CacheOp

from .kernels import SLEEPY


def test_buffer_belongs_to_device_and_any_stream_uses_it(dev):
    a, b = dev.stream(), dev.stream()
    buf = a.allocate_from(np.arange(64, dtype=np.uint8))
    assert buf.device is dev and buf.nbytes == 64
    np.testing.assert_array_equal(b.download(buf), np.arange(64, dtype=np.uint8))


def test_views_compose_and_check_bounds(dev):
    buf = dev.allocate(100)
    v = buf.slice(10, 50)
    w = v.slice(5, 20)
    assert (w.offset, w.length) == (15, 20)
    assert (w.start, w.end) == (15, 35)
    with pytest.raises(hrx.OutOfBounds):
        v.slice(40, 11)
    with pytest.raises(hrx.OutOfBounds):
        buf.slice(0, 0)
    with pytest.raises(hrx.OutOfBounds):
        buf.slice(100, 1)
    with pytest.raises(hrx.InvalidArgument):
        buf.slice(-1, 4)
    with pytest.raises(hrx.InvalidArgument):
        buf.slice(1.5, 4)  # type: ignore[arg-type]


def test_bindings_declare_access(dev):
    buf = dev.allocate(16)
    assert buf.binding().access is Access.READ_WRITE
    assert buf.binding().read().access is Access.READ
    assert buf.binding().write().access is Access.WRITE
    assert buf.slice(0, 8).read_write().access is Access.READ_WRITE
    assert buf.binding().read().view.length == 16


def test_allocate_validates(dev):
    with pytest.raises(hrx.InvalidArgument):
        dev.allocate(0)
    with pytest.raises(hrx.InvalidArgument):
        dev.allocate(-5)
    with pytest.raises(hrx.InvalidArgument):
        dev.allocate("12")  # type: ignore[arg-type]


def test_allocate_shared_is_coherent_and_host_visible(dev):
    s = dev.stream()
    buf = dev.allocate_shared(256)
    assert buf.shared
    with buf.map("write") as host:
        host[:] = np.arange(256, dtype=np.uint8)
    # no cache control needed for coherent memory
    dst = dev.allocate(256)
    s.copyto(dst, buf).wait()
    np.testing.assert_array_equal(s.download(dst), np.arange(256, dtype=np.uint8))
    s.fill(buf.slice(0, 16), pattern=7).wait()
    with buf.map("read") as host:
        assert (host[:16] == 7).all() and host[16] == 16
        assert not host.flags.writeable


def test_ordinary_buffer_map_needs_cache_control(dev):
    buf = dev.allocate(64)
    if not dev.info.host_mappable:
        with pytest.raises(hrx.Unsupported):
            with buf.map("read"):
                pass
        return
    s = dev.stream()
    s.fill(buf, pattern=3).wait()
    with pytest.raises(hrx.InvalidArgument, match="INVALIDATE"):
        with buf.map("read"):
            pass
    buf.cache_control(CacheOp.INVALIDATE)
    with buf.map("read_write") as host:
        assert (host == 3).all()
        host[0] = 9
    other = dev.allocate(64)
    with pytest.raises(hrx.InvalidArgument, match="FLUSH"):
        s.copyto(other, buf)
    buf.cache_control("flush")
    s.copyto(other, buf).wait()
    assert s.download(other)[0] == 9
    with pytest.raises(hrx.InvalidArgument):
        buf.cache_control("scrub")
    with pytest.raises(hrx.OutOfBounds):
        buf.cache_control(CacheOp.FLUSH, 60, 8)


def test_host_map_rejects_pending_device_use(dev):
    s = dev.stream()
    buf = dev.allocate_shared(64)
    s.dispatch(SLEEPY, 1, [buf.slice(0, 8)], scalars=(200_000_000,))  # ~0.2 s
    with pytest.raises(hrx.AccessConflict):
        with buf.map("read", 0, 8):
            pass
    # disjoint bytes are not in conflict
    with buf.map("write", 32, 32) as host:
        host[:] = 1
    s.synchronize()
    with buf.map("read", 0, 8) as host:
        assert host.view(np.uint32)[0] == 1


def test_device_use_rejected_while_mapped(dev):
    s = dev.stream()
    buf = dev.allocate_shared(64)
    s.fill(buf, 0).wait()
    with buf.map("write", 0, 16):
        with pytest.raises(hrx.AccessConflict):
            s.fill(buf.slice(8, 8), pattern=1)
        s.fill(buf.slice(16, 16), pattern=2).wait()  # disjoint: fine
    with buf.map("read", 0, 16):
        s.copyto(buf.slice(32, 16), buf.slice(0, 16)).wait()  # reading mapped-for-read bytes: fine
        with pytest.raises(hrx.AccessConflict):
            s.fill(buf.slice(0, 4), pattern=1)
    s.fill(buf.slice(0, 4), pattern=1).wait()


def test_closed_buffer_is_rejected(dev):
    s = dev.stream()
    buf = dev.allocate(16)
    buf.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        s.fill(buf, 0)
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        buf.slice(0, 4).binding()  # creating a view is fine...
        s.fill(buf.slice(0, 4), 0)  # ...using it is not


def test_pending_work_keeps_memory_alive_after_close(dev):
    s = dev.stream()
    src = s.allocate_from(np.full(1 << 16, 5, np.uint8))
    dst = dev.allocate(1 << 16)
    flag = dev.allocate(4)
    s.download(flag)  # create the stream's staging chunk before measuring
    live = live_bytes(dev)
    s.dispatch(SLEEPY, 1, [flag], scalars=(50_000_000,))
    done = s.copyto(dst, src)
    src.close()  # the copy still holds the allocation
    assert live_bytes(dev) == live
    done.wait()
    assert (s.download(dst) == 5).all()
    s.synchronize()
    assert live_bytes(dev) == live - (1 << 16)


def test_buffer_repr_and_idle(dev):
    buf = dev.allocate(32)
    assert "32 bytes" in repr(buf)
    assert buf.is_idle()


def test_view_repr_says_offset_and_length(dev):
    """slice() takes (offset, length); the repr names both, so it never reads as slice(start, stop)."""
    v = dev.allocate(1 << 14).slice(4096, 8192)
    assert repr(v).startswith("<hrx.View offset=4096 length=8192 (bytes [4096, 12288)) of <hrx.Buffer 16384 bytes")
    assert "length=16" in repr(v.slice(8, 16)) and "offset=4104" in repr(v.slice(8, 16))
    assert repr(v.read()).startswith("<hrx.Binding read <hrx.View offset=4096 length=8192")
