"""The amdgpu engine on the simulated Strix Halo: what the conformance suite does not
reach -- queue formats, ring wrap, non-blocking publication, host completion checks,
faults, memory rules, sharing, and the AQL compute engine."""

from __future__ import annotations

import time

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import plugins
from hrx_core.engine import Access, BufferArg, CacheOp
from hrx_core.errors import DeviceError, InvalidArgument, Timeout

SCALE_CUDA = r"""extern "C" __global__ void scale_u32(unsigned* y, unsigned a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= a; }"""


def _scale(y, a, n):
    y.view(np.uint32)[:n] *= a


SCALE = hrx.Kernel("scale_u32", buffers=("read_write",), scalars=(np.uint32, np.uint32), host=_scale, cuda=SCALE_CUDA)


@pytest.fixture(params=["pm4", "aql"])
def dev(request):
    device = hrx.open_device("amdgpu", compute_engine=request.param)
    yield device
    device.close()


def provider():
    from hrx_amdf import shared_provider

    return shared_provider("fake")


def test_simulated_engine_is_available_but_never_the_default():
    status = hrx.engine_status()["amdgpu"]
    assert status.available and not status.default and "simulated" in status.reason
    assert plugins.best_engine() != "amdgpu"


def test_device_facts(dev):
    info = dev.info
    assert info.engine == "amdgpu" and info.kind == "gpu" and info.targets == ("gfx1151",)
    p = info.properties
    assert p["target"] == "gfx1151" and p["gfx_ip"] == "11.5.1" and p["wave_size"] == 32 and p["compute_units"] == 40
    assert p["vram_carveout_bytes"] > 0 and p["gtt_bytes"] > 0 and p["simulated"] is True
    assert {f.name for f in info.queue_families} == {"compute", "copy"}
    assert info.limits.max_transfer_bytes == 1 << 30 and info.host_mappable and info.native_graphs
    assert info.dlpack_device_type == 10


def test_options_are_checked():
    with pytest.raises(InvalidArgument, match="compute_engine"):
        hrx.open_device("amdgpu", compute_engine="sdma")
    with pytest.raises(InvalidArgument, match="unknown"):
        hrx.open_device("amdgpu", stream_memops=True)
    with pytest.raises(InvalidArgument, match="max_private_bytes"):
        hrx.open_device("amdgpu", max_private_bytes=64)  # scratch needs AQL
    with pytest.raises(InvalidArgument, match="max_transfer_bytes"):
        hrx.open_device("amdgpu", max_transfer_bytes=2 << 30)


def test_dispatch_graph_prepared_launch_and_rebind(dev):
    s = dev.stream()
    x = s.allocate_from(np.arange(1000, dtype=np.uint32))
    s.dispatch(SCALE, 4, [x], block=256, scalars=(3, 1000))
    assert np.array_equal(s.download(x).view(np.uint32), np.arange(1000) * 3)
    g = s.access_graph()
    g.input("x", x)
    g.dispatch(SCALE, 4, [x], block=256, scalars=(2, 1000))
    g.launch().wait()
    y = s.allocate_from(np.ones(1000, dtype=np.uint32))
    g.launch(inputs={"x": y}).wait()  # rebinding patches the recorded kernel arguments
    assert np.array_equal(s.download(x).view(np.uint32), np.arange(1000) * 6)
    assert np.array_equal(s.download(y).view(np.uint32), np.full(1000, 2))
    launch = s.prepare(SCALE, 4, [x], block=256, scalars=(5, 1000))
    launch.launch()
    launch.rebind(0, y)
    launch.launch()
    assert np.array_equal(s.download(x).view(np.uint32), np.arange(1000) * 30)
    assert np.array_equal(s.download(y).view(np.uint32), np.full(1000, 10))


def test_rings_wrap_under_many_submissions(dev):
    s = dev.stream()
    copy = dev.stream(family="copy")
    x = s.allocate(4096)
    for i in range(300):  # 300 publications wrap the 4 KiB PM4 and SDMA rings
        s.fill(x, pattern=i & 0xFF)
        copy.fill(x, pattern=(i + 1) & 0xFF)
        copy.synchronize(timeout=30) if i % 50 == 0 else None
    s.synchronize(timeout=60)
    copy.synchronize(timeout=60)
    queues = [q for q in dev.native._live_queues()]
    assert any(q.ring.write > q.ring.capacity for q in queues), "no ring wrapped"


def test_submit_never_blocks_on_earlier_device_work(dev):
    native = dev.native
    t = native.create_timeline()
    compute = native.create_queue("compute", 0)
    copy = native.create_queue("copy", 0)
    buf = native.allocate(4096, shared=True)
    # the copy queue waits for a value the compute queue signals only later
    copy.wait(t, 1)
    copy.fill(buf, 0, 4096, b"\x07")
    done = native.create_timeline()
    copy.signal(done, 1)
    start = time.monotonic()
    copy.submit()
    assert time.monotonic() - start < 1.0
    assert not done.wait(1, 0.05)
    compute.signal(t, 1)
    compute.submit()
    assert done.wait(1, 10)
    assert (buf.host_view() == 7).all()
    for q in (compute, copy):
        q.close()


def test_sdma_waits_beyond_32_bits_use_host_completion_checks(dev):
    native = dev.native
    t = native.create_timeline()
    compute = native.create_queue("compute", 0)
    copy = native.create_queue("copy", 0)
    buf = native.allocate(256, shared=True)
    big = (1 << 32) + 5
    copy.wait(t, big)  # POLL_REGMEM cannot compare this: the queue holds the rest on the host
    copy.fill(buf, 0, 256, b"\x09")
    done = native.create_timeline()
    copy.signal(done, 1)
    copy.submit()
    assert not done.wait(1, 0.05) and (buf.host_view() == 0).all()
    compute.signal(t, big)
    compute.submit()
    assert done.wait(1, 10) and (buf.host_view() == 9).all()
    assert t.completed() == big
    for q in (compute, copy):
        q.close()


def test_sdma_signal_writes_all_64_bits(dev):
    native = dev.native
    t = native.create_timeline()
    copy = native.create_queue("copy", 0)
    copy.signal(t, (7 << 32) | 3)
    copy.submit()
    assert t.wait((7 << 32) | 3, 10) and t.completed() == (7 << 32) | 3
    copy.close()


def test_unaligned_fills_and_patterns(dev):
    s = dev.stream()
    c = dev.stream(family="copy")
    for stream in (s, c):
        x = stream.allocate(64)
        stream.fill(x.slice(2, 30), np.array([0x11, 0x22], dtype=np.uint8).tobytes())
        stream.fill(x.slice(37, 6), b"\xab")
        stream.fill(x.slice(44, 8), b"\x01\x02\x03\x04")
        got = stream.download(x)
        want = np.zeros(64, np.uint8)
        want[2:32] = np.resize([0x11, 0x22], 30)
        want[37:43] = 0xAB
        want[44:52] = [1, 2, 3, 4, 1, 2, 3, 4]
        assert np.array_equal(got, want)


def test_queue_fault_becomes_an_error_and_the_queue_is_replaced(dev):
    s = dev.stream()
    x = s.allocate_from(np.arange(256, dtype=np.uint32))
    s.synchronize(timeout=10)
    provider().faults.queue_fault(s.native_queue().native, after=0, detail="simulated ECC error")
    s.dispatch(SCALE, 1, [x], block=256, scalars=(2, 256))
    with pytest.raises(DeviceError, match="ECC error"):
        s.synchronize(timeout=10)
    # the engine replaced the failed hardware queue: later work runs
    s2 = dev.stream()
    y = s2.allocate_from(np.arange(256, dtype=np.uint32))
    s2.dispatch(SCALE, 1, [y], block=256, scalars=(3, 256))
    assert np.array_equal(s2.download(y).view(np.uint32), np.arange(256) * 3)


def test_hung_wait_times_out_without_cancelling(dev):
    native = dev.native
    t = native.create_timeline()
    q = native.create_queue("compute", 0)
    q.signal(t, 1)
    q.submit()
    assert t.wait(1, 10)
    provider().faults.hang(q.native)
    q.wait(t, 1)  # already reached, but the hung queue never gets past its wait
    t2 = native.create_timeline()
    q.signal(t2, 1)
    q.submit()
    assert not t2.wait(1, 0.05)
    provider().faults.release_hang(q.native)
    assert t2.wait(1, 10)
    q.close()


def test_device_lost_fails_waits(dev):
    native = dev.native
    t = native.create_timeline()
    q = native.create_queue("compute", 0)
    gate = native.create_timeline()
    q.wait(gate, 1)
    q.signal(t, 1)
    q.submit()
    provider().faults.device_lost(native.gpu)
    with pytest.raises(DeviceError):
        t.wait(1, 10)


def test_ordinary_buffers_need_host_cache_maintenance(dev):
    native = dev.native
    ordinary = native.allocate(64)
    shared = native.allocate(64, shared=True)
    q = native.create_queue("copy", 0)
    t = native.create_timeline()
    view = ordinary.host_view()
    view[:] = 5
    q.copy(ordinary, 0, shared, 0, 64)
    q.signal(t, 1)
    q.submit()
    t.wait(1, 10)
    assert (shared.host_view() == 0).all(), "unflushed host writes reached the device"
    ordinary.cache_control(CacheOp.FLUSH, 0, 64)
    q.copy(ordinary, 0, shared, 0, 64)
    q.signal(t, 2)
    q.submit()
    t.wait(2, 10)
    assert (shared.host_view() == 5).all()
    q.close()


def test_dlpack_device_types(dev):
    s = dev.stream()
    assert s.allocate(64).__dlpack_device__() == (10, 0)  # kDLROCM
    assert s.allocate_shared(64).__dlpack_device__() == (11, 0)  # kDLROCMHost


def test_visibility_refuses_float_atomic_max_on_coherent_memory(dev):
    from hrx_core.placement import visibility

    s = dev.stream()
    shared = s.allocate_shared(64)
    v = visibility(shared, dev, "host")
    assert v.coherent and "float-max" in v.unsupported_atomics
    host = hrx.open_device("host")
    assert visibility(host.stream().allocate_shared(64), host, "host").unsupported_atomics == ()


def test_import_of_provider_memory_and_refusal_of_foreign_buffers(dev):
    from hrx_amdf.constants import AddressKind, EngineKind, MemoryFlag
    from hrx_amdf.provider import DeviceAccess

    p = provider()
    npu = p.endpoint(EngineKind.XDNA).create_xdna_device()
    scope = p.system_scopes()[0]
    memory = scope.create(4096, profile=1, accesses=[DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))], flags=MemoryFlag.SHAREABLE)

    class Foreign:
        nbytes = 4096
        amdf_memory = memory

    imported = dev.native.import_buffer(Foreign())  # type: ignore[arg-type]
    assert imported is not None and imported.nbytes == 4096
    memory.device_view(0, 4)[:] = [1, 2, 3, 4]
    q = dev.native.create_queue("copy", 0)
    out = dev.native.allocate(16, shared=True)
    t = dev.native.create_timeline()
    q.copy(imported, 0, out, 0, 4)
    q.signal(t, 1)
    q.submit()
    t.wait(1, 10)
    assert list(out.host_view()[:4]) == [1, 2, 3, 4]
    q.close()
    host = hrx.open_device("host").native.allocate(64)
    assert dev.native.import_buffer(host) is None


def test_a_refused_import_releases_the_export(dev, monkeypatch):
    """The export made for an import is move-owned: when the import is refused, the
    engine releases it (on libamdf, the dma-buf's file descriptor) and falls back."""
    from hrx_amdf.constants import AddressKind, EngineKind, MemoryFlag
    from hrx_amdf.errors import AmdfError
    from hrx_amdf.fake.memory import FakeExternalMemory
    from hrx_amdf.provider import DeviceAccess

    p = provider()
    npu = p.endpoint(EngineKind.XDNA).create_xdna_device()
    scope = p.system_scopes()[0]
    memory = scope.create(4096, profile=1, accesses=[DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))], flags=MemoryFlag.SHAREABLE)
    backing = memory.backing
    refs = backing.references
    released = []
    release = FakeExternalMemory.release
    monkeypatch.setattr(FakeExternalMemory, "release", lambda self: (released.append(self), release(self)))

    def refuse(*args, **kwargs):
        raise AmdfError("memory_import: refused by the test")

    monkeypatch.setattr(dev.native._system, "import_memory", refuse)

    class Foreign:
        nbytes = 4096
        amdf_memory = memory

    assert dev.native.import_buffer(Foreign()) is None  # type: ignore[arg-type]
    assert len(released) == 1 and backing.references == refs


def test_graph_rebind_never_changes_an_in_flight_replay(dev):
    s = dev.stream()
    a = s.allocate_from(np.full(256, 1, dtype=np.uint32))
    b = s.allocate_from(np.full(256, 1, dtype=np.uint32))
    g = s.access_graph()
    g.input("x", a)
    g.dispatch(SCALE, 1, [a], block=256, scalars=(2, 256))
    g.launch().wait()
    queue = s.native_queue()
    gate = dev.native.create_timeline()
    queue.wait(gate, 1)  # hold the stream's queue: the next replays stay in flight
    queue.submit()
    first = g.launch()
    second = g.launch(inputs={"x": b})  # rebinds while the first replay is still queued
    assert not first.is_complete
    releaser = dev.native.create_queue("copy", 0)
    releaser.signal(gate, 1)
    releaser.submit()
    first.wait(timeout=10)
    second.wait(timeout=10)
    assert np.array_equal(s.download(a).view(np.uint32), np.full(256, 4))
    assert np.array_equal(s.download(b).view(np.uint32), np.full(256, 2))
    releaser.close()


def test_conformance_kernels_run_through_their_references(dev):
    from tests.kernels import ADD_U32, XOR_BYTES  # the core suite's kernels

    s = dev.stream()
    x = s.allocate_from(np.arange(10, dtype=np.uint32))
    s.dispatch(ADD_U32, 1, [x], block=32, scalars=(5, 10))
    y = s.allocate(10)
    s.dispatch(XOR_BYTES, 1, [x.slice(0, 10), y], block=32, scalars=(0xFF, 10))
    assert list(s.download(x).view(np.uint32)) == list(range(5, 15))
    assert list(s.download(y)) == [b ^ 0xFF for b in s.download(x)[:10]]


def test_direct_kernarg_buffer_args(dev):
    native = dev.native
    exe = SCALE.executable(dev)
    buf = native.allocate(1024, shared=True)
    buf.host_view().view(np.uint32)[:] = 1
    q = native.create_queue("compute", 0)
    t = native.create_timeline()
    q.dispatch(exe, (1, 1, 1), (256, 1, 1), [BufferArg(buf, 0, 1024, Access.READ_WRITE), np.uint32(7), np.uint32(256)])
    q.signal(t, 1)
    q.submit()
    t.wait(1, 10)
    assert (buf.host_view().view(np.uint32) == 7).all()
    with pytest.raises(InvalidArgument):
        q.dispatch(exe, (1, 1, 1), (256, 1, 1), [np.uint32(7), np.uint32(256)])
    q.close()


def test_close_releases_everything():
    from hrx_amdf.fake import FakeProvider  # noqa: F401 - the shared provider is a FakeProvider

    before = sum(len(e._devices) for e in provider().endpoints())
    device = hrx.open_device("amdgpu")
    s = device.stream()
    x = s.allocate_from(np.arange(64, dtype=np.uint32))
    s.dispatch(SCALE, 1, [x], block=64, scalars=(2, 64))
    s.synchronize(timeout=10)
    device.close()
    after = sum(len(e._devices) for e in provider().endpoints())
    assert after == before
    with pytest.raises(InvalidArgument):
        device.native.allocate(16)
    _ = Timeout


def test_prebuilt_code_objects_need_no_clang(dev):
    from hrx_core.errors import CompileError

    code = hrx.compile(SCALE_CUDA, target="gfx1151", entry="scale_u32").code
    prebuilt = hrx.Kernel("scale_u32", buffers=("read_write",), scalars=(np.uint32, np.uint32), host=_scale, sources={"gfx1151": code})
    s = dev.stream()
    x = s.allocate_from(np.arange(64, dtype=np.uint32))
    s.dispatch(prebuilt, 1, [x], block=64, scalars=(4, 64))
    assert np.array_equal(s.download(x).view(np.uint32), np.arange(64) * 4)
    wrong = hrx.Kernel("other", buffers=("read_write",), scalars=(np.uint32, np.uint32), host=_scale, sources={"gfx1151": code})
    with pytest.raises(CompileError, match="no kernel 'other'"):
        s.dispatch(wrong, 1, [x], block=64, scalars=(4, 64))


def test_graph_patch_args_rewrites_pointers_only_or_refuses_whole(dev):
    """patch_args points dispatch buffer arguments at new memory by rewriting the
    pointers in the nodes' kernel arguments (the packets stay as encoded; scalars and
    hidden arguments keep their bytes); anything else is refused with nothing changed.
    Replays after it run on the new memory, replays before it keep the old."""
    from hrx_core.engine import GraphNode
    from hrx_gpu.amdgpu.graph import AmdgpuGraph

    native = dev.native
    exe = SCALE.executable(dev)
    bufs = [native.allocate(n, shared=True) for n in (1024, 1024, 2048)]
    for b in bufs:
        b.host_view().view(np.uint32)[:] = 1

    def arg(b):
        return BufferArg(b, 0, 1024, Access.READ_WRITE)

    nodes = [GraphNode("dispatch", (), {"executable": exe, "grid": (1, 1, 1), "block": (256, 1, 1),
                                        "args": (arg(bufs[0]), np.uint32(3), np.uint32(256))}),
             GraphNode("empty", (0,), {})]
    g = AmdgpuGraph(native, nodes)
    q = native.create_queue("compute", 0)
    t = native.create_timeline()
    g.launch(q)  # encoded and laid out before the patch
    encoded = next(iter(g._encoded.values()))[0]
    for bad in ([(0, 1, arg(bufs[1]))], [(1, 0, arg(bufs[1]))], [(2, 0, arg(bufs[1]))], [(0, 5, arg(bufs[1]))],
                [(0, 0, np.uint32(1))], [(0, 0, arg(bufs[1])), (1, 0, arg(bufs[1]))]):
        assert g.patch_args(bad) is False
        assert next(iter(g._encoded.values()))[0] is encoded and g.nodes[0].params["args"][0].buffer is bufs[0]
    assert g.patch_args([(0, 0, arg(bufs[1]))]) is True
    patched = next(iter(g._encoded.values()))[0]
    assert patched.words is encoded.words  # packets untouched
    assert bytes(patched.data) != bytes(encoded.data)
    g.launch(q)
    assert g.patch_args([(0, 0, arg(bufs[2]))]) and g.patch_args([(0, 0, BufferArg(bufs[2], 1024, 1024, Access.READ_WRITE))])
    g.launch(q)
    q.signal(t, 1)
    q.submit()
    t.wait(1, 10)
    views = [b.host_view().view(np.uint32) for b in bufs]
    assert (views[0] == 3).all() and (views[1] == 3).all()
    assert (views[2][:256] == 1).all() and (views[2][256:] == 3).all()  # the last patch wins: from byte 1024
    q.close()
    g.close()
    with pytest.raises(InvalidArgument):
        g.patch_args([(0, 0, arg(bufs[1]))])


def _one_input_graph(dev, factor: int):
    """A stream, three buffers of 64 words (1, 2, 3) and a replayed graph scaling its
    input "x" (bound to the first) by ``factor``."""
    s = dev.stream()
    bufs = [s.allocate_from(np.full(64, k + 1, dtype=np.uint32)) for k in range(3)]
    g = s.graph()
    g.input("x", bufs[0])
    g.dispatch(SCALE, 1, [bufs[0]], block=64, scalars=(factor, 64), deps=[])
    g.launch().wait()
    return s, bufs, g


def _count_copy_writes(monkeypatch) -> list:
    """The node indices written into graph copies from now on."""
    from hrx_gpu.amdgpu.graph import _Copy

    writes: list = []
    write = _Copy.write
    monkeypatch.setattr(_Copy, "write", lambda self, *a: (writes.append(a[0]), write(self, *a)))
    return writes


def test_graph_rebinds_that_come_back_switch_to_a_laid_out_copy(dev, monkeypatch):
    """Inputs alternating between two sets of buffers: each set is laid out in a copy of
    the graph's memory once, later replays switch copies without writing a node; every
    replay still works on its own set (also through the compiled rebind)."""
    s, bufs, g = _one_input_graph(dev, 2)
    writes = _count_copy_writes(monkeypatch)
    sets = [{"x": bufs[1]}, {"x": bufs[2]}]
    for i in range(8):
        g.launch(inputs=sets[i % 2]).wait()
    assert len(writes) <= 2  # each set's node once (9 before copies were matched by content)
    assert np.array_equal(s.download(bufs[0]).view(np.uint32), np.full(64, 2))
    assert np.array_equal(s.download(bufs[1]).view(np.uint32), np.full(64, 2 * 2**4))
    assert np.array_equal(s.download(bufs[2]).view(np.uint32), np.full(64, 3 * 2**4))
    g.launch().wait()  # the recorded binding again: back on bufs[0]
    assert np.array_equal(s.download(bufs[0]).view(np.uint32), np.full(64, 4))


def test_graph_patch_results_are_remembered_per_content(dev):
    """A remembered patch result is only taken for the content it was made from: after
    update() changes a node, the same patch re-encodes (the new scalar runs); patches of
    two arguments of one node, applied in any order, give the node both."""
    from tests.kernels import XOR_BYTES

    from hrx_core.engine import GraphNode
    from hrx_gpu.amdgpu.graph import AmdgpuGraph

    native = dev.native
    exe = SCALE.executable(dev)
    bufs = [native.allocate(256, shared=True) for _ in range(4)]
    for b in bufs:
        b.host_view().view(np.uint32)[:] = 1

    def arg(b):
        return BufferArg(b, 0, 256, Access.READ_WRITE)

    def scale(b, a):
        return GraphNode("dispatch", (), {"executable": exe, "grid": (1, 1, 1), "block": (64, 1, 1),
                                          "args": (arg(b), np.uint32(a), np.uint32(64))})

    g = AmdgpuGraph(native, [scale(bufs[0], 3)])
    q = native.create_queue("compute", 0)
    t = native.create_timeline()
    value = 0

    def run():
        nonlocal value
        g.launch(q)
        value += 1
        q.signal(t, value)
        q.submit()
        assert t.wait(value, 10)

    def values(b):
        return int(b.host_view().view(np.uint32)[0])

    run()  # bufs[0] * 3
    assert g.patch_args([(0, 0, arg(bufs[1]))])
    run()  # bufs[1] * 3
    assert g.patch_args([(0, 0, arg(bufs[0]))])
    run()  # bufs[0] * 3
    g.update(0, scale(bufs[0], 5))
    assert g.patch_args([(0, 0, arg(bufs[1]))])  # the same patch as before, of new content
    run()  # bufs[1] * 5, not * 3
    assert (values(bufs[0]), values(bufs[1])) == (9, 15)

    x = native.create_queue("compute", 0)  # two buffer arguments: src, dst
    xe = XOR_BYTES.executable(dev)
    node = GraphNode("dispatch", (), {"executable": xe, "grid": (1, 1, 1), "block": (32, 1, 1),
                                      "args": (BufferArg(bufs[2], 0, 16, Access.READ), BufferArg(bufs[3], 0, 16, Access.WRITE),
                                               np.uint8(0xFF), np.uint32(16))})
    g2 = AmdgpuGraph(native, [node])
    src, dst = native.allocate(256, shared=True), native.allocate(256, shared=True)
    src.host_view()[:] = 7
    p_src = g2.prepare_patches([(0, 0, BufferArg(src, 0, 16, Access.READ))])
    p_dst = g2.prepare_patches([(0, 1, BufferArg(dst, 0, 16, Access.WRITE))])
    back = g2.prepare_patches([(0, 0, BufferArg(bufs[2], 0, 16, Access.READ))])
    for order in ([p_src, p_dst], [back], [p_dst, p_src], [back], [p_src]):
        for p in order:
            assert g2.apply_patches(p)
    args = g2.nodes[0].params["args"]
    assert args[0].buffer is src and args[1].buffer is dst
    g2.launch(x)
    x.signal(t, value + 1)
    x.submit()
    assert t.wait(value + 1, 10)
    assert list(dst.host_view()[:16]) == [7 ^ 0xFF] * 16 and (bufs[3].host_view().view(np.uint32)[:4] == 1).all()
    for obj in (q, x, g, g2):
        obj.close()


def test_graph_rebinds_switch_to_a_copy_still_in_flight(dev, monkeypatch):
    """Replays queued behind a held queue, inputs alternating between two sets: a
    replay switches to the copy that holds its set even while an earlier replay of that
    copy is still queued (replays only read a copy), and each runs on its own set."""
    s, bufs, g = _one_input_graph(dev, 3)
    g.launch(inputs={"x": bufs[1]}).wait()
    g.launch(inputs={"x": bufs[2]}).wait()  # both sets laid out, each in its copy
    copies = [c for cs in g._native._copies.values() for c in cs]
    writes = _count_copy_writes(monkeypatch)
    queue = s.native_queue()
    gate = dev.native.create_timeline()
    queue.wait(gate, 1)  # hold the stream's queue: the replays below stay queued
    queue.submit()
    done = [g.launch(inputs={"x": bufs[1 + i % 2]}) for i in range(6)]
    assert not done[0].is_complete
    assert writes == [] and len([c for cs in g._native._copies.values() for c in cs]) == len(copies)
    releaser = dev.native.create_queue("copy", 0)
    releaser.signal(gate, 1)
    releaser.submit()
    for d in done:
        d.wait(timeout=10)
    assert np.array_equal(s.download(bufs[1]).view(np.uint32), np.full(64, 2 * 3**4))
    assert np.array_equal(s.download(bufs[2]).view(np.uint32), np.full(64, 3 * 3**4))
    releaser.close()


def test_graph_replayed_many_times_keeps_a_bounded_in_flight_list(dev):
    """Each replay notes its batch on the graph copy it reads; retired entries are
    dropped as the list grows, so replaying the same bindings over and over does not
    grow memory (it kept one entry per replay before)."""
    s, bufs, g = _one_input_graph(dev, 1)
    for _ in range(10):
        for _ in range(50):
            g.launch()
        s.synchronize()
    sizes = [len(c.in_flight) for cs in g._native._copies.values() for c in cs]
    assert sizes and max(sizes) < 100
    assert np.array_equal(s.download(bufs[0]).view(np.uint32), np.full(64, 1))
