"""hrx-npu: the NPU programming model, the npu-host reference engine, GPU+NPU examples
and ``hrx demo``.

    import hrx_npu
    npu = hrx_npu.device()                            # best NPU engine: npu-host here
    prog = hrx_npu.load_matmul8x8(npu, m=1024, columns=2)
    prog.invoke([a, b, c]).wait()                     # contract-checked, 128 pending max

See docs/npu.md.
"""

from __future__ import annotations

from .columns import ColumnMap
from .contract import BufferContract, KernelContract
from .device import Invocation, NpuDevice, NpuProgram, best_npu_engine, device, npu_engines, open_device
from .errors import (
    AccessModeError,
    AlignmentError,
    BindingLengthError,
    BindingListError,
    ColumnError,
    ContractViolation,
)
from .pending import DEFAULT_LIMIT, PendingLimit
from .programs import artifact_for, load_matmul8x8, matmul8x8_contract, matmul8x8_reference

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LIMIT",
    "AccessModeError",
    "AlignmentError",
    "BindingLengthError",
    "BindingListError",
    "BufferContract",
    "ColumnError",
    "ColumnMap",
    "ContractViolation",
    "Invocation",
    "KernelContract",
    "NpuDevice",
    "NpuProgram",
    "PendingLimit",
    "artifact_for",
    "best_npu_engine",
    "device",
    "load_matmul8x8",
    "matmul8x8_contract",
    "matmul8x8_reference",
    "npu_engines",
    "open_device",
]
