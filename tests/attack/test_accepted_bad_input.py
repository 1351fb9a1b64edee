"""Inputs the public API used to accept and mishandle (issue 14, "accepted bad input").

Each test feeds the input that got through and asserts a typed refusal that names
the argument and changes nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core.buffer import Binding, View

from ..kernels import ADD_U32, INC_BYTES
from .tally import tried


def _host():
    return hrx.open_device("host")


def test_grid_validation_is_not_memoised_by_equality():
    # grid=1 was memoised under the key (1,); 1.0 == 1 then hit the memo and passed
    dev = _host()
    s = dev.stream()
    buf = dev.allocate(64)
    s.dispatch(INC_BYTES, 1, [buf], block=1, scalars=(4,))
    for grid in (1.0, np.float64(1.0), True, (1.0,), (1, 1.0)):
        tried("bad-arguments", "Stream.dispatch")
        with pytest.raises(hrx.InvalidArgument, match="grid"):
            s.dispatch(INC_BYTES, grid, [buf], block=1, scalars=(4,))
        g = s.access_graph()
        tried("bad-arguments", "Graph.dispatch")
        with pytest.raises(hrx.InvalidArgument, match="grid"):
            g.dispatch(INC_BYTES, grid, [buf], block=1, scalars=(4,))
    for block in (1.0, (2.0,)):
        tried("bad-arguments", "Stream.dispatch")
        with pytest.raises(hrx.InvalidArgument, match="block"):
            s.dispatch(INC_BYTES, 1, [buf], block=block, scalars=(4,))
    s.synchronize()


@pytest.mark.parametrize("scalars", [(None, 1), (1, None), (True, 1), (1, False), (np.bool_(True), 1),
                                     ("1", 1), (1.5, 1), (2**32, 1), (-1, 1), ([1], 1), (np.array([1]), 1)])
def test_scalars_are_exactly_the_declared_type(scalars):
    # None became NaN (float) or 0; True became 1 for uint32
    dev = _host()
    s = dev.stream()
    buf = s.allocate_from(np.zeros(4, np.uint32))
    tried("bad-arguments", "Stream.dispatch(scalars=)")
    with pytest.raises(hrx.InvalidArgument, match=r"scalars\[[01]\]"):
        s.dispatch(ADD_U32, 1, [buf], block=4, scalars=scalars)
    assert (s.download(buf).view(np.uint32) == 0).all()  # nothing ran


def test_scalars_must_be_a_sequence():
    dev = _host()
    s = dev.stream()
    buf = dev.allocate(16)
    for bad in (5, "ab", b"ab", np.array([1, 2], np.uint32), {1: 2}):
        tried("bad-arguments", "Stream.dispatch(scalars=)")
        with pytest.raises(hrx.InvalidArgument, match="scalars"):
            s.dispatch(ADD_U32, 1, [buf], block=4, scalars=bad)


def test_binding_access_is_checked():
    dev = _host()
    buf = dev.allocate(64)
    view = buf.view()
    b = Binding(view, "read")  # a str is coerced, not stored raw
    assert b.access is hrx.Access.READ and not b.access.writes
    for bad in ("bogus", 0, 7, None, hrx.Access(0)):
        tried("bad-arguments", "Binding")
        with pytest.raises(hrx.InvalidArgument, match="access"):
            Binding(view, bad)
    tried("bad-arguments", "Binding")
    with pytest.raises(hrx.InvalidArgument, match="view"):
        Binding(buf, hrx.Access.READ)


def test_view_constructor_checks_its_range():
    dev = _host()
    buf = dev.allocate(64)
    for offset, length in ((-1, 4), (0, 0), (60, 8), (0.0, 4), (True, 4), (None, 4)):
        tried("bad-arguments", "View")
        with pytest.raises(hrx.InvalidArgument):
            View(buf, offset, length)
    assert View(buf, 8, 8).start == 8


def test_overlapping_copy_between_aliases_of_one_backing_is_refused():
    pytest.importorskip("hrx_npu")
    import hrx_npu
    from hrx_core.placement import Fabric, MemoryPlacement

    gpu = _host()
    npu = hrx_npu.open_device("npu-host")
    f = Fabric()
    owner = f.allocate(4096, MemoryPlacement.Shared(gpu))
    a1, a2 = f.adopt(owner, npu), f.adopt(owner, npu)  # two imports of one backing
    s = npu.stream()
    tried("bad-arguments", "Stream.copy")
    with pytest.raises(hrx.Overlap):
        s.copy(a1.slice(0, 64), a2.slice(32, 64))
    g = s.access_graph()
    tried("bad-arguments", "Graph.copy")
    with pytest.raises(hrx.Overlap):
        g.copy(a1.slice(0, 64), a2.slice(32, 64))
    s.copy(a1.slice(0, 64), a2.slice(64, 64)).wait()  # disjoint ranges are fine
