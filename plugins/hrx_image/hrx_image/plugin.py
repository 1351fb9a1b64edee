"""pluggy hooks of the ``hrx-image`` distribution (entry point ``hrx: image``)."""

from __future__ import annotations

from typing import Any

from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_kernels(engine: str) -> dict[str, Any]:
    from .kernels import kernels_for

    return kernels_for(engine)
