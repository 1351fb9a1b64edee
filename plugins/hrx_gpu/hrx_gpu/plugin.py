"""pluggy hooks of the ``hrx-gpu`` distribution (entry point ``hrx: cuda``): the cuda engine,
the cuda/ptx/cubin compilers and the gfx1151 compiler (:mod:`hrx_gpu.amdgpu.compiler`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hrx_core import hotpath
from hrx_core.compiler import Compiler
from hrx_core.engine import Engine
from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_engines() -> Sequence[Engine]:
    from .amdgpu.engine import AmdgpuEngine
    from .cuda.engine import CudaEngine

    return [CudaEngine(), AmdgpuEngine()]


@hookimpl
def hrx_compilers() -> Sequence[Compiler]:
    from .amdgpu.compiler import compilers as amdgpu_compilers
    from .cuda.compilers import compilers

    return [*compilers(), *amdgpu_compilers()]


@hookimpl
def hrx_doctor() -> Sequence[tuple[str, str, str]]:
    from .amdgpu.compiler import doctor_rows as amdgpu_rows
    from .cuda.doctor import rows

    return [*rows(), _hot_path_row(), *amdgpu_rows()]


def _hot_path_row() -> tuple[str, str, str]:
    """The cuda engine's compiled hot path: compiled (where) or the Python fallback (why).

    Builds the extension on first use (a second or so with a C compiler), as a launch would."""

    def status() -> dict[str, Any]:
        from .cuda.hot import status

        return status()

    return hotpath.doctor_row("cuda", "hot path", status)
