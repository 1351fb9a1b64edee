"""pluggy hooks of the ``hrx-gpu`` distribution (entry point ``hrx: cuda``)."""

from __future__ import annotations

from collections.abc import Sequence

from hrx_core.compiler import Compiler
from hrx_core.engine import Engine
from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_engines() -> Sequence[Engine]:
    from .engine import CudaEngine

    return [CudaEngine()]


@hookimpl
def hrx_compilers() -> Sequence[Compiler]:
    from .compilers import compilers

    return compilers()


@hookimpl
def hrx_doctor() -> Sequence[tuple[str, str, str]]:
    from .doctor import rows

    return rows()
