"""hrx-gpu: the ``cuda`` engine of HRX (CUDA driver API through cffi, NVRTC).

Importing this package loads nothing native: the driver and NVRTC are opened on
first use, so it imports cleanly on machines without a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .device import CudaDevice
    from .engine import CudaEngine

__all__ = ["CudaEngine", "CudaDevice", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "CudaEngine":
        from .engine import CudaEngine

        return CudaEngine
    if name == "CudaDevice":
        from .device import CudaDevice

        return CudaDevice
    raise AttributeError(f"module 'hrx_gpu' has no attribute {name!r}")
