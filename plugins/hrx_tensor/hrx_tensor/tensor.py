"""DeviceTensor for tensor ops: the core model layer's tensor (one type across HRX).

Operations return :class:`hrx_core.model.tensor.DeviceTensor` views that retain their
output slot (a :class:`SharedHold`) until closed; model-layer tensors (slot outputs,
fragment outputs, session weights) are accepted as inputs directly.
"""

from __future__ import annotations

from hrx_core.model.tensor import DTYPE_NAMES, DeviceTensor, SharedHold, as_dtype

__all__ = ["DTYPE_NAMES", "DeviceTensor", "SharedHold", "as_dtype"]
