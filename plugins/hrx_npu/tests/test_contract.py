"""Contract violations are typed errors raised before launch; a rejected call changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import add_one, numpy_artifact, rw_contract
from hrx_npu import (
    AccessModeError,
    AlignmentError,
    BindingLengthError,
    BindingListError,
    BufferContract,
    ColumnError,
    ContractViolation,
    KernelContract,
)

import hrx_core as hrx


def _three(x, y, z, *, scratch, column, columns):
    np.copyto(z, x)


def _prog(npu, contract, fn=_three, columns=1):
    return npu.load_artifact(numpy_artifact(fn), columns=columns, contract=contract)


def _state(npu, prog):
    s = npu.npu_stats()
    return (prog.pending, npu.stats.dispatches, s["invocations"], tuple(npu.created_queues()))


def test_launch_checks_are_typed_and_change_nothing(npu):
    c = KernelContract([BufferContract.read(256), BufferContract.read(256), BufferContract.write(256)])
    prog = _prog(npu, c)
    s = npu.stream()
    x = s.allocate_from(np.full(256, 7, np.uint8))
    y = s.allocate_from(np.zeros(256, np.uint8))
    z = s.allocate_from(np.zeros(256, np.uint8))
    big = npu.allocate(1024)
    prog.invoke([x, y, z], stream=s).wait()  # creates the queue
    s.fill(z, 0)
    s.synchronize()
    before = _state(npu, prog)
    cases = [
        (BindingLengthError, [x, y, big]),
        (BindingLengthError, [x, y, big.slice(0, 128)]),
        (AlignmentError, [x, y, big.slice(8, 256)]),
        (AccessModeError, [x.binding().write(), y, z]),
        (AccessModeError, [x, y, z.binding()]),          # read_write declared for a write slot
        (BindingListError, [x, y]),
        (BindingListError, [x, y, z, z]),
        (BindingListError, [x, None, z]),
        (ContractViolation, [x, y, hrx.device("host").allocate(256)]),
    ]
    for error, bindings in cases:
        with pytest.raises(error):
            prog.invoke(bindings, stream=s)
        assert _state(npu, prog) == before
    assert not s.download(z).any()  # nothing ran
    assert issubclass(ContractViolation, hrx.InvalidArgument)


def test_load_checks(npu):
    art = numpy_artifact(add_one)
    with pytest.raises(ColumnError, match="1..8"):
        npu.load_artifact(art, columns=9, contract=rw_contract(64))
    with pytest.raises(ColumnError):
        npu.load_artifact(art, columns=0, contract=rw_contract(64))
    with pytest.raises(BindingListError, match="unused"):
        npu.load_artifact(art, columns=1, contract=KernelContract([BufferContract.read(64), BufferContract.unused(), BufferContract.write(64)]))
    with pytest.raises(AlignmentError):
        npu.load_artifact(art, columns=1, contract=KernelContract([BufferContract.read(64, alignment=2 * npu.info.limits.alignment)]))
    with pytest.raises(ContractViolation, match="scratch_bytes"):
        npu.load_artifact(art, columns=1, contract=rw_contract(64, scratch=npu.column_memory_bytes + 1))
    with pytest.raises(ContractViolation):
        BufferContract(64, "read", alignment=3)
    with pytest.raises(ContractViolation):
        BufferContract(0, "read")
    assert npu.columns_free == npu.columns and not npu.programs  # rejected loads hold no columns


def test_trailing_unused_binding_is_left_out_of_launch_lists(npu):
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1,
                             contract=KernelContract([BufferContract.read_write(64), BufferContract.unused()]))
    s = npu.stream()
    x = s.allocate_from(np.zeros(16, np.uint32))
    with pytest.raises(BindingListError):
        prog.invoke([x, x], stream=s)
    prog.invoke([x], stream=s).wait()
    assert (s.download(x).view(np.uint32) == 1).all()


def test_engine_rechecks_rebound_graph_inputs_and_drops_the_launch(npu):
    """A graph replayed with a rebound input that breaks the contract is rejected at
    encode time; nothing of that launch runs."""
    prog = npu.load_artifact(numpy_artifact(add_one), columns=1, contract=rw_contract(256))
    s = npu.stream()
    x = s.allocate_from(np.zeros(64, np.uint32))
    other = s.allocate_from(np.zeros(128, np.uint32))
    g = s.access_graph()
    g.input("x", x)
    g.fill(x, 0)                     # encoded before the dispatch in the same launch
    prog.record(g, [x])
    g.launch().wait()
    assert (s.download(x).view(np.uint32) == 1).all()
    s.fill(other, pattern=5)
    s.synchronize()
    with pytest.raises(AlignmentError):
        g.launch(inputs={"x": other.slice(4, 256)})
    assert prog.pending == 0
    g.launch().wait()                # the dropped launch left nothing behind
    assert (s.download(x).view(np.uint32) == 1).all()
    assert (s.download(other).view(np.uint32) == 0x05050505).all()


def test_unloaded_images_cannot_launch(npu):
    k = hrx.Kernel("add_one", buffers=("read_write",), host=add_one)
    s = npu.stream()
    x = s.allocate_from(np.zeros(4, np.uint32))
    k.executable(npu)  # loads (hrx prepare does this) ...
    with pytest.raises(ContractViolation, match="load_artifact"):
        s.dispatch(k, 1, [x])  # ... but has no contract
