"""Record scalars (structs passed by value) and PreparedLaunch.set_scalar on the host engine:
declaration, conversion, the device's argument limit, and each launch keeping the value
it was made with."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.errors import InvalidArgument, Unsupported
from hrx_core.kernel import Kernel, argument_bytes
from hrx_core.testing import COPY_RECORD, RECORD8, record8


def _noop(*args: object) -> None:
    return None


@pytest.mark.parametrize("dtype", [
    np.dtype([("o", object)]),
    np.dtype([("inner", [("a", np.uint32)])]),
    np.dtype([("s", "U4")]),
    np.dtype((np.uint32, (4,))),  # a subarray dtype, not a record
    np.dtype([("d", np.float64), ("b", np.uint8)]),  # 9 bytes: the C struct has 16
    np.dtype([("b", np.uint8), ("d", np.float64)]),  # d at offset 1
])
def test_a_record_of_anything_but_numeric_fields_is_refused(dtype: np.dtype) -> None:
    with pytest.raises(InvalidArgument, match="scalars\\[0\\]"):
        Kernel("k", buffers=1, scalars=(dtype,), host=_noop)


def test_records_convert_exactly_and_are_copied() -> None:
    rec = np.zeros((), RECORD8)
    rec["v"] = np.arange(8)
    (as_void,) = COPY_RECORD.check_scalars((rec[()],))
    (from_array,) = COPY_RECORD.check_scalars((rec,))
    rec["v"] = 99  # the caller reuses its memory: what was converted keeps the old values
    assert as_void["v"].tolist() == list(range(8)) == from_array["v"].tolist()
    assert as_void.dtype == RECORD8
    other = np.zeros((), np.dtype([("v", np.uint32, (7,))]))
    for bad in (5, 1.0, None, other[()], other, np.zeros(2, RECORD8), b"\0" * 32):
        with pytest.raises(InvalidArgument, match="scalars\\[0\\]"):
            COPY_RECORD.check_scalars((bad,))


def test_a_numeric_scalar_is_not_a_record() -> None:
    k = Kernel("k", buffers=1, scalars=(np.uint32,), host=_noop)
    with pytest.raises(InvalidArgument):
        k.check_scalars((record8(range(8)),))


def test_argument_bytes_follow_the_c_layout() -> None:
    rec16 = np.dtype([("v", np.uint32, (4,))])
    assert argument_bytes(2, [np.dtype(np.uint64), np.dtype(np.uint32), rec16]) == 16 + 8 + 4 + 16
    assert argument_bytes(0, [np.dtype(np.uint32), np.dtype(np.uint64)]) == 16  # padded to 8
    aligned = np.dtype([("d", np.float64), ("b", np.uint8)], align=True)
    assert argument_bytes(1, [np.dtype(np.uint8), aligned]) == 8 + 8 + 16
    assert COPY_RECORD.argument_bytes == 8 + 32


def test_a_kernel_over_the_devices_argument_limit_is_refused_before_anything_runs() -> None:
    dev = hrx.device("host")
    big = np.dtype([("v", np.uint32, (dev.info.limits.max_kernel_arg_bytes // 4,))])
    k = Kernel("big_record", buffers=("write",), scalars=(big,), host=_noop)
    s = dev.stream()
    buf = dev.allocate(32)
    with pytest.raises(Unsupported, match="max_kernel_arg_bytes"):
        s.dispatch(k, 1, [buf], scalars=(np.zeros((), big),))
    with pytest.raises(Unsupported, match="max_kernel_arg_bytes"):
        s.prepare(k, 1, [buf], scalars=(np.zeros((), big),))
    s.synchronize()
    dev.close()


def test_set_scalar_refuses_bad_arguments_and_changes_nothing() -> None:
    dev = hrx.device("host")
    s = dev.stream()
    out = dev.allocate(32)
    launch = s.prepare(COPY_RECORD, 1, [out], scalars=(record8(range(8)),))
    for index, value in (("0", record8(range(8))), (-1, record8(range(8))), (1, record8(range(8))),
                         (True, record8(range(8))), (0, 7), (0, np.zeros(8, np.uint32))):
        with pytest.raises(InvalidArgument):
            launch.set_scalar(index, value)
    launch.launch()
    assert s.download(out).view(np.uint32).tolist() == list(range(8))
    launch.close()
    with pytest.raises(InvalidArgument, match="closed"):
        launch.set_scalar(0, record8(range(8)))
    dev.close()


def test_numeric_set_scalar_converts_like_a_dispatch() -> None:
    from hrx_core.testing import ADD_U32

    dev = hrx.device("host")
    s = dev.stream()
    buf = s.allocate_from(np.zeros(4, np.uint32))
    launch = s.prepare(ADD_U32, 1, [buf], scalars=(1, 4))
    launch.launch()
    launch.set_scalar(0, 10)
    launch.launch()
    with pytest.raises(InvalidArgument, match="outside the range"):
        launch.set_scalar(0, -1)
    with pytest.raises(InvalidArgument):
        launch.set_scalar(1, 2.5)
    launch.launch()
    assert s.download(buf).view(np.uint32).tolist() == [21] * 4
    launch.close()
    dev.close()


def test_a_queued_launch_keeps_its_record_when_the_next_is_set() -> None:
    """The queue is held shut by a gate kernel, so every launch below is queued (not run)
    when set_scalar changes the record and the caller rewrites its own copy."""
    gate = threading.Event()
    block = Kernel("gate", buffers=0, host=lambda: gate.wait(30))
    dev = hrx.device("host")
    s = dev.stream()
    outs = [dev.allocate(32) for _ in range(3)]
    mine = np.zeros((), RECORD8)
    mine["v"] = 1
    launch = s.prepare(COPY_RECORD, 1, [outs[0]], scalars=(mine,))
    s.dispatch(block, 1, [])
    launch.launch()
    for i in (1, 2):
        mine["v"] = i + 1  # the caller's memory, rewritten while launches wait
        launch.set_scalar(0, mine)
        launch.rebind(0, outs[i])
        launch.launch()
    mine["v"] = 0
    gate.set()
    assert [s.download(o).view(np.uint32).tolist() for o in outs] == [[1] * 8, [2] * 8, [3] * 8]
    launch.close()
    dev.close()
