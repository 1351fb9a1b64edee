"""hrx_gpu.amdgpu: HRX on AMD gfx1151 GPUs.

* :mod:`hrx_gpu.amdgpu.compiler` -- the ``gfx1151`` compiler: the kernels' CUDA-dialect
  sources through clang (HIP mode, amdgcn) and :file:`prelude.h` to code objects,
  registered through the ``hrx_compilers`` hook. Code objects are read by
  :mod:`hrx_amdf.codeobject`.
"""

from __future__ import annotations
