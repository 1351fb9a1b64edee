"""Failures on demand: queue faults, memory faults, hung waits, lost devices."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fakekit import Producer, memory, release_mem, sdma_fence, wait_failed, wait_mem32
from hrx_amdf.constants import QueueState, StatusCode, StatusDomain
from hrx_amdf.errors import AmdfDeviceError, AmdfDeviceLost, AmdfTimeout


def test_queue_fault_after_n_packets(provider, gpu):
    m = memory(provider, gpu)
    q = Producer(gpu.create_user_queue(0))
    provider.faults.queue_fault(q.queue, after=2, detail="ECC error")
    q.pm4(release_mem(m.address(), 1) + release_mem(m.address() + 8, 2) + release_mem(m.address() + 16, 3), wait=False)
    status = wait_failed(q.queue)
    assert "ECC error" in status.detail and status.terminal >> 32 == StatusDomain.FIRMWARE
    values = m.device_view(0, 24).view(np.uint64)
    assert list(values) == [1, 2, 0], "packets before the fault ran, the faulting one did not"
    with pytest.raises(AmdfDeviceError, match="ECC error"):
        q.queue.wait_consumed(q.write, 10**9)


def test_memory_fault_range(provider, gpu):
    m = memory(provider, gpu)
    provider.faults.memory_fault(m.address() + 64, 8)
    q = Producer(gpu.create_user_queue(1))
    q.sdma(sdma_fence(m.address(), 1))
    q.sdma(sdma_fence(m.address() + 64, 1), wait=False)
    status = wait_failed(q.queue)
    assert status.terminal >> 32 == StatusDomain.ERRNO and "injected memory fault" in status.detail


def test_hung_wait_needs_a_timeout(provider, gpu):
    m = memory(provider, gpu)
    m.device_view(0, 4).view(np.uint32)[0] = 1  # the condition already holds...
    q = Producer(gpu.create_user_queue(0))
    provider.faults.hang(q.queue)
    q.pm4(wait_mem32(m.address(), 1), wait=False)
    with pytest.raises(AmdfTimeout):  # ...but the queue never gets past it
        q.queue.wait_consumed(q.write, 30 * 10**6)
    assert q.queue.status().state == QueueState.ACTIVE
    provider.faults.release_hang(q.queue)
    q.queue.wait_consumed(q.write, 5 * 10**9)


def test_device_lost_ends_blocked_waits(provider, gpu):
    m = memory(provider, gpu)
    q = Producer(gpu.create_user_queue(0))
    idle = gpu.create_user_queue(1)
    q.pm4(wait_mem32(m.address(), 1), wait=False)
    time.sleep(0.02)
    errors = []

    def waiter():
        try:
            q.queue.wait_consumed(q.write, 10 * 10**9)
        except Exception as exc:
            errors.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    provider.faults.device_lost(gpu)
    t.join(5)
    assert not t.is_alive() and isinstance(errors[0], AmdfDeviceLost)
    for queue in (q.queue, idle):
        status = queue.status()
        assert status.state == QueueState.DEVICE_LOST and status.terminal == StatusCode.DEVICE_LOST
    assert gpu.reset_epoch == 2


def test_clear_removes_pending_injections(provider, gpu):
    m = memory(provider, gpu)
    q = Producer(gpu.create_user_queue(0))
    provider.faults.queue_fault(q.queue, after=0)
    provider.faults.memory_fault(m.address(), 8)
    provider.faults.clear()
    q.pm4(release_mem(m.address(), 5))
    assert int(m.device_view(0, 8).view(np.uint64)[0]) == 5


def test_a_lost_device_executes_nothing_more(provider, gpu):
    m = memory(provider, gpu)
    q = Producer(gpu.create_user_queue(0))
    q.pm4(wait_mem32(m.address(), 1) + release_mem(m.address() + 8, 5), wait=False)
    time.sleep(0.02)
    provider.faults.device_lost(gpu)
    m.device_view(0, 4).view(np.uint32)[0] = 1  # the wait would now pass...
    with pytest.raises(AmdfDeviceLost, match="lost"):  # ...and no new queue can be made
        gpu.create_user_queue(0)
    time.sleep(0.05)
    assert q.queue.status().state == QueueState.DEVICE_LOST
    assert list(m.device_view(8, 16).view(np.uint64)) == [0, 0], "a lost device ran packets"
