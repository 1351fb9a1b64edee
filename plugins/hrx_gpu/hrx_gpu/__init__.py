"""hrx-gpu: HRX's GPU engines, one subpackage each.

* :mod:`hrx_gpu.cuda` -- ``cuda``: NVIDIA GPUs through the CUDA driver API (cffi) and NVRTC.
* :mod:`hrx_gpu.amdgpu` -- ``amdgpu``: AMD gfx1151 (Strix Halo) through libamdf (hrx-amdf),
  with its gfx1151 compiler; proven on the simulated Strix Halo.

Both register through :mod:`hrx_gpu.plugin` (entry point group ``hrx``). Importing this
package loads nothing native.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .amdgpu.engine import AmdgpuEngine
    from .cuda.device import CudaDevice
    from .cuda.engine import CudaEngine

__all__ = ["CudaEngine", "CudaDevice", "AmdgpuEngine", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "CudaEngine":
        from .cuda.engine import CudaEngine

        return CudaEngine
    if name == "CudaDevice":
        from .cuda.device import CudaDevice

        return CudaDevice
    if name == "AmdgpuEngine":
        from .amdgpu.engine import AmdgpuEngine

        return AmdgpuEngine
    raise AttributeError(f"module 'hrx_gpu' has no attribute {name!r}")
