"""pluggy hooks of the ``hrx-image`` distribution (entry point ``hrx: image``)."""

from __future__ import annotations

from typing import Any

from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_kernels(engine: str) -> dict[str, Any]:
    from .kernels import kernels_for

    return kernels_for(engine)


@hookimpl
def hrx_doctor() -> list[tuple[str, str, str]]:
    """Whether the host engine runs hrx_image's compiled kernels or their numpy fallback."""
    from . import kernels, native

    state, detail = native.status(kernels._SOURCES)
    if state == "compiled" and not kernels.USE_NATIVE:
        state, detail = "numpy fallback", "hrx_image.kernels.USE_NATIVE is False"
    names = ", ".join(native.entries(kernels._SOURCES))
    return [("native kernels", "host: hrx_image", f"{state} ({names}): {detail}")]
