"""The simulated SDMA queue: every packet it interprets, and what it refuses."""

from __future__ import annotations

import time

import numpy as np
import pytest

from fakekit import (
    Producer,
    memory,
    sdma_copy,
    sdma_fence,
    sdma_fill,
    sdma_gcr,
    sdma_poll,
    sdma_timestamp,
    sdma_trap,
    sdma_write,
    wait_failed,
)
from hrx_amdf.constants import QueueState, StatusDomain


@pytest.fixture
def sdma(gpu):
    return Producer(gpu.create_user_queue(1))


def test_copy_linear_any_alignment(provider, gpu, sdma):
    a, b = memory(provider, gpu, 1 << 16), memory(provider, gpu, 1 << 16)
    a.device_view(0, 1 << 16)[:] = np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8)
    sdma.sdma(sdma_copy(a.address() + 3, b.address() + 11, 40_001))
    assert np.array_equal(b.device_view(11, 40_001), a.device_view(3, 40_001))


def test_const_fill_fence_write_timestamp_trap_gcr_nop(provider, gpu, sdma):
    m = memory(provider, gpu, 8192)
    sdma.sdma(
        sdma_fill(m.address(), 0x01020304, 4096)
        + [0, 0]  # NOPs
        + sdma_fence(m.address() + 4096, 77)
        + sdma_write(m.address() + 4100, [5, 6, 7])
        + sdma_timestamp(m.address() + 4120)
        + sdma_trap(9)
        + sdma_gcr(0x8040)
    )
    assert (m.device_view(0, 4096).view(np.uint32) == 0x01020304).all()
    assert list(m.device_view(4096, 16).view(np.uint32)) == [77, 5, 6, 7]
    assert int(m.device_view(4120, 8).view(np.uint64)[0]) > 0
    assert sdma.queue.interrupts == [9]
    assert sdma.queue.cache_operations == [("gcr", 0x8040)]
    assert sdma.queue.log.count("NOP") == 2


def test_poll_regmem_waits(provider, gpu, sdma):
    m = memory(provider, gpu)
    sdma.sdma(sdma_poll(m.address(), 3) + sdma_fence(m.address() + 8, 1), wait=False)
    time.sleep(0.05)
    assert int(m.device_view(8, 4).view(np.uint32)[0]) == 0
    m.device_view(0, 4).view(np.uint32)[0] = 3
    sdma.queue.wait_consumed(sdma.write, 5 * 10**9)
    assert int(m.device_view(8, 4).view(np.uint32)[0]) == 1


def test_ring_wrap(provider, gpu, sdma):
    m = memory(provider, gpu)
    for i in range(500):  # 16-byte fences: the 4 KiB ring wraps about twice
        sdma.sdma(sdma_fence(m.address(), i))
    assert int(m.device_view(0, 4).view(np.uint32)[0]) == 499
    assert int(sdma.mapping.read_index[0]) == sdma.write  # SDMA indices are monotonic bytes


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda a: [0x99], "unknown op"),
        (lambda a: sdma_copy(a, a + 8, 64), "overlaps"),
        (lambda a: [1 | (1 << 25)] + sdma_copy(a, a + 4096, 8)[1:], "reserved bits|BACKWARDS"),
        (lambda a: sdma_fill(a + 2, 0, 64), "aligned"),
        (lambda a: [11 | (1 << 30)] + sdma_fill(a, 0, 64)[1:], "FILLSIZE"),
        (lambda a: [5 | (1 << 20)] + sdma_fence(a, 1)[1:], "SYS"),
        (lambda a: sdma_fence(a + 2, 1), "4-byte aligned"),
        (lambda a: [8 | (3 << 28)] + sdma_poll(a, 1)[1:], "MEM_POLL"),
        (lambda a: sdma_copy(a, a + (1 << 22), 64), "memory fault|no GPU mapping"),
        (lambda a: sdma_copy(a + 8000, a, 1000), "runs past the end"),
    ],
    ids=["op", "overlap", "backwards", "fill-align", "fill-size", "fence-sys", "fence-align", "poll-register", "unmapped", "past-end"],
)
def test_malformed_or_faulting_packets(provider, gpu, sdma, make, message):
    import re

    m = memory(provider, gpu, 8192)
    sdma.sdma(make(m.address()), wait=False)
    status = wait_failed(sdma.queue)
    assert status.state == QueueState.FAILED and re.search(message, status.detail), status.detail


def test_a_packet_may_not_straddle_the_ring_end(provider, gpu, sdma):
    m = memory(provider, gpu)
    ring = sdma.mapping.ring.view(np.uint32)
    sdma.sdma([0] * 1020)  # NOP dwords up to 4 dwords before the end
    words = sdma_copy(m.address(), m.address() + 64, 8)
    ring[1020:] = words[:4]
    ring[:3] = words[4:]
    sdma.mapping.write_index[0] = 4 * 1027
    sdma.mapping.doorbell.write(4 * 1027)
    assert "ring wraps" in wait_failed(sdma.queue).detail


def test_write_index_rules(gpu):
    q = gpu.create_user_queue(1)
    p = Producer(q)
    p.mapping.write_index[0] = 4096 + 4
    p.mapping.doorbell.write(4096 + 4)
    assert "outstanding" in wait_failed(q).detail
    q2 = gpu.create_user_queue(1)
    p2 = Producer(q2)
    p2.mapping.write_index[0] = 6
    p2.mapping.doorbell.write(6)
    status = wait_failed(q2)
    assert "doorbell 6: SDMA publications are dword granular" in status.detail and status.terminal >> 32 == StatusDomain.FIRMWARE


@pytest.mark.parametrize(
    "make, message",
    [
        # bit 17 of COPY_LINEAR's header and bit 20 of its parameter dword are reserved
        (lambda a: [1 | (1 << 17)] + sdma_copy(a, a + 4096, 8)[1:], "reserved bits 0x00020000 set in dword 0"),
        (lambda a: sdma_copy(a, a + 4096, 8)[:2] + [1 << 22] + sdma_copy(a, a + 4096, 8)[3:], "reserved bits 0x00400000 set in dword 2"),
        (lambda a: [1 | (1 << 30)] + sdma_copy(a, a + 4096, 8)[1:], "reserved bits 0x40000000 set in dword 0"),
        (lambda a: [(1 << 30)], "SDMA NOP: reserved bits 0x40000000"),
        (lambda a: sdma_write(a, [1])[:3] + [(1 << 24)] + [1], "SDMA WRITE: SW is not supported"),
        (lambda a: sdma_write(a, [1])[:3] + [(1 << 26)] + [1], "SDMA WRITE: CACHE_POLICY is not supported"),
        (lambda a: [2 | (1 << 16)] + sdma_write(a, [1])[1:], "SDMA WRITE: ENCRYPT is not supported"),
        (lambda a: [2 | (1 << 28)] + sdma_write(a, [1])[1:], "SDMA WRITE: CPV is not supported"),
        (lambda a: [sdma_poll(a, 0)[0] | (1 << 26)] + sdma_poll(a, 0)[1:], "HDP_FLUSH/CACHE_POLICY/CPV must be zero"),
        (lambda a: [sdma_poll(a, 0)[0] | (1 << 20)] + sdma_poll(a, 0)[1:], "HDP_FLUSH/CACHE_POLICY/CPV must be zero"),
        (lambda a: [sdma_poll(a, 0)[0] | (1 << 24)] + sdma_poll(a, 0)[1:], "HDP_FLUSH/CACHE_POLICY/CPV must be zero"),
        (lambda a: sdma_poll(a, 0, function=0), "POLL_REGMEM: compare function 0"),
        (lambda a: sdma_poll(a, 0, function=7), "POLL_REGMEM: compare function 7"),
        (lambda a: [sdma_fill(a, 0, 64)[0] | (1 << 16)] + sdma_fill(a, 0, 64)[1:], "SW/CACHE_POLICY/CPV must be zero"),
        (lambda a: [sdma_fill(a, 0, 64)[0] | (1 << 24)] + sdma_fill(a, 0, 64)[1:], "SW/CACHE_POLICY/CPV must be zero"),
        (lambda a: [sdma_fill(a, 0, 64)[0] | (1 << 28)] + sdma_fill(a, 0, 64)[1:], "SW/CACHE_POLICY/CPV must be zero"),
        (lambda a: sdma_fill(a, 0, 62), "dword fills need a 4-byte aligned destination and length"),
        (lambda a: sdma_fill(a + 2, 0, 64), "dword fills need a 4-byte aligned destination and length"),
        (lambda a: [sdma_timestamp(a)[0] | (1 << 24)] + sdma_timestamp(a)[1:], "TIMESTAMP: cache policy bits"),
        (lambda a: [sdma_timestamp(a)[0] | (1 << 26)] + sdma_timestamp(a)[1:], "TIMESTAMP: cache policy bits"),
        (lambda a: [sdma_timestamp(a)[0] | (1 << 28)] + sdma_timestamp(a)[1:], "TIMESTAMP: cache policy bits"),
        (lambda a: sdma_gcr(0x8040)[:4] + [1 << 24], "GCR: VMID must be zero"),
    ],
    ids=[
        "copy-header-bit17", "copy-parameter-bit22", "copy-header-bit30", "nop-count-bits", "write-sw", "write-cache-policy",
        "write-encrypt", "write-cpv", "poll-hdp-flush", "poll-cache-policy", "poll-cpv", "poll-function-0", "poll-function-7",
        "fill-sw", "fill-cache-policy", "fill-cpv", "fill-length", "fill-destination", "timestamp-l2", "timestamp-llc",
        "timestamp-cpv", "gcr-vmid",
    ],
)
def test_refused_packets(provider, gpu, sdma, make, message):
    """Packets the engine must refuse as packet faults (firmware status) before they
    write anything; without its check each would run, or fault for another reason."""
    m = memory(provider, gpu, 8192)
    sdma.sdma(make(m.address()), wait=False)
    status = wait_failed(sdma.queue)
    assert message in status.detail, status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE and status.terminal & 0xFFFFFFFF == 1
    assert not m.device_view(0, 8192).any(), "the refused packet wrote memory"
    assert sdma.queue.cache_operations == [] and sdma.queue.interrupts == []


def test_write_header_must_be_published_whole(provider, gpu, sdma):
    m = memory(provider, gpu)
    ring = sdma.mapping.ring.view(np.uint32)
    ring[:5] = sdma_write(m.address(), [9])
    sdma.mapping.write_index[0] = 8  # two dwords of a five-dword WRITE published
    sdma.mapping.doorbell.write(8)
    status = wait_failed(sdma.queue)
    assert "SDMA WRITE: truncated header" in status.detail and status.consumed_index == 0


def test_write_index_may_not_go_backwards(provider, gpu, sdma):
    m = memory(provider, gpu)
    sdma.sdma(sdma_fence(m.address(), 1))
    sdma.mapping.write_index[0] = 0
    sdma.mapping.doorbell.write(0)
    status = wait_failed(sdma.queue)
    assert "doorbell 0: went backwards from 16" in status.detail and status.terminal >> 32 == StatusDomain.FIRMWARE
