"""pluggy hooks of the ``hrx-models`` distribution (entry point ``hrx: models``)."""

from __future__ import annotations

from typing import Any

from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_kernels(engine: str) -> dict[str, Any]:
    from .gpt2.kernels import kernels_for

    return kernels_for(engine)


@hookimpl
def hrx_cli_commands() -> list[Any]:
    from .cli import commands

    return commands()
