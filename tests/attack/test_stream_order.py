"""Host writes into memory that queued work reads go through the stream or wait for
it (issue 14, must-fix 4: gather_rows wrote its index slot from the host at once)."""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx

from ..kernels import SLEEPY
from .tally import tried

hrx_tensor = pytest.importorskip("hrx_tensor")


def _table(ops, rows=64, width=16):
    data = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    return data, ops.upload(data)


def test_gather_rows_reuse_keeps_a_queued_consumers_rows():
    dev = hrx.open_device("host")
    s = dev.stream()
    ops = hrx_tensor.TensorOps(dev, stream=s)
    data, table = _table(ops)
    flag = dev.allocate(8)
    ia, ib = np.array([1, 2, 3, 4]), np.array([60, 61, 62, 63])
    s.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(100_000_000,))  # gather A waits behind this
    ta = ops.gather_rows(table, ia)
    dst = dev.allocate(ta.nbytes)
    s.copyto(dst, ta.view)  # a consumer queued before the release
    ta.close()  # the slot may be reused now ...
    tried("concurrency", "TensorOps.gather_rows (slot reuse)")
    tb = ops.gather_rows(table, ib)  # ... by a call with other indices
    got = s.download(dst).view(np.float32).reshape(4, 16)
    np.testing.assert_array_equal(got, data[ia])  # the consumer saw A's rows, not B's
    np.testing.assert_array_equal(tb.numpy(), data[ib])
    tb.close()


def test_gather_rows_reuse_waits_for_a_consumer_on_another_stream():
    dev = hrx.open_device("host")
    s, other = dev.stream(), dev.stream()
    assert s.slot is not other.slot
    ops = hrx_tensor.TensorOps(dev, stream=s)
    data, table = _table(ops)
    ia, ib = np.array([5, 6]), np.array([7, 8])
    ta = ops.gather_rows(table, ia)
    flag = dev.allocate(8)
    other.wait_event(s.record_event())
    other.dispatch(SLEEPY, 1, [flag.slice(0, 4)], scalars=(100_000_000,))
    dst = dev.allocate(ta.nbytes)
    other.copyto(dst, ta.view)  # reads A's output after a delay, on another queue
    ta.close()
    tried("concurrency", "TensorOps.gather_rows (cross-stream consumer)")
    tb = ops.gather_rows(table, ib)  # same slot: must not overwrite before the copy ran
    np.testing.assert_array_equal(other.download(dst).view(np.float32).reshape(2, 16), data[ia])
    np.testing.assert_array_equal(tb.numpy(), data[ib])
    tb.close()
