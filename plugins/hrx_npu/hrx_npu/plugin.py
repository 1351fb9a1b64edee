"""pluggy hooks of the ``hrx-npu`` distribution (entry point ``hrx: npu``)."""

from __future__ import annotations

from typing import Any

from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_engines() -> list[Any]:
    from .host.engine import NpuHostEngine
    from .xdna.engine import XdnaEngine

    return [NpuHostEngine(), XdnaEngine()]


@hookimpl
def hrx_compilers() -> list[Any]:
    from .compiler import NPU_HOST_C

    return [NPU_HOST_C]  # numpy programs use hrx_core's own "host" target


@hookimpl
def hrx_doctor() -> list[tuple[str, str, str]]:
    from .compiler import c_compiler
    from .host.engine import REFERENCE_NOTE

    from .xdna.doctor import rows as xdna_rows

    cc = c_compiler()
    return [
        ("npu", "npu-host", f"{REFERENCE_NOTE}; use it to develop and test NPU pipelines, not to measure an NPU"),
        ("npu", "npu-host-c compiler", f"C programs built with {cc}, loaded through cffi" if cc else "no C compiler on PATH: numpy programs only"),
        *xdna_rows(),
    ]


@hookimpl
def hrx_cli_commands() -> list[Any]:
    from .demo import DEMO

    return [DEMO]
