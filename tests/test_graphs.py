"""Recorded graphs: explicit, access-inferred and owned; replay and rebinding."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx

from .conftest import live_bytes

from .kernels import ADD_U32, INC_BYTES, SLEEPY, XOR_BYTES, launch_1d


def test_recording_executes_nothing_and_replays(dev):
    s = dev.stream()
    buf = s.allocate_from(np.zeros(64, np.uint32))
    g = s.graph()
    a = g.fill(buf, np.uint32(1), deps=[])
    b = g.dispatch(ADD_U32, 1, [buf], block=64, scalars=(2, 64), deps=[a])
    assert isinstance(b, hrx.Node) and b.deps == (a.index,)
    s.synchronize()
    assert (s.download(buf).view(np.uint32) == 0).all()  # nothing ran
    for _ in range(3):
        g.launch()
    s.synchronize()
    assert (s.download(buf).view(np.uint32) == 3).all()
    assert g.launches == 3


def test_explicit_graph_branches_and_join(dev):
    s = dev.stream()
    x = s.allocate_from(np.zeros(16, np.uint32))
    y = s.allocate_from(np.zeros(16, np.uint32))
    out = s.allocate(128)
    g = s.graph()
    bx = g.dispatch(ADD_U32, 1, [x], block=16, scalars=(1, 16), deps=[])   # branch 1
    by = g.dispatch(ADD_U32, 1, [y], block=16, scalars=(2, 16), deps=[])   # branch 2
    j = g.join([bx, by])
    assert j.kind == "empty" and set(j.deps) == {bx.index, by.index}
    g.copyto(out.slice(0, 64), x, deps=[j])
    g.copyto(out.slice(64, 64), y, deps=[j])
    g.launch().wait()
    res = s.download(out).view(np.uint32)
    assert (res[:16] == 1).all() and (res[16:] == 2).all()


def test_explicit_graph_requires_deps(dev):
    s = dev.stream()
    buf = dev.allocate(16)
    g = s.graph()
    with pytest.raises(hrx.InvalidArgument, match="predecessor"):
        g.fill(buf, 0)
    other = s.graph()
    n = other.fill(buf, 0, deps=[])
    with pytest.raises(hrx.InvalidArgument, match="not a node of this graph"):
        g.fill(buf, 0, deps=[n])
    with pytest.raises(hrx.InvalidArgument):
        g.join(None)  # type: ignore[arg-type]


def test_access_graph_infers_byte_range_dependencies(dev):
    s = dev.stream()
    buf = dev.allocate(256)
    other = dev.allocate(256)
    g = s.access_graph()
    w0 = g.fill(buf.slice(0, 64), pattern=1)            # write [0, 64)
    w1 = g.fill(buf.slice(64, 64), pattern=2)           # disjoint write: independent
    r0 = g.copyto(other.slice(0, 64), buf.slice(0, 64))  # reads [0,64): after w0 only
    r1 = g.copyto(other.slice(64, 64), buf.slice(32, 64))  # reads [32,96): after w0 and w1
    w2 = g.fill(buf.slice(0, 128), pattern=3)           # overwrites: after readers r0, r1 (and writers)
    rr = g.copyto(buf.slice(128, 64), other.slice(0, 64))  # reads other[0,64): after r0
    assert w0.deps == () and w1.deps == ()
    assert r0.deps == (w0.index,)
    assert set(r1.deps) == {w0.index, w1.index}
    assert {r0.index, r1.index} <= set(w2.deps)
    assert rr.deps == (r0.index,)
    # read-read does not serialize
    a = g.copyto(other.slice(200, 8), buf.slice(200, 8))
    b = g.copyto(other.slice(208, 8), buf.slice(200, 8))
    assert a.index not in b.deps
    g.launch().wait()
    res = s.download(buf)
    assert (res[:128] == 3).all()
    assert (res[128:192] == 1).all()


def test_access_graph_binding_access_declarations(dev):
    s = dev.stream()
    buf, out1, out2 = dev.allocate(64), dev.allocate(64), dev.allocate(64)
    g = s.access_graph()
    k1 = g.dispatch(XOR_BYTES, 1, [buf.binding().read(), out1], scalars=(1, 64))
    k2 = g.dispatch(XOR_BYTES, 1, [buf.binding().read(), out2], scalars=(1, 64))
    assert k1.index not in k2.deps  # two declared reads do not order
    k3 = g.dispatch(INC_BYTES, 1, [buf], scalars=(64,))  # kernel default: read_write
    assert {k1.index, k2.index} <= set(k3.deps)


def test_access_graph_refuses_a_declaration_narrower_than_the_kernel(dev):
    # a read() binding for a buffer the kernel writes would hide the write from the
    # hazard inference (and from every runtime region recorded on it)
    s = dev.stream()
    buf = dev.allocate(64)
    g = s.access_graph()
    with pytest.raises(hrx.InvalidArgument, match=r"bindings\[0\]: declared read but kernel 'inc_bytes' reads and writes"):
        g.dispatch(INC_BYTES, 1, [buf.binding().read()], scalars=(0,))
    assert g.nodes == []  # rejected: nothing recorded


def test_binding_bytes_counts_distinct_allocations(dev):
    s = dev.stream()
    a, b = dev.allocate(1000), dev.allocate(24)
    g = s.access_graph()
    g.fill(a.slice(0, 8), 0)
    g.fill(a.slice(8, 8), 0)
    g.copyto(b, a.slice(0, 24))
    assert g.binding_bytes == 1024


def test_owned_graph_retains_buffers_through_replay(dev):
    s = dev.stream()
    src = s.allocate_from(np.full(64, 7, np.uint8))
    dst = dev.allocate(64)
    live = live_bytes(dev)
    staging_before = s.staging_bytes  # engines without host-mapped memory staged src
    g = s.owned_graph()
    g.copyto(dst, src)
    src.close()  # the graph owns it now
    for _ in range(2):
        g.launch().wait()
    assert live_bytes(dev) == live
    assert (s.download(dst) == 7).all()
    staging = s.staging_bytes - staging_before
    g.close()
    s.synchronize()
    assert live_bytes(dev) == live - 64 + staging


def test_borrowing_graph_rejects_closed_buffers(dev):
    s = dev.stream()
    src = s.allocate_from(np.full(64, 7, np.uint8))
    dst = dev.allocate(64)
    g = s.access_graph()
    g.copyto(dst, src)
    src.close()
    with pytest.raises(hrx.InvalidArgument, match="owned_graph"):
        g.launch()


def test_replay_with_rebound_inputs(dev):
    s = dev.stream()
    n = 256
    x1 = s.allocate_from(np.full(n, 1, np.uint32))
    x2 = s.allocate_from(np.full(n, 10, np.uint32))
    out = dev.allocate(n * 4)
    g = s.access_graph()
    g.input("x", x1)
    g.copyto(out, x1)
    g.dispatch(ADD_U32, *launch_1d(n)[:1], [out], block=256, scalars=(5, n))
    g.launch().wait()
    assert (s.download(out).view(np.uint32) == 6).all()
    g.launch(inputs={"x": x2}).wait()
    assert (s.download(out).view(np.uint32) == 15).all()
    g.launch(inputs={"x": x1}).wait()
    assert (s.download(out).view(np.uint32) == 6).all()
    # a view of the right size works too
    big = s.allocate_from(np.full(2 * n, 20, np.uint32))
    g.launch(inputs={"x": big.slice(n * 4, n * 4)}).wait()
    assert (s.download(out).view(np.uint32) == 25).all()


def test_rebinding_is_validated(dev):
    s = dev.stream()
    x = dev.allocate(64)
    out = dev.allocate(64)
    g = s.access_graph()
    g.input("x", x)
    g.input("out", out)
    g.copyto(out, x)
    s.fill(out, pattern=0xEE).wait()
    with pytest.raises(hrx.InvalidArgument, match="has 32 bytes"):
        g.launch(inputs={"x": dev.allocate(32)})
    with pytest.raises(hrx.InvalidArgument, match="not a declared input"):
        g.launch(inputs={"y": dev.allocate(64)})
    with pytest.raises(hrx.InvalidArgument, match="needs write"):
        g.launch(inputs={"out": dev.allocate(64).binding().read()})
    with pytest.raises(hrx.Overlap):
        g.launch(inputs={"out": x})  # would alias the source
    with pytest.raises(hrx.InvalidArgument, match="already declared"):
        g.input("x", x)
    assert (s.download(out) == 0xEE).all()  # nothing ran


def test_graph_validation_errors(dev):
    s = dev.stream()
    a = dev.allocate(64)
    g = s.access_graph()
    with pytest.raises(hrx.OutOfBounds):
        g.copyto(a.slice(32, 16), a.slice(0, 32))
    with pytest.raises(hrx.Overlap):
        g.copyto(a.slice(16, 32), a.slice(0, 32))
    with pytest.raises(hrx.InvalidArgument):
        g.fill(a.slice(1, 8), np.uint32(0))
    with pytest.raises(hrx.InvalidArgument):
        g.dispatch(ADD_U32, 1, [a, a], scalars=(1, 1))
    with pytest.raises(hrx.InvalidArgument):
        g.dispatch(ADD_U32, 1, [a], scalars=(1,))
    assert g.nodes == []
    g.close()
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.fill(a, 0)


def test_graph_replay_is_stream_ordered(dev):
    s = dev.stream()
    flag = dev.allocate(8)
    s.fill(flag, 0)
    g = s.access_graph()
    g.copyto(flag.slice(4, 4), flag.slice(0, 4))
    s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(50_000_000,))
    g.launch().wait()
    assert list(s.download(flag).view(np.uint32)) == [1, 1]


def test_empty_graph_launch(dev):
    s = dev.stream()
    g = s.access_graph()
    g.launch().wait()


def test_closing_an_owned_graph_keeps_memory_for_pending_launches(dev):
    s = dev.stream()
    flag = dev.allocate(8)
    src = s.allocate_from(np.full(64, 3, np.uint8))
    dst = dev.allocate(64)
    g = s.owned_graph()
    g.copyto(dst, src)
    src.close()
    live = live_bytes(dev)
    staging_before = s.staging_bytes
    s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(100_000_000,))
    done = g.launch()
    g.close()  # the launch is still pending: src must stay allocated
    assert live_bytes(dev) == live
    with pytest.raises(hrx.InvalidArgument, match="closed"):
        g.launch()
    done.wait()
    assert (s.download(dst) == 3).all()
    s.synchronize()
    assert live_bytes(dev) == live - 64 + (s.staging_bytes - staging_before)


def test_an_owned_graph_closed_with_launches_on_two_queues_waits_for_both(dev):
    """An owned graph's launches take no hold of their own: close() defers its release
    behind the latest launch on every queue still running, and releases at once when
    none is."""
    s1, s2 = dev.stream(), dev.stream()
    if s1.slot is s2.slot:
        pytest.skip(f"{dev.name}: one compute queue")
    flag1, flag2 = dev.allocate(8), dev.allocate(8)
    src = s1.allocate_from(np.full(64, 5, np.uint8))
    dst1, dst2 = dev.allocate(64), dev.allocate(64)
    g = s1.owned_graph()
    g.copyto(dst1, src)
    src.close()
    live = live_bytes(dev)
    s1.dispatch(SLEEPY, 1, [flag1.slice(0, 4)], scalars=(50_000_000,))
    s2.dispatch(SLEEPY, 1, [flag2.slice(0, 4)], scalars=(150_000_000,))
    first = g.launch(s1)
    second = g.launch(s2)
    assert g._holds == 0  # launching took none
    g.close()
    assert g._holds == 2 and live_bytes(dev) == live  # both queues still run it: src stays
    first.wait()
    s1.synchronize()
    assert live_bytes(dev) == live  # the second queue's launch still reads src
    second.wait()
    s2.synchronize()
    s1.synchronize()
    assert g._holds == 0 and live_bytes(dev) < live
    assert (s1.download(dst1) == 5).all()
    done = s1.owned_graph()
    buf = dev.allocate(64)
    done.fill(buf, pattern=1)
    buf.close()
    done.launch().wait()
    before = live_bytes(dev)
    done.close()  # nothing in flight: released at once
    assert done._holds == 0 and live_bytes(dev) == before - 64
