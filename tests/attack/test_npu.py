"""The NPU side under attack: C programs with a missing entry symbol, odd CC values,
absurd array geometry -- typed errors, nothing loaded."""

from __future__ import annotations

import shutil

import pytest

import hrx_core as hrx

from .tally import tried

hrx_npu = pytest.importorskip("hrx_npu")
from hrx_npu.contract import BufferContract, KernelContract  # noqa: E402

needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


@needs_cc
def test_a_c_program_without_its_entry_symbol_is_a_compile_error():
    npu = hrx_npu.open_device("npu-host")
    src = "HRX_NPU_PROGRAM(other) { (void)buffers; (void)lengths; (void)nbuffers; (void)scratch; " \
          "(void)scratch_bytes; (void)column; (void)columns; }\n"
    tried("bad-arguments", "NpuDevice.load_artifact (missing entry)")
    with pytest.raises(hrx.CompileError):
        art = hrx.compile(src, target="npu-host-c", entry="wanted")
        npu.load_artifact(art, columns=1, contract=KernelContract([BufferContract.read_write(256)]))
    assert npu.columns_free == npu.columns and npu.programs == []


@pytest.mark.parametrize("cc", ['"unbalanced', "/nonexistent/cc", "cc\x01"])
def test_odd_cc_values_are_compile_errors(monkeypatch, cc):
    import hrx_npu.compiler as compiler

    monkeypatch.setenv("CC", cc)  # hrx_core.native keys compiler versions by command line: nothing to reset
    tried("bad-arguments", "hrx.compile(npu-host-c) with CC")
    with pytest.raises(hrx.CompileError):
        compiler.compile_c("HRX_NPU_PROGRAM(p) {}", "p", ())


@pytest.mark.parametrize("options", [{"columns": 10**6}, {"column_memory_bytes": 1 << 40}, {"npu_queues": 10**4},
                                     {"max_pending_invocations": 2**40}, {"columns": 0}])
def test_absurd_array_geometry_is_refused(options):
    tried("bad-arguments", "hrx_npu.open_device(geometry)")
    with pytest.raises(hrx.InvalidArgument, match=next(iter(options))):
        hrx_npu.open_device("npu-host", **options)


@needs_cc
def test_npu_instruction_buffers_are_charged_to_the_budget():
    npu = hrx_npu.open_device("npu-host")
    from hrx_npu.programs import XOR_COPY_C

    art = hrx.compile(XOR_COPY_C, target="npu-host-c", entry="hrx_xor_copy")
    contract = KernelContract([BufferContract.read(256), BufferContract.write(256)])
    image = len(art.code)
    budget = hrx.MemoryBudget(image + 10)
    prog = npu.load_artifact(art, columns=1, contract=contract, budget=budget)
    assert budget.used_bytes == image  # the spec: NPU instruction buffers count
    tried("faults", "NpuDevice.load_artifact (budget)")
    with pytest.raises(hrx.BudgetExceeded):
        npu.load_artifact(art, columns=1, contract=contract, budget=budget)
    assert len(npu.programs) == 1  # the refused load took no columns
    prog.close()
    assert budget.used_bytes == 0
