"""The simulated NPU5: contexts, private instruction memory and the kernel queue."""

from __future__ import annotations

import os
import re
import select
import struct
import threading

import numpy as np
import pytest

from fakekit import patched_program, txn
from hrx_amdf.constants import AddressKind, MemoryAccess, MemoryFlag, QueueState, StatusDomain, XdnaSchedulingMode
from hrx_amdf.errors import AmdfBusy, AmdfDeviceError, AmdfInvalidArgument, AmdfOutOfRange, AmdfTimeout, AmdfUnsupported
from hrx_amdf.fake import SYSTEM_COHERENT, NpuBinding
from hrx_amdf.provider import DeviceAccess, KernelCommand

XDNA_DMA = frozenset({AddressKind.XDNA_DMA})
FIRMWARE = frozenset({AddressKind.XDNA_FIRMWARE})
RW = MemoryAccess.READ | MemoryAccess.WRITE


def test_device_facts(provider, npu):
    endpoint = npu.endpoint
    assert (endpoint.info.pci.device_id, endpoint.info.pci.revision_id) == (0x17F0, 0x11)
    assert endpoint.xdna_info().target_id == "amd.xdna.strix_halo.17f0_11"
    assert (npu.info.column_count, npu.info.row_count) == (8, 6)
    assert endpoint.queue_families()[0].command_type.name == "XDNA"


def test_contexts_spatial_then_time_sliced(npu):
    a = npu.create_context(6)
    b = npu.create_context(2)
    c = npu.create_context(4)
    assert [x.info.scheduling_mode for x in (a, b, c)] == [XdnaSchedulingMode.SPATIAL] * 2 + [XdnaSchedulingMode.TIME_SLICED]
    with pytest.raises(Exception, match="time-slicing not acceptable"):
        npu.create_context(1, modes=XdnaSchedulingMode.SPATIAL)
    with pytest.raises(AmdfOutOfRange):
        npu.create_context(9)
    with pytest.raises(AmdfUnsupported):
        npu.create_context(1, origin=3)
    a.destroy()
    assert npu.create_context(6, modes=XdnaSchedulingMode.SPATIAL).info.columns == 6


class Harness:
    """One context, one queue, one registered doubling program with two bindings."""

    def __init__(self, provider, npu, columns=2):
        self.provider, self.npu = provider, npu
        self.context = npu.create_context(columns)
        self.queue = self.context.create_kernel_queue(0)
        self.stream, self.patches = patched_program(2)
        self.calls = 0

        def double(views):
            self.calls += 1
            views[1].view(np.int32)[:] = views[0].view(np.int32) * 2

        self.program = provider.register_npu_program(
            "double", self.stream, self.patches, [NpuBinding(256, MemoryAccess.READ), NpuBinding(256, RW)], double
        )
        scope = self.context.memory_scopes()[0]
        self.instructions = scope.create(1 << 16, profile=0, accesses=[DeviceAccess(npu, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=FIRMWARE)])
        system = provider.system_scopes()[0]
        self.data = system.create(8192, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(npu, RW, address_kinds=XDNA_DMA)])
        self.slot = 0

    def command(self, inp=0, out=4096, stream=None, **patch):
        stream = bytearray(stream or self.stream)
        base = self.data.address(0, AddressKind.XDNA_DMA)
        for (offset, index), addr in zip(self.patches, (base + inp, base + out)):
            stream[offset : offset + 8] = patch.get(f"b{index}", addr).to_bytes(8, "little")
        offset = self.slot * 1024
        self.slot = (self.slot + 1) % 64
        self.instructions.device_view(offset, len(stream))[:] = np.frombuffer(bytes(stream), np.uint8)
        return KernelCommand(self.instructions, offset, len(stream))


@pytest.fixture
def h(provider, npu):
    return Harness(provider, npu)


def test_submit_runs_the_program_on_its_bindings(h):
    h.data.device_view(0, 256).view(np.int32)[:] = np.arange(64)
    point = h.queue.submit([h.command()])
    h.queue.wait(point, 5 * 10**9)
    assert np.array_equal(h.data.device_view(4096, 256).view(np.int32), np.arange(64) * 2)
    assert h.queue.refresh().retired_submission == point


def test_later_writes_to_instruction_memory_do_not_change_an_accepted_submission(h):
    h.queue.faults = None
    h.provider.faults.hang_npu(h.queue)
    cmd = h.command()
    point = h.queue.submit([cmd])
    h.instructions.device_view(cmd.offset, cmd.nbytes)[:] = 0  # clobber after acceptance
    h.provider.faults.release_npu(h.queue)
    h.queue.wait(point, 5 * 10**9)
    assert h.calls == 1


def test_pending_window_is_128_then_busy(h):
    h.provider.faults.hang_npu(h.queue)
    points = [h.queue.submit([h.command()]) for _ in range(128)]
    assert points == sorted(points)
    with pytest.raises(AmdfBusy):
        h.queue.submit([h.command()])
    with pytest.raises(AmdfTimeout):
        h.queue.wait(points[0], 10**7)
    h.provider.faults.release_npu(h.queue)
    h.queue.wait(points[-1], 10 * 10**9)
    assert h.calls == 128
    h.queue.submit([h.command()])


def test_notification_through_eventfd(h):
    fd = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        h.provider.faults.hang_npu(h.queue)
        point = h.queue.submit([h.command()])
        h.queue.request_notification(point, fd)
        assert select.select([fd], [], [], 0.05)[0] == []
        h.provider.faults.release_npu(h.queue)
        assert select.select([fd], [], [], 5)[0] == [fd]
        assert os.eventfd_read(fd) >= 1
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda h: h.command(b1=0xDEAD0000), "binding 1"),
        (lambda h: h.command(out=8192 - 128), "runs past the end"),
        (lambda h: h.command(out=4096 + 4), "aligned"),
        (lambda h: h.command(stream=h.stream[:-1] + b"\x12"), "matches no registered program"),
        (lambda h: h.command(stream=b"\1" + h.stream[1:]), "transaction version"),
        (lambda h: h.command(stream=h.stream[:12] + (len(h.stream) + 4).to_bytes(4, "little") + h.stream[16:]), "says"),
        (lambda h: h.command(stream=h.stream[:4] + b"\x03" + h.stream[5:]), "columns"),
        (lambda h: h.command(stream=h.stream[:16] + b"\x63" + h.stream[17:]), "unknown opcode"),
    ],
    ids=["unmapped", "past-end", "alignment", "unknown-program", "version", "size", "columns", "opcode"],
)
def test_submission_is_validated_before_acceptance(h, mutate, message):
    with pytest.raises(AmdfInvalidArgument, match=message):
        h.queue.submit([mutate(h)])
    assert h.calls == 0 and h.queue.status().state == QueueState.ACTIVE


def test_binding_memory_must_be_reachable_by_the_npu(provider, gpu, h):
    gpu_only = provider.system_scopes()[0].create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(gpu)])
    with pytest.raises(AmdfInvalidArgument, match="binding 0"):
        h.queue.submit([h.command(b0=gpu_only.address())])


def test_binding_access_is_checked(provider, npu, h):
    read_only = provider.system_scopes()[0].create(4096, profile=SYSTEM_COHERENT, accesses=[DeviceAccess(npu, MemoryAccess.READ, address_kinds=XDNA_DMA)])
    with pytest.raises(AmdfInvalidArgument, match="grants"):
        h.queue.submit([h.command(b1=read_only.address(0, AddressKind.XDNA_DMA))])


def test_used_bindings_only(provider, h):
    stream, patches = patched_program(2)
    provider.register_npu_program("mismatch", stream + b"", patches[:1], [NpuBinding(256, MemoryAccess.READ), NpuBinding(256, RW)], lambda v: None)
    # the registered "double" program wins for this stream; a program whose patches and
    # contract disagree is refused when it is the one that matches
    stream2, patches2 = patched_program(3)
    provider.register_npu_program("three", stream2, patches2[:2], [NpuBinding(256, MemoryAccess.READ)] * 3, lambda v: None)
    with pytest.raises(AmdfInvalidArgument, match="patches bindings"):
        h.queue.submit([h.command(stream=stream2)])


def test_command_memory_rules(provider, npu, h):
    other = npu.create_context(1)
    foreign = other.memory_scopes()[0].create(4096, profile=0, accesses=[DeviceAccess(npu, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=FIRMWARE)])
    with pytest.raises(AmdfInvalidArgument, match="private scope"):
        h.queue.submit([KernelCommand(foreign, 0, 64)])
    no_exec = h.context.memory_scopes()[0].create(4096, profile=0, accesses=[DeviceAccess(npu, MemoryAccess.READ, address_kinds=FIRMWARE)])
    with pytest.raises(AmdfInvalidArgument, match="EXECUTE"):
        h.queue.submit([KernelCommand(no_exec, 0, 64)])
    with pytest.raises(AmdfInvalidArgument, match="aligned"):
        h.queue.submit([KernelCommand(h.instructions, 4, 64)])
    with pytest.raises(AmdfOutOfRange):
        h.queue.submit([KernelCommand(h.instructions, 0, 1 << 20)])
    with pytest.raises(AmdfInvalidArgument):
        h.queue.submit([])
    with pytest.raises(AmdfUnsupported, match="XDNA_FIRMWARE"):
        h.context.memory_scopes()[0].create(4096, profile=0, accesses=[DeviceAccess(npu, address_kinds=XDNA_DMA)])


def test_program_failure_fails_the_queue(h):
    def boom(views):
        raise RuntimeError("tile exception")

    stream, patches = patched_program(1)
    h.provider.register_npu_program("boom", stream, patches, [NpuBinding(64, MemoryAccess.READ)], boom)
    h.patches = patches
    point = h.queue.submit([h.command(stream=stream)])
    with pytest.raises(AmdfDeviceError, match="tile exception") as info:
        h.queue.wait(point, 5 * 10**9)
    assert info.value.domain == StatusDomain.FIRMWARE
    status = h.queue.status()
    assert status.state == QueueState.FAILED and "tile exception" in status.detail
    with pytest.raises(AmdfDeviceError):
        h.queue.submit([h.command(stream=stream)])


def test_injected_firmware_error(h):
    h.provider.faults.npu_error(h.queue, after=1)
    first = h.queue.submit([h.command()])
    second = h.queue.submit([h.command()])
    h.queue.wait(first, 5 * 10**9)
    with pytest.raises(AmdfDeviceError, match="injected firmware error"):
        h.queue.wait(second, 5 * 10**9)


def test_teardown_order(h):
    with pytest.raises(AmdfBusy):
        h.context.destroy()
    h.queue.destroy()
    with pytest.raises(AmdfBusy, match="private memory"):
        h.context.destroy()
    h.instructions.destroy()
    h.context.destroy()


def test_time_sliced_contexts_take_turns(provider, npu):
    first = Harness(provider, npu, columns=8)
    second = Harness(provider, npu, columns=8)
    assert second.context.info.scheduling_mode == XdnaSchedulingMode.TIME_SLICED
    points = []
    for _ in range(5):
        points.append((first.queue, first.queue.submit([first.command()])))
        points.append((second.queue, second.queue.submit([second.command()])))
    for queue, point in points:
        queue.wait(point, 5 * 10**9)
    assert npu.context_switches >= 1


def test_concurrent_submitters(h):
    errors = []

    def run():
        try:
            for _ in range(20):
                point = h.queue.submit([h.command()])
                h.queue.wait(point, 10 * 10**9)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and h.calls == 60


def _header(count, size, *, rows=6, columns=1):
    # AIE transaction 0.1: major, minor, generation 4, rows, columns, memory-tile rows, 2 pad, count, size
    return struct.pack("<BBBBBBxxII", 0, 1, 4, rows, columns, 1, count, size)


def _op(code, col, row, size, payload):
    return struct.pack("<BBBBI", code, col, row, 0, size) + payload


@pytest.mark.parametrize(
    "stream, message",
    [
        (bytes(12), "12 bytes has no transaction header"),
        (_header(1, 32, rows=5) + _op(0, 0, 0, 16, bytes(8)), "describes 5 rows, the array has 6"),
        (_header(2, 32) + _op(0, 0, 0, 16, bytes(8)), "operation 1 header runs past the stream"),
        (_header(2, 36) + _op(0, 0, 0, 10, bytes(2)) + _op(0, 0, 0, 10, bytes(2)), "operation 0 at byte 16: size 10 is not a dword multiple"),
        (_header(1, 24) + _op(0, 0, 0, 4, bytes(0)), "operation 0 at byte 16: size 4 "),
        (_header(1, 24) + _op(0, 0, 0, 16, bytes(0)), "operation 0 at byte 16: size 16"),
        (_header(1, 32) + _op(0, 1, 0, 16, bytes(8)), "addresses tile (1, 0) outside 1x6"),
        (_header(1, 32) + _op(0, 0, 6, 16, bytes(8)), "addresses tile (0, 6) outside 1x6"),
        (_header(1, 48) + _op(0, 0, 0, 16, bytes(8)) + _op(5, 0, 0, 16, bytes(8)), "1 operations end at byte 32, the stream has 48"),
    ],
    ids=["no-header", "rows", "op-header-past-end", "op-size-unaligned", "op-size-below-header", "op-past-end", "op-column", "op-row", "trailing-bytes"],
)
def test_malformed_transactions_are_refused(h, stream, message):
    # the malformed stream is a registered program's template: only the structure check refuses it
    h.provider.register_npu_program("malformed", stream, [], [], lambda views: None)
    h.instructions.device_view(0, len(stream))[:] = np.frombuffer(stream, np.uint8)
    with pytest.raises(AmdfInvalidArgument, match=re.escape(message)):
        h.queue.submit([KernelCommand(h.instructions, 0, len(stream))])
    assert h.queue.status().state == QueueState.ACTIVE and h.queue._next_point == 1


def test_command_length_and_memory_are_checked(h):
    stream = h.stream
    h.instructions.device_view(0, len(stream))[:] = np.frombuffer(stream, np.uint8)
    with pytest.raises(AmdfInvalidArgument, match="instruction length 66"):
        h.queue.submit([KernelCommand(h.instructions, 0, 66)])
    with pytest.raises(AmdfOutOfRange, match="access ordinal 1"):
        h.queue.submit([KernelCommand(h.instructions, 0, len(stream), access_ordinal=1)])
    freed = h.context.memory_scopes()[0].create(4096, profile=0, accesses=[DeviceAccess(h.npu, MemoryAccess.READ | MemoryAccess.EXECUTE, address_kinds=FIRMWARE)])
    freed.device_view(0, len(stream))[:] = np.frombuffer(h.command().memory.device_view(0, len(stream)).tobytes(), np.uint8)
    freed.destroy()
    with pytest.raises(AmdfInvalidArgument, match="not live memory"):
        h.queue.submit([KernelCommand(freed, 0, len(stream))])
    assert h.queue._next_point == 1 and h.calls == 0


def test_program_columns_must_fit_the_context(provider, npu):
    h = Harness(provider, npu, columns=2)
    stream, patches = patched_program(2)
    stream = stream[:-1] + b"\x13"  # a program of its own (the last payload byte differs)
    provider.register_npu_program("wide", stream, patches, [NpuBinding(256, MemoryAccess.READ), NpuBinding(256, RW)], lambda views: None, columns=4)
    with pytest.raises(AmdfInvalidArgument, match="'wide' needs 4 columns, the context has 2"):
        h.queue.submit([h.command(stream=stream)])
    assert h.queue._next_point == 1


def test_kernel_queue_lifetime(h):
    fd = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        with pytest.raises(AmdfInvalidArgument, match="point zero"):
            h.queue.request_notification(0, fd)
        with pytest.raises(AmdfOutOfRange, match="submission 1 not accepted"):
            h.queue.request_notification(1, fd)
        assert select.select([fd], [], [], 0)[0] == []
    finally:
        os.close(fd)
    for point in (0, 1):
        with pytest.raises(AmdfOutOfRange, match=f"submission {point} was not accepted"):
            h.queue.wait(point, 10**7)
    h.provider.faults.hang_npu(h.queue)
    point = h.queue.submit([h.command()])
    with pytest.raises(AmdfBusy, match="1 submission"):
        h.queue.destroy()
    h.provider.faults.release_npu(h.queue)
    h.queue.wait(point, 5 * 10**9)
    h.queue.destroy()
    assert not h.context._queues
    with pytest.raises(AmdfInvalidArgument, match="queue already destroyed"):
        h.queue.destroy()
    for call in (lambda: h.queue.submit([h.command()]), h.queue.refresh, lambda: h.queue.wait(point, 10**7)):
        with pytest.raises(AmdfInvalidArgument, match="queue destroyed"):
            call()


def test_context_lifetime(npu):
    context = npu.create_context(1)
    with pytest.raises(AmdfOutOfRange, match="queue family 1 of 1"):
        context.create_kernel_queue(1)
    with pytest.raises(AmdfInvalidArgument, match="max_pending -1"):
        context.create_kernel_queue(0, max_pending=-1)
    with pytest.raises(AmdfOutOfRange, match="max_pending 129 over the device's 128"):
        context.create_kernel_queue(0, max_pending=129)
    assert not context._queues
    queue = context.create_kernel_queue(0, max_pending=4)
    assert queue.info.maximum_pending == 4
    with pytest.raises(AmdfBusy, match="1 queue"):  # no private memory: only the queue keeps it
        context.destroy()
    queue.destroy()
    context.destroy()
    with pytest.raises(AmdfInvalidArgument, match="context already destroyed"):
        context.destroy()
    with pytest.raises(AmdfInvalidArgument, match="context destroyed"):
        context.create_kernel_queue(0)


def test_a_destroyed_queue_answers_no_status(h):
    h.queue.destroy()
    with pytest.raises(AmdfInvalidArgument, match="destroyed"):
        h.queue.status()
    with pytest.raises(AmdfInvalidArgument, match="destroyed"):
        h.queue.refresh()
