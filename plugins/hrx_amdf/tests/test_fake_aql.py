"""The simulated AQL queue: barrier and vendor packets, publication, and what it refuses.
(Kernel dispatch on AQL and PM4 is in test_fake_dispatch.py: it needs compiled code.)"""

from __future__ import annotations

import time

import numpy as np
import pytest

from fakekit import (
    Producer,
    aql_barrier_and,
    aql_barrier_value,
    aql_dispatch,
    aql_header,
    aql_pm4_ib,
    indirect_buffer,
    memory,
    nop,
    release_mem,
    wait_failed,
)
from hrx_amdf.constants import QueueState, StatusDomain
from hrx_amdf.errors import AmdfTimeout


@pytest.fixture
def aql(gpu):
    return Producer(gpu.create_user_queue(2))


def make_signal(mem, offset, value):
    """An amd_signal_t: kind USER (1) at byte 0, value at byte 8."""
    words = mem.device_view(offset, 16).view(np.int64)
    words[0], words[1] = 1, value
    return mem.address() + offset


def signal_value(mem, offset):
    return int(mem.device_view(offset + 8, 8).view(np.int64)[0])


def test_slots_start_invalid_and_are_reset(gpu, aql):
    ring = aql.mapping.ring.view(np.uint16).reshape(-1, 32)
    assert (ring[:, 0] == 1).all()
    aql.aql(aql_barrier_and([]))
    assert ring[0, 0] == 1 and int(aql.mapping.read_index[0]) == 1


def test_barrier_and_waits_for_every_dependency_then_decrements_completion(provider, gpu, aql):
    m = memory(provider, gpu, 4096)
    a, b, done = make_signal(m, 0, 1), make_signal(m, 64, 1), make_signal(m, 128, 1)
    aql.aql(aql_barrier_and([a, b], completion=done), wait=False)
    time.sleep(0.03)
    m.device_view(8, 8).view(np.int64)[0] = 0
    time.sleep(0.03)
    assert signal_value(m, 128) == 1
    m.device_view(72, 8).view(np.int64)[0] = 0
    aql.queue.wait_consumed(0, 5 * 10**9)
    assert signal_value(m, 128) == 0


def test_barrier_or_needs_any_dependency(provider, gpu, aql):
    m = memory(provider, gpu, 4096)
    a, b = make_signal(m, 0, 1), make_signal(m, 64, 1)
    aql.aql(aql_barrier_and([a, b], kind=5), wait=False)
    time.sleep(0.02)
    m.device_view(72, 8).view(np.int64)[0] = 0
    aql.queue.wait_consumed(0, 5 * 10**9)


def test_vendor_pm4_packet_runs_its_indirect_buffer(provider, gpu, aql):
    m = memory(provider, gpu, 4096)
    ib = memory(provider, gpu, 4096)
    stream = release_mem(m.address() + 512, 0xABCDEF)
    ib.device_view(0, 4 * len(stream)).view(np.uint32)[:] = stream
    done = make_signal(m, 0, 1)
    aql.aql(aql_pm4_ib(ib.address(), len(stream), completion=done))
    assert int(m.device_view(512, 8).view(np.uint64)[0]) == 0xABCDEF and signal_value(m, 0) == 0


def test_barrier_value_waits_on_a_64_bit_condition(provider, gpu, aql):
    m = memory(provider, gpu, 4096)
    timeline = make_signal(m, 0, 5)
    aql.aql(aql_barrier_value(timeline, 7, cond=3), wait=False)  # GTE 7
    with pytest.raises(AmdfTimeout):
        aql.queue.wait_consumed(0, 20 * 10**6)
    m.device_view(8, 8).view(np.int64)[0] = 7
    aql.queue.wait_consumed(0, 5 * 10**9)


@pytest.mark.parametrize(
    "packet, message",
    [
        (lambda m: aql_header(3) | (1 << 13), "reserved bits"),
        (lambda m: aql_header(3, acquire=3), "reserved"),
        (lambda m: aql_header(4), "not supported"),
        (lambda m: aql_header(0) | (7 << 16), "AMD format 7"),
    ],
    ids=["reserved-header", "scope", "agent-dispatch", "vendor-format"],
)
def test_malformed_headers(provider, gpu, aql, packet, message):
    m = memory(provider, gpu)
    raw = bytearray(aql_barrier_and([]))
    word = packet(m)
    raw[0:4] = int(word).to_bytes(4, "little")
    aql.aql(bytes(raw), wait=False)
    status = wait_failed(aql.queue)
    assert status.state == QueueState.FAILED and message in status.detail


def test_barrier_reserved_fields_and_signal_kind(provider, gpu, aql):
    m = memory(provider, gpu)
    raw = bytearray(aql_barrier_and([]))
    raw[4] = 1
    aql.aql(bytes(raw), wait=False)
    assert "reserved" in wait_failed(aql.queue).detail
    q2 = Producer(gpu.create_user_queue(2))
    not_a_signal = m.address() + 256  # kind 0
    q2.aql(aql_barrier_and([not_a_signal]), wait=False)
    assert "amd_signal_t" in wait_failed(q2.queue).detail


def test_doorbell_before_header_is_refused(gpu, aql):
    aql.mapping.write_index[0] = 1
    aql.mapping.doorbell.write(0)  # nothing was written to slot 0
    assert "still INVALID" in wait_failed(aql.queue).detail


def test_doorbell_beyond_the_reserved_write_index(gpu, aql):
    aql.mapping.doorbell.write(3)
    assert "write index" in wait_failed(aql.queue).detail


def test_ring_wraps_over_many_packets(provider, gpu, aql):
    m = memory(provider, gpu)
    done = make_signal(m, 0, 200)
    for _ in range(200):  # 64-slot ring
        aql.aql(aql_barrier_and([], completion=done))
    assert signal_value(m, 0) == 0 and int(aql.mapping.read_index[0]) == 200


def _with(raw: bytes, offset: int, value: int, size: int) -> bytes:
    out = bytearray(raw)
    out[offset : offset + size] = value.to_bytes(size, "little")
    return bytes(out)


def _vendor_ib(ib_words, remain=0xA):
    words = [aql_header(0) | (1 << 16)] + list(ib_words) + [remain] + [0] * 10
    return np.array(words, dtype=np.uint32).tobytes()


def _dispatch(**kw):
    # a kernel dispatch whose kernel object is never looked up: every case below fails earlier
    args = dict(descriptor=0x1000, kernarg=0x2000, block=(64, 1, 1), grid=(64, 1, 1), dims=1)
    args.update(kw)
    return aql_dispatch(args.pop("descriptor"), args.pop("kernarg"), args.pop("block"), args.pop("grid"), args.pop("dims"))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda ib, sig: _with(aql_barrier_and([]), 0, aql_header(4, barrier=True), 2), "packet type 4 is not supported"),
        (lambda ib, sig: _with(aql_barrier_and([]), 0, aql_header(6, barrier=True), 2), "packet type 6 is not supported"),
        (lambda ib, sig: _with(aql_barrier_and([]), 0, aql_header(0x80, barrier=True), 2), "packet type 128 is not supported"),
        (lambda ib, sig: _dispatch(dims=0), "setup 0x0000"),
        (lambda ib, sig: _with(_dispatch(), 2, 1 | (1 << 2), 2), "setup 0x0005"),
        (lambda ib, sig: _with(_dispatch(), 10, 1, 2), "KERNEL_DISPATCH: reserved fields are not zero"),
        (lambda ib, sig: _with(_dispatch(), 48, 1 << 40, 8), "KERNEL_DISPATCH: reserved fields are not zero"),
        (lambda ib, sig: _dispatch(block=(0, 1, 1)), "empty dimension 0 (workgroup 0, grid 64)"),
        (lambda ib, sig: _dispatch(block=(64, 1, 1), grid=(64, 0, 1), dims=2), "empty dimension 1 (workgroup 1, grid 0)"),
        (lambda ib, sig: aql_barrier_and([], kind=5), "BARRIER_OR: no dependency signal"),
        (lambda ib, sig: _with(aql_barrier_and([sig], kind=5), 4, 1, 4), "BARRIER_OR: reserved fields"),
        (lambda ib, sig: _vendor_ib(nop(4)), "carries NOP, not a four-dword INDIRECT_BUFFER"),
        (lambda ib, sig: _vendor_ib(indirect_buffer(ib, 4), remain=0xB), "dw_cnt_remain 0xb, expected 0xa"),
        (lambda ib, sig: _with(_vendor_ib(indirect_buffer(ib, 4)), 40, 1, 4), "reserved dwords are not zero"),
        (lambda ib, sig: _with(_vendor_ib(indirect_buffer(ib, 4)), 24, 1, 4), "reserved dwords are not zero"),
        (lambda ib, sig: _with(aql_barrier_value(sig, 0, cond=0), 4, 1, 4), "BARRIER_VALUE: reserved fields"),
        (lambda ib, sig: _with(aql_barrier_value(sig, 0, cond=0), 36, 1, 4), "BARRIER_VALUE: reserved fields"),
        (lambda ib, sig: _with(aql_barrier_value(sig, 0, cond=0), 40, 1, 8), "BARRIER_VALUE: reserved fields"),
        (lambda ib, sig: _with(aql_barrier_value(sig, 0, cond=0), 48, 1, 8), "BARRIER_VALUE: reserved fields"),
        (lambda ib, sig: aql_barrier_value(sig, 0, cond=4), "BARRIER_VALUE: condition 4"),
        (lambda ib, sig: aql_barrier_value(0, 0, cond=0), "BARRIER_VALUE: condition 0, signal 0x0"),
    ],
    ids=[
        "agent-dispatch", "type-6", "type-128", "setup-no-dims", "setup-reserved", "dispatch-reserved0", "dispatch-reserved2",
        "dispatch-empty-x", "dispatch-empty-y", "barrier-or-no-deps", "barrier-or-reserved", "vendor-not-ib",
        "vendor-remain", "vendor-reserved", "vendor-reserved-first", "value-reserved0", "value-reserved1",
        "value-reserved2", "value-reserved3", "value-condition", "value-no-signal",
    ],
)
def test_refused_packets(provider, gpu, aql, make, message):
    """Packets refused as packet faults (firmware status 1) before they run; without its
    check each would run (its signal and indirect buffer are valid) or fail otherwise."""
    m = memory(provider, gpu, 8192)
    ib = m.address() + 4096
    m.device_view(4096, 16).view(np.uint32)[:] = nop(4)
    sig = make_signal(m, 0, 0)  # satisfied for every barrier condition used above
    aql.aql(make(ib, sig), wait=False)
    status = wait_failed(aql.queue)
    assert message in status.detail, status.detail
    assert status.terminal >> 32 == StatusDomain.FIRMWARE and status.terminal & 0xFFFFFFFF == 1
    assert aql.queue.log.count("INDIRECT_BUFFER") == 0 and status.consumed_index == 0


def test_doorbell_may_not_go_backwards(gpu, aql):
    aql.aql(aql_barrier_and([]))
    aql.aql(aql_barrier_and([]))
    aql.mapping.doorbell.write(0)
    assert "doorbell 0: went backwards from 1" in wait_failed(aql.queue).detail


def test_doorbell_may_not_publish_more_than_the_ring_holds(gpu, aql):
    aql.mapping.write_index[0] = 65  # 64 slots
    aql.mapping.doorbell.write(64)
    assert "doorbell 64: publishes 65 packets into a 64-slot ring" in wait_failed(aql.queue).detail
