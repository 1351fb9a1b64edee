"""hrx_tensor: decode-time tensor operations for HRX (linear, linear_many,
linear_fragment, gather_rows) with host and cuda kernels.

    import hrx_core as hrx
    from hrx_tensor import TensorOps
    ops = TensorOps(hrx.device())
    y = ops.linear(ops.upload(x_bf16[None]), ops.upload(w_bf16), out_dtype="f32")
    y.numpy()
"""

from __future__ import annotations

from .ops import TensorOps
from .tensor import DeviceTensor

__version__ = "0.1.0"
__all__ = ["DeviceTensor", "TensorOps", "__version__"]
