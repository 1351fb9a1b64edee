"""Memory of the simulated Strix Halo: scopes, profiles, addresses, host caches, sharing."""

from __future__ import annotations

import numpy as np
import pytest

from fakekit import Producer, memory, sdma_copy
from hrx_amdf.constants import AddressKind, AtomicScope, ExternalMemoryType, HostCacheOperation, MapFlag, MemoryAccess, MemoryClass, MemoryFlag, ScopeKind
from hrx_amdf.errors import AmdfBusy, AmdfInvalidArgument, AmdfOutOfRange, AmdfResourceExhausted, AmdfUnsupported
from hrx_amdf.fake import SYSTEM_CACHED, SYSTEM_COHERENT
from hrx_amdf.provider import DeviceAccess, DeviceSite, HostSite
from hrx_core.errors import BudgetExceeded, DeviceError, InvalidArgument


def test_scopes_and_profiles(provider, gpu):
    (system,) = provider.system_scopes()
    assert system.info.kind == ScopeKind.SYSTEM
    cached, coherent = system.profiles()
    assert cached.memory_class == MemoryClass.SYSTEM and not cached.guaranteed_flags & MemoryFlag.HOST_COHERENT
    assert coherent.guaranteed_flags & MemoryFlag.HOST_COHERENT
    (local,) = gpu.memory_scopes()
    assert local.info.kind == ScopeKind.LOCAL and local.profiles()[0].guaranteed_flags & MemoryFlag.DEVICE_LOCAL


def test_addresses_are_distinct_per_kind_and_guarded(provider, gpu, npu):
    scope = provider.system_scopes()[0]
    m = scope.create(8192, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu), DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))])
    g, n = m.address(0), m.address(1, AddressKind.XDNA_DMA)
    assert g != n and g % 4096 == 0
    with pytest.raises(AmdfUnsupported):
        m.address(0, AddressKind.XDNA_DMA)
    with pytest.raises(AmdfOutOfRange):
        m.address(2)
    other = scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)])
    assert other.address() >= g + 8192 + (1 << 20), "allocations are separated by unmapped guard gaps"


def test_create_validates(provider, gpu):
    scope = provider.system_scopes()[0]
    with pytest.raises(AmdfOutOfRange):
        scope.create(0, profile=0, accesses=[DeviceAccess(gpu)])
    with pytest.raises(AmdfOutOfRange):
        scope.create(64, profile=7, accesses=[DeviceAccess(gpu)])
    with pytest.raises(AmdfUnsupported):
        scope.create(64, profile=0, accesses=[DeviceAccess(gpu)], flags=MemoryFlag.DEVICE_LOCAL)
    with pytest.raises(AmdfUnsupported):
        scope.create(64, profile=0, accesses=[DeviceAccess(gpu, address_kinds=frozenset({AddressKind.XDNA_DMA}))])
    with pytest.raises(AmdfInvalidArgument):
        scope.create(64, profile=0, accesses=[DeviceAccess(object())])  # type: ignore[arg-type]
    # errors are HRX errors of the matching class
    with pytest.raises(InvalidArgument):
        scope.create(64, profile=0, accesses=[DeviceAccess(gpu, MemoryAccess(0))])


def test_budget_exhaustion_and_release(provider, gpu):
    (local,) = gpu.memory_scopes()
    big = local.create(48 << 20, profile=0, accesses=[DeviceAccess(gpu)])
    with pytest.raises(AmdfResourceExhausted) as info:
        local.create(32 << 20, profile=0, accesses=[DeviceAccess(gpu)])
    assert isinstance(info.value, DeviceError) and isinstance(info.value, MemoryError)
    big.destroy()
    local.create(32 << 20, profile=0, accesses=[DeviceAccess(gpu)]).destroy()


def test_vram_is_reachable_by_its_gpu_only(provider, gpu, npu):
    (local,) = gpu.memory_scopes()
    with pytest.raises(AmdfUnsupported):
        local.create(4096, profile=0, accesses=[DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))])
    m = local.create(4096, profile=0, accesses=[DeviceAccess(gpu)])
    with pytest.raises(AmdfUnsupported, match="HOST_VISIBLE"):
        m.map()


def test_mapping_lifetime(provider, gpu):
    m = memory(provider, gpu)
    mapping = m.map(16, 64)
    assert mapping.array.size == 64 and mapping.info.offset == 16
    with pytest.raises(AmdfBusy):
        m.destroy()
    mapping.destroy()
    m.destroy()
    with pytest.raises(AmdfInvalidArgument):
        m.map()
    with pytest.raises(AmdfInvalidArgument):
        m.destroy()


def test_read_only_mapping(provider, gpu):
    mapping = memory(provider, gpu).map(flags=MapFlag.READ)
    with pytest.raises(ValueError):
        mapping.array[0] = 1
    with pytest.raises(DeviceError):  # FAILED_PRECONDITION: flushing needs a writable mapping
        mapping.cache_control(HostCacheOperation.FLUSH, 0, 64)


class TestHostCacheModel:
    """Cacheable system memory shows missing host cache maintenance as wrong bytes."""

    def test_host_writes_reach_the_device_only_after_flush(self, provider, gpu):
        src = memory(provider, gpu, coherent=False)
        dst = memory(provider, gpu)
        mapping = src.map()
        mapping.array[:4] = [1, 2, 3, 4]
        q = Producer(gpu.create_user_queue(1))
        q.sdma(sdma_copy(src.address(), dst.address(), 4))
        assert list(dst.device_view(0, 4)) == [0, 0, 0, 0], "unflushed host writes must not be visible to the device"
        mapping.cache_control(HostCacheOperation.FLUSH, 0, 4)
        q.sdma(sdma_copy(src.address(), dst.address(), 4))
        assert list(dst.device_view(0, 4)) == [1, 2, 3, 4]

    def test_device_writes_reach_the_host_only_after_invalidate(self, provider, gpu):
        buf = memory(provider, gpu, coherent=False)
        src = memory(provider, gpu)
        mapping = buf.map()
        _ = int(mapping.array[0])  # the line is now cached
        src.device_view(0, 4)[:] = [9, 9, 9, 9]
        Producer(gpu.create_user_queue(1)).sdma(sdma_copy(src.address(), buf.address(), 4))
        assert list(mapping.array[:4]) == [0, 0, 0, 0]
        mapping.cache_control(HostCacheOperation.INVALIDATE, 0, 4)
        assert list(mapping.array[:4]) == [9, 9, 9, 9]

    def test_flush_writes_back_only_dirty_bytes(self, provider, gpu):
        buf = memory(provider, gpu, coherent=False)
        mapping = buf.map()
        buf.device_view(100, 1)[0] = 7  # the device wrote a byte the host did not touch
        mapping.array[0] = 5
        mapping.cache_control(HostCacheOperation.FLUSH, 0, 4096)
        assert buf.device_view(0, 1)[0] == 5 and buf.device_view(100, 1)[0] == 7

    def test_coherent_memory_needs_no_maintenance(self, provider, gpu):
        buf = memory(provider, gpu, coherent=True)
        mapping = buf.map()
        mapping.array[:2] = [3, 4]
        assert list(buf.device_view(0, 2)) == [3, 4]
        assert mapping.info.flush.kind == 1  # NONE

    def test_maintenance_ranges_are_checked(self, provider, gpu):
        mapping = memory(provider, gpu, coherent=False).map(0, 128)
        with pytest.raises(AmdfOutOfRange):
            mapping.cache_control(HostCacheOperation.FLUSH, 100, 64)
        with pytest.raises(AmdfInvalidArgument):
            mapping.cache_control(HostCacheOperation.NONE, 0, 4)


def test_export_import_shares_the_backing(provider, gpu, npu):
    scope = provider.system_scopes()[0]
    g = scope.create(8192, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)], flags=MemoryFlag.SHAREABLE)
    external = g.export(offset=4096, nbytes=4096)
    n = scope.import_memory(external, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))])
    assert n.info.nbytes == 4096
    g.device_view(4096, 4)[:] = [1, 2, 3, 4]
    assert list(n.device_view(0, 4)) == [1, 2, 3, 4]
    with pytest.raises(AmdfInvalidArgument):  # consumed by the import
        scope.import_memory(external, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA}))])
    g.destroy()
    assert list(n.device_view(0, 4)) == [1, 2, 3, 4], "the import keeps the backing alive"


def test_export_needs_shareable(provider, gpu):
    with pytest.raises(AmdfUnsupported, match="SHAREABLE"):
        memory(provider, gpu).export()
    m = memory(provider, gpu, flags=MemoryFlag.SHAREABLE)
    with pytest.raises(AmdfOutOfRange):
        m.export(offset=100)
    m.export().release()


def test_pair_info_describes_release_and_acquire(provider, gpu, npu):
    cached = memory(provider, gpu, coherent=False, devices=[gpu])
    mapping = cached.map()
    info = cached.pair_info(HostSite(mapping), DeviceSite(cached))
    assert info.release.host_operation == HostCacheOperation.FLUSH and info.acquire.executor == 1
    back = cached.pair_info(DeviceSite(cached), HostSite(mapping))
    assert back.acquire.host_operation == HostCacheOperation.INVALIDATE and back.atomic_scope_64 == AtomicScope.SYSTEM
    coherent = memory(provider, gpu)
    assert not coherent.pair_info(HostSite(coherent.map()), DeviceSite(coherent)).release.needed


def test_create_checks_alignment_and_access_flags(provider, gpu):
    scope = provider.system_scopes()[0]
    for alignment in (3 << 12, 1 << 31):  # not a power of two; beyond the profile's maximum (1 GiB)
        with pytest.raises(AmdfInvalidArgument, match=f"alignment {alignment}"):
            scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)], alignment=alignment)
    assert scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)], alignment=1 << 30).address() % (1 << 30) == 0
    with pytest.raises(AmdfUnsupported, match="beyond the profile"):
        scope.create(4096, profile=SYSTEM_CACHED, accesses=[DeviceAccess(gpu, flags=MemoryFlag.DEVICE_LOCAL)])
    (local,) = gpu.memory_scopes()
    with pytest.raises(AmdfUnsupported, match="coherent access needs system memory"):
        local.create(4096, profile=0, accesses=[DeviceAccess(gpu, flags=MemoryFlag.HOST_COHERENT)])




@pytest.mark.parametrize(
    "make",
    [
        lambda scope, gpu: scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu, MemoryAccess.READ | MemoryAccess(1 << 3))]),
        lambda scope, gpu: scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)], flags=MemoryFlag(1 << 20)),
        lambda scope, gpu: scope.create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu, flags=MemoryFlag(1 << 20))]),
    ],
    ids=["access-bit", "memory-flag-bit", "access-flag-bit"],
)
def test_undefined_flag_bits_are_refused(provider, gpu, make):
    with pytest.raises((AmdfInvalidArgument, AmdfUnsupported)):
        make(provider.system_scopes()[0], gpu)


def test_private_context_memory_belongs_to_the_contexts_device(provider, npu):
    other = provider.endpoint(npu.endpoint.info.engine_kind).create_xdna_device()
    scope = npu.create_context(1).memory_scopes()[0]
    firmware = frozenset({AddressKind.XDNA_FIRMWARE})
    with pytest.raises(AmdfUnsupported, match="only the context's device"):
        scope.create(4096, profile=0, accesses=[DeviceAccess(other, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=firmware)])
    scope.create(4096, profile=0, accesses=[DeviceAccess(npu, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=firmware)]).destroy()


def test_import_is_checked(provider, gpu, npu):
    system = provider.system_scopes()[0]
    source = system.create(8192, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)], flags=MemoryFlag.SHAREABLE)
    (local,) = gpu.memory_scopes()
    with pytest.raises(AmdfInvalidArgument, match="not an external memory"):
        local.import_memory(object(), profile=0, accesses=[DeviceAccess(gpu)])
    # a coherent access needs system memory: the VRAM scope refuses it on import too
    with pytest.raises(AmdfUnsupported, match="coherent access needs system memory"):
        local.import_memory(source.export(), profile=0, accesses=[DeviceAccess(gpu, flags=MemoryFlag.HOST_COHERENT)])
    # private context memory is created, never imported
    private = npu.create_context(1).memory_scopes()[0]
    firmware = DeviceAccess(npu, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=frozenset({AddressKind.XDNA_FIRMWARE}))
    with pytest.raises(AmdfUnsupported, match="profile 0 cannot import"):
        private.import_memory(source.export(), profile=0, accesses=[firmware])
    imported = local.import_memory(source.export(), profile=0, accesses=[DeviceAccess(gpu)])
    assert imported.info.nbytes == 8192


def test_address_kind_must_be_known(provider, gpu):
    m = memory(provider, gpu)
    with pytest.raises(AmdfInvalidArgument, match="unknown address kind"):
        m.address(0, 99)  # type: ignore[arg-type]
    with pytest.raises(AmdfInvalidArgument, match="unknown address kind"):
        m.address(0, "GPU")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "offset, nbytes, flags, cls, match",
    [
        (4000, 200, MapFlag.READ, AmdfOutOfRange, "outside 4096 bytes"),
        (-64, 64, MapFlag.READ, AmdfOutOfRange, "outside 4096 bytes"),
        (0, 0, MapFlag.READ, AmdfOutOfRange, "outside 4096 bytes"),
        (4096, None, MapFlag.READ, AmdfOutOfRange, "outside 4096 bytes"),
        (0, 64, MapFlag(0), AmdfInvalidArgument, "map flags"),
        pytest.param(0, 64, MapFlag(4) | MapFlag.READ, AmdfInvalidArgument, "map flags"),
    ],
    ids=["past-end", "negative-offset", "empty", "offset-at-end", "no-flags", "undefined-flag"],
)
def test_map_checks_its_range_and_flags(provider, gpu, offset, nbytes, flags, cls, match):
    m = memory(provider, gpu)
    with pytest.raises(cls, match=match):
        m.map(offset, nbytes, flags)
    assert not m._mappings
    m.destroy()


def test_destroyed_or_write_only_mappings_refuse_maintenance(provider, gpu):
    m = memory(provider, gpu, coherent=False)
    write_only = m.map(flags=MapFlag.WRITE)
    with pytest.raises(DeviceError, match="invalidate needs a readable mapping"):
        write_only.cache_control(HostCacheOperation.INVALIDATE, 0, 64)
    write_only.cache_control(HostCacheOperation.FLUSH, 0, 64)
    write_only.destroy()
    with pytest.raises(AmdfInvalidArgument, match="mapping destroyed"):
        write_only.cache_control(HostCacheOperation.FLUSH, 0, 64)
    with pytest.raises(AmdfInvalidArgument, match="mapping already destroyed"):
        write_only.destroy()
    m.destroy()


def test_exports_are_dma_bufs(provider, gpu):
    m = memory(provider, gpu, flags=MemoryFlag.SHAREABLE)
    for kind in (ExternalMemoryType.OPAQUE_FD, ExternalMemoryType.HOST_POINTER):
        with pytest.raises(AmdfUnsupported, match=f"{kind.name} exports are not supported"):
            m.export(kind)
    m.export(ExternalMemoryType.DMA_BUF_FD).release()


def test_pair_info_sites_must_be_of_this_memory(provider, gpu):
    m, other = memory(provider, gpu), memory(provider, gpu)
    other_mapping = other.map()
    with pytest.raises(DeviceError, match="host site maps another backing"):
        m.pair_info(HostSite(other_mapping), DeviceSite(m))
    with pytest.raises(DeviceError, match="device site on another backing"):
        m.pair_info(DeviceSite(m), DeviceSite(other))
    with pytest.raises(AmdfOutOfRange, match="access ordinal 1"):
        m.pair_info(DeviceSite(m), DeviceSite(m, access_ordinal=1))
    with pytest.raises(AmdfInvalidArgument, match="site"):
        m.pair_info(DeviceSite(m), object())  # type: ignore[arg-type]
    info = m.pair_info(DeviceSite(m), DeviceSite(m))
    assert info.reachable and info.atomic_scope_32 == AtomicScope.DEVICE


def test_code_objects_may_forget_memory_from_inside_their_own_calls():
    """A garbage-collected hrx Buffer frees its memory wherever the collector runs --
    also inside a CodeObjects call on the same thread (found as a hang: a finalizer
    ran during describe_kernargs). Forgetting memory there must not deadlock."""
    import threading

    from hrx_amdf.fake.kernels import CodeObjects

    objects = CodeObjects()
    done = threading.Event()

    def inside() -> None:
        with objects._lock:  # as describe_kernargs holds it
            objects.forget_memory(object())
        done.set()

    worker = threading.Thread(target=inside, daemon=True)
    worker.start()
    worker.join(5)
    assert done.is_set(), "forget_memory deadlocked inside a CodeObjects call"
