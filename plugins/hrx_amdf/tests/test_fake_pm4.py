"""The simulated compute queue: every PM4 packet it interprets, and what it refuses."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fakekit import (
    Producer,
    acquire_mem,
    cs_partial_flush,
    dma_copy,
    dma_fill,
    hi,
    indirect_buffer,
    lo,
    memory,
    nop,
    pm4,
    release_mem,
    set_sh_reg,
    wait_failed,
    wait_mem32,
    wait_mem64,
    write_data,
)
from hrx_amdf.constants import QueueState, StatusDomain
from hrx_amdf.errors import AmdfBusy, AmdfDeviceError, AmdfTimeout


@pytest.fixture
def pm4q(gpu):
    queue = gpu.create_user_queue(0)
    return Producer(queue)


def u64(mem, offset=0):
    return int(mem.device_view(offset, 8).view(np.uint64)[0])


def test_release_mem_32_and_64_bit_and_clock(provider, gpu, pm4q):
    m = memory(provider, gpu)
    base = m.address()
    pm4q.pm4(release_mem(base, 0x1122334455667788) + release_mem(base + 8, 0xAABBCCDD, bits64=False))
    assert u64(m) == 0x1122334455667788
    assert int(m.device_view(8, 4).view(np.uint32)[0]) == 0xAABBCCDD
    clock = pm4(0x49, [0x28 | (5 << 8), (3 << 29) | (1 << 16), lo(base + 16), hi(base + 16), 0, 0, 0])
    pm4q.pm4(clock)
    assert u64(m, 16) > 0
    assert pm4q.queue.log.count("RELEASE_MEM") == 3


def test_nop_padding_and_ring_wrap(provider, gpu, pm4q):
    m = memory(provider, gpu)
    # 1024-dword ring: 300 publications of 8 dwords wrap it more than twice
    for i in range(300):
        pm4q.pm4(release_mem(m.address(), i))
    assert u64(m) == 299
    status = pm4q.queue.status()
    assert status.consumed_index == pm4q.write and status.state == QueueState.ACTIVE
    # the native read index wraps at the capacity
    assert int(pm4q.mapping.read_index[0]) == pm4q.write % 1024


def test_wait_reg_mem_blocks_until_host_write(provider, gpu, pm4q):
    m = memory(provider, gpu)
    flag, out = m.address(), m.address() + 64
    pm4q.pm4(wait_mem32(flag, 7) + release_mem(out, 1), wait=False)
    time.sleep(0.05)
    assert u64(m, 64) == 0, "the release ran before the wait was satisfied"
    m.device_view(0, 4).view(np.uint32)[0] = 7
    pm4q.queue.wait_consumed(pm4q.write, 5 * 10**9)
    assert u64(m, 64) == 1


def test_wait_reg_mem64_compares_all_64_bits(provider, gpu, pm4q):
    m = memory(provider, gpu)
    m.device_view(0, 8).view(np.uint64)[0] = 0xFFFFFFFF  # low word already "large"
    pm4q.pm4(wait_mem64(m.address(), 1 << 32) + release_mem(m.address() + 64, 5), wait=False)
    time.sleep(0.05)
    assert u64(m, 64) == 0
    m.device_view(0, 8).view(np.uint64)[0] = 1 << 32
    pm4q.queue.wait_consumed(pm4q.write, 5 * 10**9)
    assert u64(m, 64) == 5


def test_wait_is_woken_by_another_queue(provider, gpu, pm4q):
    other = Producer(gpu.create_user_queue(0))
    m = memory(provider, gpu)
    pm4q.pm4(wait_mem64(m.address(), 3) + release_mem(m.address() + 8, 9), wait=False)
    other.pm4(release_mem(m.address(), 3))
    pm4q.queue.wait_consumed(pm4q.write, 5 * 10**9)
    assert u64(m, 8) == 9


def test_indirect_buffer_runs_its_stream(provider, gpu, pm4q):
    m = memory(provider, gpu)
    ib = memory(provider, gpu)
    stream = release_mem(m.address(), 41) + cs_partial_flush() + acquire_mem() + release_mem(m.address() + 8, 42)
    ib.device_view(0, 4 * len(stream)).view(np.uint32)[:] = stream
    pm4q.pm4(indirect_buffer(ib.address(), len(stream)))
    assert (u64(m), u64(m, 8)) == (41, 42)
    assert "ACQUIRE_MEM" in pm4q.queue.log and pm4q.queue.cache_operations == [("acquire", 0xC3A1)]


def test_dma_data_copy_fill_and_drain(provider, gpu, pm4q):
    a, b = memory(provider, gpu, 8192), memory(provider, gpu, 8192)
    a.device_view(0, 8192)[:] = np.arange(8192) % 251
    pm4q.pm4(dma_copy(a.address() + 100, b.address() + 3, 5000) + dma_fill(b.address() + 6000, 0xDEADBEEF, 64) + pm4(0x50, [0] * 6))
    assert np.array_equal(b.device_view(3, 5000), a.device_view(100, 5000))
    assert (b.device_view(6000, 64).view(np.uint32) == 0xDEADBEEF).all()


def test_write_data(provider, gpu, pm4q):
    m = memory(provider, gpu)
    pm4q.pm4(write_data(m.address() + 12, [1, 2, 3]))
    assert list(m.device_view(12, 12).view(np.uint32)) == [1, 2, 3]


def test_set_sh_reg_keeps_compute_registers(gpu, pm4q):
    pm4q.pm4(set_sh_reg(0x2E07, [64, 1, 1]))
    assert pm4q.queue.pm4.registers[0x2E07] == 64


@pytest.mark.parametrize(
    "words, message",
    [
        (pm4(0x99, [0] * 6), "unknown opcode"),
        (pm4(0x49, [0x28 | (5 << 8), (2 << 29), 0, 0, 0, 0]), "RELEASE_MEM: 7 dwords"),
        (pm4(0x49, [0x28 | (5 << 8) | (1 << 7), (2 << 29), 0, 0, 0, 0, 0]), "reserved bits"),
        ([0x80000000] + [0] * 7, "type 2"),
        (pm4(0x76, [0x100, 5], compute=True), "not a compute register"),
        (pm4(0x76, [0x207, 5]), "SHADER_TYPE"),
        (pm4(0x46, [0x14 | (5 << 8)]), "EVENT_WRITE"),
        (pm4(0x50, [(3 << 29) | (3 << 20) | 1, 0, 0, 0, 0, 4]), "ENGINE"),
        (pm4(0x3C, [3, 0, 0, 0, 0, 4]), "MEM_SPACE"),
        (pm4(0x58, [1, 0, 0, 0, 0, 0, 0]), "COHER_CNTL"),
        ((3 << 30) | (6 << 16) | (0x49 << 8) | 1, "predication"),
    ],
    ids=["opcode", "length", "reserved", "type2", "register", "shader-type", "event", "dma-engine", "mem-space", "acquire", "predicate"],
)
def test_malformed_packets_fail_the_queue(gpu, pm4q, words, message):
    words = [words] + [0] * 7 if isinstance(words, int) else words
    pm4q.pm4(words, wait=False)
    status = wait_failed(pm4q.queue)
    assert status.state == QueueState.FAILED and message in status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE
    assert status.consumed_index == 0, "the failing packet must not count as consumed"


@pytest.mark.parametrize("offset", [4096 + (1 << 20), -8], ids=["past-end", "before-start"])
def test_unmapped_address_is_a_memory_fault(provider, gpu, pm4q, offset):
    m = memory(provider, gpu)
    pm4q.pm4(release_mem(m.address() + offset, 1), wait=False)
    status = wait_failed(pm4q.queue)
    assert status.terminal >> 32 == StatusDomain.ERRNO and "memory fault" in status.detail


def test_misaligned_64_bit_release_faults(provider, gpu, pm4q):
    m = memory(provider, gpu)
    pm4q.pm4(release_mem(m.address() + 4, 1), wait=False)
    assert "8-byte aligned" in wait_failed(pm4q.queue).detail


def test_access_to_freed_memory_faults(provider, gpu, pm4q):
    m = memory(provider, gpu)
    address = m.address()
    m.destroy()
    pm4q.pm4(release_mem(address, 1), wait=False)
    assert "no GPU mapping" in wait_failed(pm4q.queue).detail


def test_another_devices_memory_faults(provider, gpu, pm4q):
    other = provider.endpoint(gpu.endpoint.info.engine_kind).create_gpu_device()
    m = memory(provider, other)
    pm4q.pm4(release_mem(m.address(), 1), wait=False)
    assert "another device" in wait_failed(pm4q.queue).detail


def test_read_only_access_refuses_writes(provider, gpu, pm4q):
    from hrx_amdf.constants import MemoryAccess
    from hrx_amdf.provider import DeviceAccess

    scope = provider.system_scopes()[0]
    m = scope.create(4096, profile=1, accesses=[DeviceAccess(gpu, MemoryAccess.READ)])
    pm4q.pm4(release_mem(m.address(), 1), wait=False)
    assert "grants" in wait_failed(pm4q.queue).detail


def test_dma_copy_overlap_is_refused(provider, gpu, pm4q):
    m = memory(provider, gpu)
    pm4q.pm4(dma_copy(m.address(), m.address() + 8, 64), wait=False)
    assert "overlaps" in wait_failed(pm4q.queue).detail


def test_nested_indirect_buffer_is_refused(provider, gpu, pm4q):
    ib = memory(provider, gpu)
    inner = indirect_buffer(ib.address(), 4)
    ib.device_view(0, 16).view(np.uint32)[:] = inner
    pm4q.pm4(indirect_buffer(ib.address(), 4), wait=False)
    assert "inside an indirect buffer" in wait_failed(pm4q.queue).detail


def test_publication_rules(gpu):
    q = gpu.create_user_queue(0)
    p = Producer(q)
    ring = p.mapping.ring.view(np.uint32)
    ring[:8] = nop(8)
    # doorbell before the write index was stored
    p.mapping.doorbell.write(8)
    assert "write index" in wait_failed(q).detail

    q2 = gpu.create_user_queue(0)
    p2 = Producer(q2)
    p2.mapping.ring.view(np.uint32)[:6] = nop(6)
    p2.mapping.write_index[0] = 6
    p2.mapping.doorbell.write(6)
    assert "eight-dword boundary" in wait_failed(q2).detail


def test_packet_straddling_the_ring_end_faults(gpu):
    q = gpu.create_user_queue(0)
    p = Producer(q)
    ring = p.mapping.ring.view(np.uint32)
    # fill up to 1016 dwords with NOPs, then an 8-dword RELEASE_MEM at 1020 would straddle
    p.pm4(nop(1016))
    ring[1016:1020] = nop(4)
    p.write = 1020
    words = release_mem(0x1000, 1)
    ring[1020:1024] = words[:4]
    ring[0:4] = words[4:]
    p.mapping.write_index[0] = 1024 + 4
    p.mapping.doorbell.write(1024 + 8)  # not even equal: first the index rule
    status = wait_failed(q)
    assert "write index" in status.detail
    q2 = gpu.create_user_queue(0)
    p2 = Producer(q2)
    p2.pm4(nop(1016))
    r2 = p2.mapping.ring.view(np.uint32)
    r2[1016:1024] = release_mem(0x1000, 1)[:8]
    r2[1016] = (3 << 30) | (14 << 16) | (0x10 << 8)  # a 16-dword NOP from 1016 runs past 1024
    p2.mapping.write_index[0] = 1024 + 8
    p2.mapping.doorbell.write(1024 + 8)
    assert "straddles" in wait_failed(q2).detail


def test_overrunning_the_ring_is_refused(gpu):
    q = gpu.create_user_queue(0)
    p = Producer(q)
    p.mapping.write_index[0] = 1024
    p.mapping.doorbell.write(1024)
    assert "must stay free" in wait_failed(q).detail


def test_failed_queue_ignores_its_doorbell_and_reports_sticky_status(provider, gpu, pm4q):
    pm4q.pm4(pm4(0x99, [0] * 6), wait=False)
    first = wait_failed(pm4q.queue)
    m = memory(provider, gpu)
    pm4q.pm4(release_mem(m.address(), 1), wait=False)
    time.sleep(0.05)
    assert u64(m) == 0 and pm4q.queue.status().detail == first.detail
    with pytest.raises(AmdfDeviceError, match="unknown opcode"):
        pm4q.queue.wait_consumed(pm4q.write, 10**9)


def test_wait_consumed_times_out_without_cancelling(provider, gpu, pm4q):
    m = memory(provider, gpu)
    pm4q.pm4(wait_mem32(m.address(), 1) + release_mem(m.address() + 8, 2), wait=False)
    with pytest.raises(AmdfTimeout):
        pm4q.queue.wait_consumed(pm4q.write, 20 * 10**6)
    m.device_view(0, 4).view(np.uint32)[0] = 1
    pm4q.queue.wait_consumed(pm4q.write, 5 * 10**9)
    assert u64(m, 8) == 2


def test_destroy_rules(provider, gpu):
    q = gpu.create_user_queue(0)
    p = Producer(q)
    m = memory(provider, gpu)
    p.pm4(wait_mem32(m.address(), 1), wait=False)
    p.mapping.destroy()
    with pytest.raises(AmdfBusy, match="not consumed"):
        q.destroy()
    with pytest.raises(AmdfBusy):
        gpu.destroy()
    m.device_view(0, 4).view(np.uint32)[0] = 1
    q.wait_consumed(p.write, 5 * 10**9)
    q.destroy()
    gpu.destroy()


def test_concurrent_queues_make_progress(provider, gpu):
    m = memory(provider, gpu, 4096)
    producers = [Producer(gpu.create_user_queue(0)) for _ in range(4)]

    def run(i, p):
        for v in range(50):
            p.pm4(release_mem(m.address() + 8 * i, v + 1))

    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [u64(m, 8 * i) for i in range(4)] == [50] * 4


IB_OFFSET = 4096  # where refused_packet's memory holds two 4-dword NOPs (a valid indirect buffer)


def _ib(address, size, flags=1 << 23, high=None):
    return pm4(0x3F, [lo(address), hi(address) if high is None else high, size | flags])


@pytest.mark.parametrize(
    "make, message",
    [
        # header bits 2-7 are reserved (a NOP that would otherwise run)
        (lambda a: [(3 << 30) | (6 << 16) | (0x10 << 8) | (1 << 2)] + [0] * 7, "reserved bits 2-7"),
        (lambda a: [(3 << 30) | (6 << 16) | (0x10 << 8) | (1 << 7)] + [0] * 7, "reserved bits 2-7"),
        (lambda a: pm4(0x76, [0x207], compute=True), "SET_SH_REG: no register values"),
        (lambda a: pm4(0x37, [(0 << 8) | (1 << 20), lo(a), hi(a), 1]), "WRITE_DATA: DST_SEL 0"),
        (lambda a: pm4(0x37, [(5 << 8) | (1 << 16) | (1 << 20), lo(a), hi(a), 1]), "ADDR_INCR=1"),
        (lambda a: pm4(0x37, [(5 << 8) | (1 << 20), lo(a), hi(a)]), "WRITE_DATA: no data"),
        (lambda a: wait_mem32(a, 0, function=0), "WAIT_REG_MEM: compare function 0"),
        (lambda a: wait_mem32(a, 0, function=7), "WAIT_REG_MEM: compare function 7"),
        (lambda a: wait_mem64(a, 0, function=0), "WAIT_REG_MEM64: compare function 0"),
        (lambda a: pm4(0x93, [3, lo(a), hi(a), 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 4]), "WAIT_REG_MEM64: MEM_SPACE=0"),
        (lambda a: pm4(0x93, [3 | (1 << 4) | (1 << 6), lo(a), hi(a), 0, 0, 0xFFFFFFFF, 0xFFFFFFFF, 4]), "OPERATION=1"),
        (lambda a: _ib(a + IB_OFFSET, 4, flags=0), "VALID is clear"),
        (lambda a: _ib(a + IB_OFFSET, 4, flags=(1 << 23) | (1 << 20)), "CHAIN is not supported"),
        (lambda a: _ib(a + IB_OFFSET, 4, flags=(1 << 23) | (1 << 21)), "OFFLOAD_POLLING is not supported"),
        (lambda a: _ib(a + IB_OFFSET, 4, flags=(1 << 23) | (1 << 24)), "VMID is not supported"),
        (lambda a: _ib(a + IB_OFFSET, 4, flags=(1 << 23) | (1 << 31)), "PRIV is not supported"),
        (lambda a: _ib(a + IB_OFFSET + 2, 4), "not dword aligned"),
        (lambda a: _ib(a + IB_OFFSET, 4, high=hi(a) | (1 << 16)), "beyond 48 bits"),
        (lambda a: _ib(a + IB_OFFSET, 0), "IB_SIZE is zero"),
        (lambda a: pm4(0x49, [0x14 | (4 << 8), (2 << 29) | (1 << 16), lo(a), hi(a), 1, 0, 0]), "not an end-of-pipe event"),
        (lambda a: pm4(0x49, [0x07 | (4 << 8), (2 << 29) | (1 << 16), lo(a), hi(a), 1, 0, 0]), "not an end-of-pipe event"),
        (lambda a: pm4(0x49, [0x28 | (5 << 8), (2 << 29) | (2 << 16), lo(a), hi(a), 1, 0, 0]), "RELEASE_MEM: DST_SEL 2"),
        (lambda a: pm4(0x49, [0x28 | (5 << 8), (2 << 29) | (4 << 24), lo(a), hi(a), 1, 0, 0]), "RELEASE_MEM: INT_SEL 4"),
        (lambda a: pm4(0x49, [0x28 | (5 << 8), (0 << 29), lo(a), hi(a), 0, 0, 0]), "DATA_SEL=0"),
        (lambda a: pm4(0x49, [0x28 | (5 << 8), (5 << 29), lo(a), hi(a), 1, 0, 0]), "RELEASE_MEM: DATA_SEL 5"),
        (lambda a: pm4(0x50, [0, 0, 0, lo(a), hi(a), 0]), "drain form"),
        (lambda a: pm4(0x50, [(3 << 29) | (1 << 20), lo(a), hi(a), lo(a + 256), hi(a + 256), 64 | (1 << 30)]), "DMA_DATA: DST_SEL 1"),
        (lambda a: pm4(0x50, [(3 << 29) | (2 << 20), lo(a), hi(a), lo(a + 256), hi(a + 256), 64 | (1 << 30)]), "DMA_DATA: DST_SEL 2"),
        (lambda a: pm4(0x50, [(2 << 29) | (3 << 20), 7, 1, lo(a), hi(a), 64 | (1 << 30)]), "dword 3 must be zero"),
        (lambda a: pm4(0x50, [(2 << 29) | (3 << 20), 7, 0, lo(a), hi(a), 62 | (1 << 30)]), "dword granular"),
        (lambda a: pm4(0x50, [(2 << 29) | (3 << 20), 7, 0, lo(a + 2), hi(a), 64 | (1 << 30)]), "dword granular"),
        (lambda a: pm4(0x50, [(1 << 29) | (3 << 20), lo(a), hi(a), lo(a + 256), hi(a + 256), 64 | (1 << 30)]), "DMA_DATA: SRC_SEL 1"),
        # DISPATCH_DIRECT checks that come before any kernel is looked up
        (lambda a: pm4(0x15, [1, 1, 1, 0x8025], compute=True), "COMPUTE_NUM_THREAD_X was never set"),
        (lambda a: pm4(0x15, [0, 1, 1, 0x8025], compute=True), "empty dimensions (0, 1, 1)"),
        (lambda a: pm4(0x15, [4, 4, 0, 0x8025], compute=True), "empty dimensions (4, 4, 0)"),
        (lambda a: set_sh_reg(0x2E07, [2048, 1, 1]) + pm4(0x15, [1, 1, 1, 0x8025], compute=True), r"(2048, 1, 1) outside 1..1024"),
        (lambda a: set_sh_reg(0x2E07, [64, 0, 1]) + pm4(0x15, [1, 1, 1, 0x8025], compute=True), r"(64, 0, 1) outside 1..1024"),
        (lambda a: set_sh_reg(0x2E04, [0, 3, 0, 64, 1, 1]) + pm4(0x15, [1, 1, 1, 0x8025], compute=True), "COMPUTE_START_Y is not zero"),
    ],
    ids=[
        "header-bit2", "header-bit7", "set-sh-reg-empty", "write-data-dst-sel", "write-data-addr-incr", "write-data-empty",
        "wait-function-0", "wait-function-7", "wait64-function-0", "wait64-mem-space", "wait64-operation",
        "ib-valid", "ib-chain", "ib-offload-polling", "ib-vmid", "ib-priv", "ib-alignment", "ib-48-bit", "ib-size-zero",
        "release-event-index", "release-event", "release-dst-sel", "release-int-sel", "release-no-data", "release-data-sel",
        "dma-drain", "dma-dst-sel-1", "dma-dst-sel-2", "dma-fill-high-dword", "dma-fill-length", "dma-fill-alignment", "dma-src-sel",
        "dispatch-unset-block", "dispatch-empty-x", "dispatch-empty-z", "dispatch-block-too-large", "dispatch-block-zero", "dispatch-start",
    ],
)
def test_refused_packets(provider, gpu, pm4q, make, message):
    """Each packet is one the interpreter must refuse as a packet fault (firmware status),
    before it writes anything; without its check most would run (or fault differently)."""
    m = memory(provider, gpu, 8192)
    m.device_view(IB_OFFSET, 32).view(np.uint32)[:] = nop(4) + nop(4)
    pm4q.pm4(make(m.address()), wait=False)
    status = wait_failed(pm4q.queue)
    assert message in status.detail, status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE and status.terminal & 0xFFFFFFFF == 1
    assert not m.device_view(0, IB_OFFSET).any(), "the refused packet wrote memory"
    assert pm4q.queue.interrupts == []


def test_indirect_buffer_packets_stay_inside_it(provider, gpu, pm4q):
    m = memory(provider, gpu)
    ib = memory(provider, gpu)
    # an 8-dword NOP header in a 4-dword indirect buffer; the bytes after it are NOPs
    ib.device_view(0, 48).view(np.uint32)[:] = nop(8) + nop(4)
    pm4q.pm4(indirect_buffer(ib.address(), 4) + release_mem(m.address(), 1), wait=False)
    assert "runs past its 4 dwords" in wait_failed(pm4q.queue).detail
    assert u64(m) == 0


def test_a_packet_may_not_run_past_the_published_write_index(gpu):
    q = gpu.create_user_queue(0)
    p = Producer(q)
    ring = p.mapping.ring.view(np.uint32)
    ring[:16] = nop(16)  # one 16-dword NOP, of which only 8 dwords are published
    p.mapping.write_index[0] = 8
    p.mapping.doorbell.write(8)
    status = wait_failed(q)
    assert "runs past the published write index 8" in status.detail and status.consumed_index == 0


def test_queue_and_mapping_lifetime(gpu):
    from hrx_amdf.errors import AmdfInvalidArgument

    q = gpu.create_user_queue(0)
    mapping = q.map()
    with pytest.raises(AmdfBusy, match="1 mapping"):
        q.destroy()
    mapping.destroy()
    with pytest.raises(AmdfInvalidArgument, match="mapping already destroyed"):
        mapping.destroy()
    q.destroy()
    assert not gpu._queues
    for call in (q.map, q.status, lambda: q.wait_consumed(0, 10**6)):
        with pytest.raises(AmdfInvalidArgument, match="queue destroyed"):
            call()
    with pytest.raises(AmdfInvalidArgument, match="queue already destroyed"):
        q.destroy()


def test_write_index_may_not_go_backwards(provider, gpu, pm4q):
    m = memory(provider, gpu)
    pm4q.pm4(release_mem(m.address(), 1))
    assert pm4q.write == 8
    pm4q.mapping.write_index[0] = 0  # index and doorbell agree, but behind what was published
    pm4q.mapping.doorbell.write(0)
    status = wait_failed(pm4q.queue)
    assert "doorbell 0: went backwards from 8" in status.detail and status.terminal >> 32 == StatusDomain.FIRMWARE
