"""The simulated AQL queue: barrier and vendor packets, publication, and what it refuses.
(Kernel dispatch on AQL and PM4 is in test_fake_dispatch.py: it needs compiled code.)"""

from __future__ import annotations

import time

import numpy as np
import pytest

from fakekit import Producer, aql_barrier_and, aql_barrier_value, aql_header, aql_pm4_ib, memory, release_mem, wait_failed
from hrx_amdf.constants import QueueState
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
