"""Memory of the simulated Strix Halo: scopes, profiles, addresses, host caches, sharing."""

from __future__ import annotations

import numpy as np
import pytest

from fakekit import Producer, memory, sdma_copy
from hrx_amdf.constants import AddressKind, AtomicScope, HostCacheOperation, MapFlag, MemoryAccess, MemoryClass, MemoryFlag, ScopeKind
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
