"""LibamdfProvider end to end through cffi, against the C test double of libamdf.

``stub_libamdf.c`` is a test fixture, not a provider: it implements libamdf's tables
over host memory and rejects (INVALID_ARGUMENT, with a reason) any structure the
binding fills wrongly -- type, size, extension chain, reserved fields, null pointers,
handle kinds, ranges, lifetimes. Every test here ends with the double having
rejected nothing unless the test meant it to.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cffi
import numpy as np
import pytest
from hrx_core.errors import HRXError, InvalidArgument, Timeout

from amdf_stub_build import stub_factory, stub_path  # noqa: F401 (fixtures)
from hrx_amdf import errors
from hrx_amdf import provider as api
from hrx_amdf.constants import (
    TIMEOUT_INFINITE,
    AddressKind,
    AtomicScope,
    CommandType,
    EngineKind,
    ExternalMemoryType,
    HostCacheability,
    HostCacheOperation,
    MapFlag,
    MemoryAccess,
    MemoryClass,
    MemoryFlag,
    ProducerMode,
    ProfileRole,
    PublicationMode,
    QueuePriority,
    QueueRole,
    QueueState,
    ScopeKind,
    StatusCode,
    StatusDomain,
    XdnaArchitecture,
    XdnaSchedulingMode,
)
from hrx_amdf.native import LibamdfProvider
from hrx_amdf.native.cdef import ffi
from hrx_amdf.native.library import API_ENTRIES, GPU_ENTRIES, XDNA_ENTRIES

RWX = MemoryAccess.READ | MemoryAccess.WRITE | MemoryAccess.EXECUTE

#: Entry points the Provider interface has no use for (the double still has them).
UNUSED_ENTRIES = {"memory_query_access_info", "memory_scope_query_pair_info"}


class Stub:
    """The test double's control surface: call counts, rejections, injected failures."""

    def __init__(self, path: Path) -> None:
        self.ffi = cffi.FFI()
        self.ffi.cdef(
            "const char* stub_last_error(void);"
            "uint64_t stub_rejections(void);"
            "uint64_t stub_calls(const char* name);"
            "void stub_fail_next(const char* name, uint64_t status);"
        )
        self.lib = self.ffi.dlopen(str(path))  # the same loaded object the binding uses

    def last_error(self) -> str:
        return self.ffi.string(self.lib.stub_last_error()).decode()

    def rejections(self) -> int:
        """How many times the double refused what the binding passed (INVALID_ARGUMENT)."""
        return int(self.lib.stub_rejections())

    def calls(self, name: str) -> int:
        return int(self.lib.stub_calls(name.encode()))

    def fail_next(self, name: str, status: int) -> None:
        self.lib.stub_fail_next(name.encode(), status)


@pytest.fixture
def stub(stub_path: Path) -> Stub:
    return Stub(stub_path)


@pytest.fixture
def provider(stub_path: Path, stub: Stub) -> Iterator[LibamdfProvider]:
    """A provider over the double; the test fails if the double rejected anything."""
    before = stub.rejections()
    made = LibamdfProvider(str(stub_path))
    yield made
    if not made.destroyed:
        try:
            made.close()
        except HRXError:
            pass
    assert stub.rejections() == before, f"the double rejected what the binding passed: {stub.last_error()}"


@pytest.fixture
def devices(provider: LibamdfProvider) -> Iterator[tuple[Any, Any]]:
    gpu = provider.endpoint(EngineKind.GPU).create_gpu_device()
    npu = provider.endpoint(EngineKind.XDNA).create_xdna_device()
    yield gpu, npu
    for device in (gpu, npu):
        if not device.destroyed and not device._children:
            device.destroy()


def system(provider: LibamdfProvider) -> Any:
    (scope,) = provider.system_scopes()
    return scope


def gpu_memory(provider: LibamdfProvider, gpu: Any, nbytes: int = 8192, access: MemoryAccess = RWX) -> Any:
    return system(provider).create(nbytes, profile=0, accesses=[api.DeviceAccess(gpu, access)])


# ------------------------------------------------------------------ the walk


def test_every_method_end_to_end(provider: LibamdfProvider, stub: Stub) -> None:
    """Every Provider method once, in dependency order, checking what comes back."""
    entries = [*API_ENTRIES, *(f"gpu.{n}" for n in GPU_ENTRIES), *(f"xdna.{n}" for n in XDNA_ENTRIES)]
    before = {name: stub.calls(name) for name in entries}

    assert provider.name == "libamdf" and provider.abi_version == 5
    facts = provider.describe()
    assert facts["abi_version"] == 5 and [e["kind"] for e in facts["endpoints"]] == ["GPU", "XDNA"]
    assert facts["endpoints"][0]["target"] == "gfx1151"

    # endpoints
    gpu_endpoint = provider.endpoint(EngineKind.GPU)
    npu_endpoint = provider.endpoint(EngineKind.XDNA)
    assert gpu_endpoint.info.pci == api.PciInfo(0x1002, 0x1586, 0x1002, 0x0001, 0xC1)
    assert npu_endpoint.info.pci.device_id == 0x17F0 and npu_endpoint.info.pci.revision_id == 0x11
    assert gpu_endpoint.info.name.startswith("stub gfx1151") and len(gpu_endpoint.info.id) == 16
    families = gpu_endpoint.queue_families()
    assert [f.command_type for f in families] == [CommandType.GPU_PM4, CommandType.GPU_SDMA, CommandType.GPU_AQL]
    assert families[0].publication_modes == PublicationMode.USER | PublicationMode.KERNEL
    assert families[1].roles & QueueRole.TRANSFER and families[0].minimum_ring_bytes == 4096
    assert gpu_endpoint.family(CommandType.GPU_AQL, PublicationMode.USER).ordinal == 2
    gpu_info = gpu_endpoint.gpu_info()
    assert gpu_info.target == "gfx1151" and gpu_info.wavefront_size == 32 and gpu_info.lds_bytes == 65536
    assert (gpu_info.xcc_count, gpu_info.shader_engines_per_xcc, gpu_info.compute_unit_count) == (1, 2, 40)
    npu_info = npu_endpoint.xdna_info()
    assert npu_info == api.XdnaEndpointInfo(XdnaArchitecture.AIE2P, "npu5-test-double")
    with pytest.raises(errors.AmdfUnsupported, match="^gpu.endpoint_query_info: UNSUPPORTED"):
        npu_endpoint.gpu_info()

    # devices
    gpu = gpu_endpoint.create_gpu_device()
    npu = npu_endpoint.create_xdna_device()
    assert gpu.endpoint is gpu_endpoint and gpu.info.features == 15 and len(gpu.info.id) == 16
    npu_device = npu.info
    assert (npu_device.column_count, npu_device.row_count, npu_device.instruction_alignment) == (8, 6, 4)
    assert npu_device.scheduling_modes == XdnaSchedulingMode.SPATIAL | XdnaSchedulingMode.TIME_SLICED
    (local,) = gpu.memory_scopes()
    assert npu.memory_scopes() == []
    assert local.info.kind == ScopeKind.LOCAL and local.info.physical_endpoint_id == gpu_endpoint.info.id
    assert local.info.profiles[0].memory_class == MemoryClass.LOCAL

    # memory: create, address, map, export, import, pair info, cache control
    scope = system(provider)
    assert scope.info.kind == ScopeKind.SYSTEM
    create = scope.profiles()[0]
    assert create.roles & ProfileRole.CREATE and ExternalMemoryType.DMA_BUF_FD in create.exports
    assert scope.profiles()[1].host_cacheability == HostCacheability.WRITE_BACK
    both = scope.create(
        10000,
        profile=0,
        accesses=[
            api.DeviceAccess(gpu, RWX),
            api.DeviceAccess(npu, address_kinds=frozenset({AddressKind.XDNA_DMA, AddressKind.XDNA_FIRMWARE})),
        ],
        flags=MemoryFlag.HOST_VISIBLE,
        alignment=4096,
    )
    assert both.nbytes == 10000 and both.info.access_count == 2 and both.info.native_bytes == 12288
    base = both.address()
    assert both.address(1, AddressKind.XDNA_DMA) == base + (1 << 48)
    with pytest.raises(errors.AmdfUnsupported, match="memory_query_address"):
        both.address(1, AddressKind.GPU)
    mapping = both.map()
    assert mapping.info.nbytes == 10000 and mapping.info.address == base and mapping.info.cache_line_size == 64
    assert mapping.array.dtype == np.uint8 and mapping.array.shape == (10000,) and mapping.array.flags.writeable
    mapping.array[:8] = np.arange(8, dtype=np.uint8)
    mapping.cache_control(HostCacheOperation.FLUSH, 0, 8)
    exported = both.export(offset=4096, nbytes=4096)
    assert exported.type == ExternalMemoryType.DMA_BUF_FD and exported.nbytes == 4096 and exported.source_offset == 4096
    assert exported.fd >= 0
    imported = scope.import_memory(exported, profile=0, accesses=[api.DeviceAccess(gpu)])
    assert exported.consumed and imported.nbytes == 4096 and imported.physical_id == both.physical_id
    imported_view = imported.map(flags=MapFlag.READ)
    mapping.array[4096:4100] = [9, 8, 7, 6]
    assert list(imported_view.array[:4]) == [9, 8, 7, 6]  # one backing, two attachments
    assert not imported_view.array.flags.writeable
    pair = both.pair_info(api.DeviceSite(both, 0, 0), api.HostSite(mapping))
    assert pair.reachable and pair.atomic_scope_32 == AtomicScope.SYSTEM
    assert pair.acquire.needed and pair.acquire.host_operation == HostCacheOperation.INVALIDATE
    released = both.export()
    released.release()
    released.release()
    assert released.consumed

    # user queues: create, map (ring, indices, doorbell), status, wait, destroy
    scratch = gpu_memory(provider, gpu, 1 << 16, MemoryAccess.READ | MemoryAccess.WRITE)
    queue = gpu.create_user_queue(
        2,
        ring_bytes=8192,
        priority=QueuePriority.HIGH,
        producer=ProducerMode.MULTI,
        scratch=api.Scratch(scratch, 0, 1 << 16, max_private_bytes=256, max_waves=32),
    )
    assert queue.info.command_type == CommandType.GPU_AQL and queue.info.ring_bytes == 8192
    assert queue.info.priority == QueuePriority.HIGH and queue.info.producer_mode == ProducerMode.MULTI
    view = queue.map()
    assert view.info.index_bits == 64 and view.info.doorbell_bits == 64 and view.ring.shape == (8192,)
    assert view.read_index.dtype == np.uint64 and view.read_index.shape == (1,)
    view.ring[:64] = 0xAA
    view.write_index[0] = 64
    view.doorbell.write(64)
    doorbell = np.frombuffer(ffi.buffer(ffi.cast("char *", view.info.doorbell_address), 8), dtype=np.uint64)
    assert doorbell[0] == 64
    status = queue.status()
    assert status.state == QueueState.ACTIVE and (status.producer_index, status.consumed_index) == (64, 64)
    assert view.read_index[0] == 64
    queue.wait_consumed(64, TIMEOUT_INFINITE, poll_ns=1000)
    view.destroy()
    queue.destroy()
    scratch.destroy()

    # GPU kernel queues: submit, status, refresh, notification, wait, destroy
    commands = gpu_memory(provider, gpu)
    kernel = gpu.create_kernel_queue(0, max_pending=8)
    assert kernel.info.command_type == CommandType.GPU_PM4 and kernel.info.maximum_pending == 8
    assert kernel.info.notification_types == 1 << 1  # AMDF_NATIVE_EVENT_TYPE_BIT_EVENTFD
    first = kernel.submit([api.KernelCommand(commands, 0, 64), api.KernelCommand(commands, 64, 128)])
    second = kernel.submit([api.KernelCommand(commands, 256, 4)])
    assert second > first
    assert kernel.status().retired_submission == 0
    eventfd = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        kernel.request_notification(second, eventfd)
        with pytest.raises(BlockingIOError):
            os.eventfd_read(eventfd)
        assert kernel.refresh().retired_submission == second
        assert os.eventfd_read(eventfd) == 1
    finally:
        os.close(eventfd)
    kernel.wait(second, 0)
    kernel.destroy()
    commands.destroy()

    # XDNA: context, placement, private scope, kernel queue
    context = npu.create_context(4, origin=0, modes=XdnaSchedulingMode.SPATIAL)
    assert context.info.columns == 4 and context.info.scheduling_mode == XdnaSchedulingMode.SPATIAL
    assert context.info.device_id == npu.info.id and context.placement() == (0, 8)
    (private,) = context.memory_scopes()
    assert private.info.kind == ScopeKind.PRIVATE and private.profiles()[0].memory_class == MemoryClass.PRIVATE
    instructions = private.create(4096, profile=0, accesses=[api.DeviceAccess(npu, RWX)])
    npu_queue = context.create_kernel_queue(0, max_pending=128)
    point = npu_queue.submit([api.KernelCommand(instructions, 0, 256)])
    npu_queue.wait(point, TIMEOUT_INFINITE)
    assert npu_queue.status().retired_submission == point
    npu_queue.destroy()
    instructions.destroy()
    context.destroy()

    # teardown, children first
    for done in (mapping, imported_view, both, imported, gpu, npu):
        done.destroy()
    provider.close()
    assert provider.destroyed and gpu_endpoint.destroyed

    called = {name for name in entries if stub.calls(name) > before[name]}
    # The fixture created the instance and negotiated the extensions before the snapshot.
    called |= {name for name in ("instance_create", "query_extension") if stub.calls(name)}
    assert called | UNUSED_ENTRIES == set(entries), sorted(set(entries) - called - UNUSED_ENTRIES)


# -------------------------------------------------------------- host views


def test_doorbell_is_a_full_width_store_and_checks_its_value(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    queue = gpu.create_user_queue(1)  # SDMA, default ring
    view = queue.map()
    address = view.info.doorbell_address
    cell = np.frombuffer(ffi.buffer(ffi.cast("char *", address), 8), dtype=np.uint64)
    view.write_index[0] = 2**40 + 8
    view.doorbell.write(2**40 + 8)
    assert cell[0] == 2**40 + 8  # all 64 bits in one store
    for bad in (-1, 2**64, 1.5, "8", True):
        with pytest.raises(InvalidArgument, match="^value"):
            view.doorbell.write(bad)
    assert queue.status().consumed_index == 2**40 + 8
    view.destroy()
    with pytest.raises(InvalidArgument, match="doorbell"):
        view.doorbell.write(1)
    queue.destroy()


def test_wait_consumed_times_out_before_the_doorbell(provider: LibamdfProvider, devices: Any, stub: Stub) -> None:
    gpu, _ = devices
    queue = gpu.create_user_queue(0)
    view = queue.map()
    view.write_index[0] = 32
    with pytest.raises(errors.AmdfTimeout) as caught:
        queue.wait_consumed(32, 1000)
    assert isinstance(caught.value, Timeout) and caught.value.call == "user_queue_wait_consumed"
    view.doorbell.write(32)
    queue.wait_consumed(32, 1000)
    view.destroy()
    queue.destroy()


def test_read_only_mapping_and_ranges(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    memory = gpu_memory(provider, gpu, 6000)
    window = memory.map(4096, None, MapFlag.READ)
    assert window.info.offset == 4096 and window.array.shape == (6000 - 4096,)
    with pytest.raises(ValueError):
        window.array[0] = 1
    window.destroy()
    memory.destroy()


def test_cpu_only_memory(provider: LibamdfProvider) -> None:
    scope = system(provider)
    assert [p.ordinal for p in scope.profiles()] == [0, 1]
    memory = scope.create(100, profile=0, accesses=[])
    assert memory.info.access_count == 0
    with pytest.raises(InvalidArgument, match="access_ordinal"):
        memory.address()
    view = memory.map()
    view.array[:] = 7
    view.destroy()
    memory.destroy()


def test_scope_profiles_follow_the_live_devices(provider: LibamdfProvider, devices: Any) -> None:
    gpu, npu = devices
    scope = system(provider)
    assert scope.info is scope.info  # cached while the device set is unchanged
    exact = scope.profile_for(0, [api.DeviceAccess(gpu)])
    assert exact.ordinal == 0 and exact.memory_class == MemoryClass.SYSTEM
    with pytest.raises(errors.AmdfOutOfRange, match="memory_scope_query_device_profile: OUT_OF_RANGE"):
        scope.profile_for(5, [])


# -------------------------------------------------------------- lifetimes


def test_parents_with_live_children_are_busy_without_native_calls(
    provider: LibamdfProvider, devices: Any, stub: Stub
) -> None:
    gpu, npu = devices
    memory = gpu_memory(provider, gpu)
    view = memory.map()
    names = ("device_destroy", "memory_destroy", "endpoint_close", "instance_destroy")
    calls = {name: stub.calls(name) for name in names}

    with pytest.raises(errors.AmdfBusy, match="^device_destroy: BUSY .*Memory"):
        gpu.destroy()
    with pytest.raises(errors.AmdfBusy, match="^memory_destroy: BUSY .*HostMapping"):
        memory.destroy()
    with pytest.raises(errors.AmdfBusy, match="^endpoint_close: BUSY .*GpuDevice"):
        gpu.endpoint.close()
    with pytest.raises(errors.AmdfBusy, match="^instance_destroy: BUSY"):
        provider.close()
    assert {name: stub.calls(name) for name in calls} == calls  # libamdf was never asked
    assert not provider.destroyed and not gpu.endpoint.destroyed

    view.destroy()
    view.destroy()  # idempotent
    memory.destroy()
    gpu.destroy()
    npu.destroy()
    provider.close()


def test_command_memory_stays_busy_until_its_submission_retires(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    commands = gpu_memory(provider, gpu)
    other = gpu_memory(provider, gpu)
    queue = gpu.create_kernel_queue(1)
    point = queue.submit([api.KernelCommand(commands, 0, 64)])
    with pytest.raises(errors.AmdfBusy, match="KernelQueue"):
        commands.destroy()
    other.destroy()  # not referenced by the pending submission
    with pytest.raises(errors.AmdfBusy, match="^kernel_queue_destroy: BUSY"):
        queue.destroy()  # the double refuses: unretired work
    assert not queue.destroyed
    queue.refresh()
    assert queue.status().retired_submission == point
    commands.destroy()
    queue.destroy()


def test_scratch_memory_is_held_by_its_queue(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    scratch = gpu_memory(provider, gpu)
    queue = gpu.create_user_queue(2, scratch=api.Scratch(scratch, 0, 4096, 64, 8))
    with pytest.raises(errors.AmdfBusy, match="UserQueue"):
        scratch.destroy()
    queue.destroy()
    scratch.destroy()


def test_context_and_private_memory_order(provider: LibamdfProvider, devices: Any) -> None:
    _, npu = devices
    context = npu.create_context(1)
    assert context.info.scheduling_mode == XdnaSchedulingMode.SPATIAL
    (private,) = context.memory_scopes()
    memory = private.create(4096, profile=0, accesses=[api.DeviceAccess(npu, RWX)])
    with pytest.raises(errors.AmdfBusy, match="^xdna.context_destroy: BUSY .*Memory"):
        context.destroy()
    with pytest.raises(errors.AmdfBusy, match="XdnaContext"):
        npu.destroy()
    memory.destroy()
    context.destroy()


def test_destroyed_objects_are_refused(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    memory = gpu_memory(provider, gpu)
    view = memory.map()
    view.destroy()
    memory.destroy()
    memory.destroy()
    for call in (
        lambda: memory.map(),
        lambda: memory.address(),
        lambda: memory.export(),
        lambda: view.cache_control(HostCacheOperation.FLUSH, 0, 1),
        lambda: gpu.create_kernel_queue(0).submit([api.KernelCommand(memory, 0, 4)]),
    ):
        with pytest.raises(InvalidArgument, match="was destroyed"):
            call()
    kernel = [c for c in gpu._children if isinstance(c, api.KernelQueue)]
    for queue in kernel:
        queue.destroy()
    gpu.destroy()
    with pytest.raises(InvalidArgument, match="was destroyed"):
        gpu.create_user_queue(0)
    with pytest.raises(InvalidArgument, match="was destroyed"):
        _ = gpu.info


# ---------------------------------------------------------- bad arguments


def bad_calls(provider: LibamdfProvider, gpu: Any, npu: Any) -> dict[str, tuple[str, Callable[[], Any]]]:
    scope = system(provider)
    memory = gpu_memory(provider, gpu)
    view = memory.map()
    kernel = gpu.create_kernel_queue(0)
    user = gpu.create_user_queue(0)
    good = [api.DeviceAccess(gpu)]
    cases: dict[str, tuple[str, Callable[[], Any]]] = {
        "nbytes zero": ("nbytes", lambda: scope.create(0, profile=0, accesses=good)),
        "nbytes str": ("nbytes", lambda: scope.create("1", profile=0, accesses=good)),
        "profile negative": ("profile", lambda: scope.create(64, profile=-1, accesses=good)),
        "profile too big": ("profile", lambda: scope.create(64, profile=2**32, accesses=good)),
        "flags unknown": ("flags", lambda: scope.create(64, profile=0, accesses=good, flags=1 << 40)),
        "alignment 3": ("alignment", lambda: scope.create(64, profile=0, accesses=good, alignment=3)),
        "accesses str": ("accesses", lambda: scope.create(64, profile=0, accesses="gpu")),
        "accesses object": ("accesses[0]", lambda: scope.create(64, profile=0, accesses=[object()])),
        "access device": (
            "accesses[0].device",
            lambda: scope.create(64, profile=0, accesses=[api.DeviceAccess(object())]),
        ),
        "access twice": ("accesses[1].device", lambda: scope.create(64, profile=0, accesses=good * 2)),
        "access bits": ("accesses[0].access", lambda: scope.create(64, profile=0, accesses=[api.DeviceAccess(gpu, 8)])),
        "access kinds": (
            "accesses[0].address_kinds",
            lambda: scope.create(64, profile=0, accesses=[api.DeviceAccess(gpu, address_kinds=frozenset({7}))]),
        ),
        "import foreign": ("external", lambda: scope.import_memory(object(), profile=0, accesses=good)),
        "map past end": ("map", lambda: memory.map(8192, 1)),
        "map flags zero": ("flags", lambda: memory.map(flags=0)),
        "export none": ("type", lambda: memory.export(ExternalMemoryType.NONE)),
        "export type 9": ("type", lambda: memory.export(9)),
        "address ordinal": ("access_ordinal", lambda: memory.address(1)),
        "address kind": ("kind", lambda: memory.address(0, 7)),
        "pair site": ("producer", lambda: memory.pair_info(object(), api.HostSite(view))),
        "pair ordinal": (
            "consumer.access_ordinal",
            lambda: memory.pair_info(api.HostSite(view), api.DeviceSite(memory, 3)),
        ),
        "cache op": ("operation", lambda: view.cache_control(5, 0, 1)),
        "cache range": ("cache_control", lambda: view.cache_control(HostCacheOperation.FLUSH, 8000, 1000)),
        "family": ("family", lambda: gpu.create_user_queue(3)),
        "ring bytes": ("ring_bytes", lambda: gpu.create_user_queue(0, ring_bytes=3000)),
        "priority": ("priority", lambda: gpu.create_user_queue(0, priority=7)),
        "producer": ("producer", lambda: gpu.create_user_queue(0, producer=0)),
        "scratch": ("scratch", lambda: gpu.create_user_queue(0, scratch=object())),
        "scratch range": ("scratch", lambda: gpu.create_user_queue(2, scratch=api.Scratch(memory, 4096, 8192, 1, 1))),
        "max pending": ("max_pending", lambda: gpu.create_kernel_queue(0, max_pending=-1)),
        "submit none": ("commands", lambda: kernel.submit([])),
        "submit str": ("commands", lambda: kernel.submit("x")),
        "submit object": ("commands[0]", lambda: kernel.submit([object()])),
        "submit range": ("commands[0]", lambda: kernel.submit([api.KernelCommand(memory, 8190, 4)])),
        "submit empty": ("commands[0] nbytes", lambda: kernel.submit([api.KernelCommand(memory, 0, 0)])),
        "submit too many": ("commands", lambda: kernel.submit([api.KernelCommand(memory, 0, 4)] * 17)),
        "wait zero": ("submission", lambda: kernel.wait(0, 1)),
        "wait timeout": ("timeout_ns", lambda: kernel.wait(1, -1)),
        "wait poll": ("poll_ns", lambda: kernel.wait(1, 1, 2**64)),
        "notify fd": ("eventfd", lambda: kernel.request_notification(1, -1)),
        "notify point": ("submission", lambda: kernel.request_notification(0, 3)),
        "consumed index": ("index", lambda: user.wait_consumed("1", 0)),
        "columns": ("columns", lambda: npu.create_context(0)),
        "origin": ("origin", lambda: npu.create_context(1, origin=2**32 - 1)),
        "modes none": ("modes", lambda: npu.create_context(1, modes=0)),
        "modes unknown": ("modes", lambda: npu.create_context(1, modes=8)),
        "profile_for ordinal": ("ordinal", lambda: scope.profile_for(-1, [])),
    }
    cases["cleanup"] = ("", lambda: (view.destroy(), kernel.destroy(), user.destroy(), memory.destroy()))
    return cases


def test_bad_arguments_never_reach_libamdf(provider: LibamdfProvider, devices: Any, stub: Stub) -> None:
    gpu, npu = devices
    cases = bad_calls(provider, gpu, npu)
    cleanup = cases.pop("cleanup")[1]
    rejected_before = stub.last_error()
    for label, (argument, call) in cases.items():
        with pytest.raises(InvalidArgument) as caught:
            call()
        assert not isinstance(caught.value, errors.AmdfError), f"{label}: reached libamdf ({caught.value})"
        assert str(caught.value).startswith(argument), f"{label}: {caught.value}"
    assert stub.last_error() == rejected_before
    cleanup()


# ------------------------------------------------------------ statuses


@pytest.mark.parametrize(
    "status",
    [
        *(errors.make_status(code) for code in StatusCode if code != StatusCode.OK),
        errors.make_status(12, StatusDomain.ERRNO),
    ],
    ids=lambda s: errors.status_name(s),
)
def test_native_statuses_arrive_as_hrx_errors_naming_the_call(
    provider: LibamdfProvider, devices: Any, stub: Stub, status: int
) -> None:
    gpu, _ = devices
    scope = system(provider)
    stub.fail_next("memory_create", status)
    with pytest.raises(errors.AmdfError) as caught:
        scope.create(64, profile=0, accesses=[api.DeviceAccess(gpu)])
    expected = errors.error_for("memory_create", status)
    assert type(caught.value) is type(expected)
    assert caught.value.status == status and caught.value.call == "memory_create"
    assert str(caught.value).startswith(f"memory_create: {errors.status_name(status)}")
    assert gpu._children == set()  # nothing was adopted
    stub.fail_next("gpu.user_queue_create", status)
    with pytest.raises(type(expected), match=f"^gpu.user_queue_create: {errors.status_name(status)}"):
        gpu.create_user_queue(0)


def test_failed_destroy_keeps_or_consumes_as_libamdf_says(provider: LibamdfProvider, devices: Any, stub: Stub) -> None:
    gpu, _ = devices
    memory = gpu_memory(provider, gpu)
    view = memory.map()
    stub.fail_next("host_mapping_destroy", errors.make_status(StatusCode.INTERNAL))
    with pytest.raises(errors.AmdfDeviceError):
        view.destroy()
    assert not view.destroyed  # a failed mapping destroy leaves it live
    view.destroy()
    stub.fail_next("memory_destroy", errors.make_status(5, StatusDomain.ERRNO))
    with pytest.raises(errors.AmdfDeviceError, match="ERRNO 5"):
        memory.destroy()
    assert memory.destroyed  # memory_destroy consumes the handle even when native release fails
    assert gpu._children == set()


def test_kernel_window_full_is_busy_and_timeouts_are_timeouts(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    commands = gpu_memory(provider, gpu)
    queue = gpu.create_kernel_queue(1, max_pending=1)
    point = queue.submit([api.KernelCommand(commands, 0, 4)])
    with pytest.raises(errors.AmdfBusy, match="^gpu.kernel_queue_submit: BUSY"):
        queue.submit([api.KernelCommand(commands, 0, 4)])
    with pytest.raises(Timeout, match="^kernel_queue_wait: DEADLINE_EXCEEDED"):
        queue.wait(point, 0)
    with pytest.raises(errors.AmdfOutOfRange, match="^kernel_queue_wait: OUT_OF_RANGE"):
        queue.wait(point + 5, 0)
    queue.wait(point, 10**6)
    queue.destroy()
    commands.destroy()


def test_import_consumes_once(provider: LibamdfProvider, devices: Any) -> None:
    gpu, _ = devices
    memory = gpu_memory(provider, gpu)
    scope = system(provider)
    exported = memory.export()
    first = scope.import_memory(exported, profile=0, accesses=[api.DeviceAccess(gpu)])
    with pytest.raises(InvalidArgument, match="already imported or released"):
        scope.import_memory(exported, profile=0, accesses=[api.DeviceAccess(gpu)])
    failing = memory.export()
    with pytest.raises(errors.AmdfUnsupported, match="^memory_import: UNSUPPORTED"):
        scope.import_memory(failing, profile=1, accesses=[api.DeviceAccess(gpu)])
    assert not failing.consumed  # a failed import leaves the value to its owner
    failing.release()
    first.destroy()
    memory.destroy()


# ----------------------------------------------- the double really checks


def test_the_double_rejects_malformed_structures(stub_path: Path, stub: Stub) -> None:
    """Without this the end-to-end tests would prove nothing about the marshalling."""
    provider = LibamdfProvider(str(stub_path))
    try:
        table = provider.library.api
        scope = system(provider)._handle
        out = ffi.new("amdf_memory_t **")
        mutations: dict[str, Callable[[Any], None]] = {
            "type": lambda info: setattr(info, "type", 5),
            "structure_size": lambda info: setattr(info, "structure_size", 8),
            "next": lambda info: setattr(info, "next", info),
            "reserved": lambda info: setattr(info, "reserved", 1),
            "null accesses": lambda info: setattr(info, "access_count", 1),
            "host pointer": lambda info: setattr(info, "registered_host_pointer", info),
        }
        for field, mutate in mutations.items():
            before = stub.rejections()
            info = ffi.new("amdf_memory_create_info_t *")
            info.type = 4
            info.structure_size = ffi.sizeof("amdf_memory_create_info_t")
            info.byte_length = 64
            mutate(info)
            assert table.memory_create(scope, info, out) == StatusCode.INVALID_ARGUMENT, field
            assert stub.rejections() == before + 1, field
        assert out[0] == ffi.NULL
    finally:
        provider.close()
