"""Placement, aliases, visibility and host cache operations (hrx_core.placement),
with the host or cuda engine as the GPU side and each NPU engine (npu-host; xdna on
the simulated Strix Halo). Shared memory is owned by whichever device the first
coherent profile names (the GPU side for npu-host, the NPU for xdna, whose memory the
host engine imports) and imported by the other."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from conftest import add_one, numpy_artifact, rw_contract, skip_unless_shared_memory

import hrx_core as hrx
from hrx_core.buffer import Buffer
from hrx_core.execution import Runtime
from hrx_core.placement import Fabric, MemoryPlacement, prepare_acquire_host, prepare_release_host


def shared_pair(f, gpu, npu):
    """(owner device, importing device) of the first coherent profile both reach."""
    skip_unless_shared_memory(gpu, npu.info.engine)
    home = f.allocation_profiles([gpu, npu], coherent=True)[0].owner
    return home, (npu if home is gpu else gpu)


def test_profiles_answer_before_allocating(gpu, npu):
    skip_unless_shared_memory(gpu, npu.info.engine)
    f = Fabric()
    allocations = gpu.stats.allocations, npu.stats.allocations
    coherent = f.allocation_profiles([gpu, npu], coherent=True)
    assert coherent and all(p.coherent and p.host == "coherent" for p in coherent)
    home, away = shared_pair(f, gpu, npu)
    assert coherent[0].access == {home.name: "owner", away.name: "import"}
    assert isinstance(coherent[0].placement, MemoryPlacement.Shared) and coherent[0].placement.device is home
    anything = f.allocation_profiles([gpu, npu], coherent=False)
    assert len(anything) >= len(coherent)
    if gpu.info.host_mappable:
        assert any(p.host == "cache-maintained" for p in anything)
    assert f.allocation_profiles([npu], coherent=False)[-1].placement == MemoryPlacement.NpuLocal(npu)
    assert (gpu.stats.allocations, npu.stats.allocations) == allocations
    with pytest.raises(hrx.InvalidArgument):
        MemoryPlacement.NpuLocal(gpu)
    with pytest.raises(hrx.InvalidArgument):
        f.allocation_profiles([], coherent=True)


def test_alias_shares_guards_and_retains_the_original(gpu, npu):
    f = Fabric()
    home, away = shared_pair(f, gpu, npu)
    owner = f.allocate(4096, MemoryPlacement.Shared(home))
    alias = f.adopt(owner, away)
    assert alias.device is away and alias.nbytes == 4096 and f.imports == 1
    if away is npu:
        assert npu.npu_stats()["imports"] >= 1
    on_npu, off_npu = (alias, owner) if away is npu else (owner, alias)
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(4096))
    with off_npu.map("read"), pytest.raises(hrx.AccessConflict):        # host mapping of one handle
        prog.invoke([on_npu])                      # rejects device use of the other
    assert prog.pending == 0
    with owner.map("write") as host:
        host[:] = 0
    gc.collect()                                       # earlier tests' garbage must not move the count
    live = home.stats.live_bytes
    owner_view = Buffer(home, owner.allocation.retain())   # a second handle of the original
    owner.close()
    gate = threading.Event()

    def held(x, *, scratch, column, columns):
        gate.wait(30)
        x.view(np.uint32)[:] += 1

    on_npu, off_npu = (alias, owner_view) if away is npu else (owner_view, alias)
    slow = npu.load_artifact(numpy_artifact(held), columns=1, contract=rw_contract(4096))
    slow.invoke([on_npu])
    try:
        # pending NPU work through one handle guards host mappings of the other
        with pytest.raises(hrx.AccessConflict), off_npu.map("read"):
            pass
    finally:
        gate.set()
    npu.synchronize()
    with alias.map("read") as host:
        assert (host.view(np.uint32) >= 1).all()
    owner_view.close()                                 # every handle of the original gone:
    gc.collect()
    assert home.stats.live_bytes == live               # the alias retains the backing
    alias.close()
    gc.collect()
    assert home.stats.live_bytes == live - 4096        # last handle gone: freed


def test_alias_of_ordinary_memory_shares_cache_state(npu):
    gpu = hrx.device("host")
    f = Fabric()
    home = gpu if npu.info.imports_host_memory else npu      # ordinary memory the other device imports
    away = npu if home is gpu else gpu
    owner = home.allocate(256)
    alias = f.adopt(owner, away)
    on_npu, off_npu = (alias, owner) if away is npu else (owner, alias)
    npu.stream().fill(on_npu, pattern=3)
    npu.synchronize()
    with pytest.raises(hrx.InvalidArgument, match="INVALIDATE"), off_npu.map("read"):   # the device wrote it
        pass
    with prepare_acquire_host([owner.slice(0, 64), alias.slice(32, 64), owner.slice(200, 56)]) as ops:
        assert [r[1:] for r in ops.ranges] == [(0, 96), (200, 256)]
        assert [o[0] for o in ops.operations] == [hrx.CacheOp.INVALIDATE] * 2
        ops.apply()
    with off_npu.map("read") as host:
        assert (host == 3).all()
    with off_npu.map("write") as host:
        host[:] = 9
    with pytest.raises(hrx.InvalidArgument, match="FLUSH"):
        npu.stream().fill(on_npu.slice(0, 4), pattern=1)
    with prepare_release_host(on_npu) as ops:
        ops.apply()
    npu.stream().fill(on_npu.slice(0, 4), pattern=1)
    npu.synchronize()
    with prepare_acquire_host(off_npu) as ops:
        ops.apply()
    with off_npu.map("read") as host:
        assert (host[:4] == 1).all() and (host[4:] == 9).all()


def test_visibility_describes_reach_actions_and_atomics(gpu, npu):
    f = Fabric()
    home, away = shared_pair(f, gpu, npu)
    shared = f.allocate(256, MemoryPlacement.Shared(home))
    v = shared.visibility(home, away)
    assert v.reachable and v.coherent and v.release == ("device-release-system",) and v.atomic_scopes[4] == "system"
    v = f.adopt(shared, away).visibility("host", npu)
    assert v.release == ("host-store-release",) and v.acquire == ("device-acquire-system",)
    assert shared.visibility(home, home).atomic_scopes == {4: "device", 8: "device"}
    local = f.allocate(256, MemoryPlacement.NpuLocal(npu))
    assert local.visibility(npu, npu).reachable
    same_domain = bool(gpu.info.memory_domain) and gpu.info.memory_domain == npu.info.memory_domain
    if not gpu.info.imports_host_memory and not same_domain:
        assert not local.visibility(npu, gpu).reachable
    elif same_domain:  # one provider: the GPU imports NPU memory (a dma-buf on hardware)
        assert local.visibility(npu, gpu).reachable
    plain_on = gpu if npu.info.imports_host_memory else npu       # ordinary memory the NPU reaches
    if plain_on.info.host_mappable:
        plain = plain_on.allocate(256)
        v = plain.visibility(npu, "host")
        assert not v.coherent and v.acquire == ("host-cache-invalidate",) and v.atomic_scopes[8] == "none"


def test_runtime_orders_gpu_and_npu_through_aliases(gpu, npu):
    """GPU writes shared memory, the NPU updates it through its alias, the GPU reads
    it back: the hazards see one allocation, so the order holds without explicit edges."""
    skip_unless_shared_memory(gpu, npu.info.engine)
    f = Fabric()
    prof = f.allocation_profiles([gpu, npu], coherent=True)[0]
    prog = npu.load_artifact(numpy_artifact(add_one), columns=2, contract=rw_contract(1 << 16))
    with Runtime(gpu, npu=npu) as rt, prof.allocate(1 << 16, fabric=f) as shared:
        g = rt.graph()
        up = g.upload(shared.on(gpu), np.zeros(1 << 14, np.uint32))
        npu_region = g.compute("npu", lambda r: prog.record(r, [shared.on(npu)]), lane="npu")
        down = g.download(shared.on(gpu))
        assert npu_region.deps == (up.index,) and down.deps == (npu_region.index,)
        for k in range(3):
            up.write(np.full(1 << 14, k, np.uint32))
            rt.submit(g).wait()
            assert (down.read(np.uint32) == k + 1).all()
        g.close()


def test_adopting_back_returns_the_original_and_devices_that_cannot_reach_are_refused(gpu, npu):
    f = Fabric()
    home, away = shared_pair(f, gpu, npu)
    shared = f.allocate(512, MemoryPlacement.Shared(home))
    alias = f.adopt(shared, away)
    back = f.adopt(alias, home)
    assert back.allocation is shared.allocation and f.imports == 1
    local = f.allocate(512, MemoryPlacement.NpuLocal(npu))
    if gpu.native.import_buffer(local.allocation.native) is None:
        with pytest.raises(hrx.Unsupported, match="cannot import"):
            f.adopt(local, gpu)
    with pytest.raises(hrx.InvalidArgument):
        f.allocate(16, "shared")  # type: ignore[arg-type]


def test_host_engine_imports_host_visible_memory_and_forwards_cache_control():
    """The host engine (the CPU) reaches another engine's host-visible allocation
    through its host view; cache maintenance on the import goes to the source."""
    import numpy as np
    from hrx_core.engine import CacheOp, NativeBuffer

    class Source(NativeBuffer):
        def __init__(self):
            self.nbytes = 64
            self.array = np.zeros(64, np.uint8)
            self.ops = []

        def host_view(self):
            return self.array

        def cache_control(self, op, offset, length):
            self.ops.append((op, offset, length))

        def free(self):
            pass

    host = hrx.device("host")
    assert host.info.imports_host_memory
    src = Source()
    imported = host.native.import_buffer(src)
    imported.host_view()[:4] = 7
    assert (src.array[:4] == 7).all()                 # the same pages
    imported.cache_control(CacheOp.FLUSH, 8, 16)
    assert src.ops == [(CacheOp.FLUSH, 8, 16)]

    class DeviceOnly(Source):
        def host_view(self):
            return None

    assert host.native.import_buffer(DeviceOnly()) is None
