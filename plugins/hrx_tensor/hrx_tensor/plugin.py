"""pluggy hooks of the ``hrx-tensor`` distribution (entry point ``hrx: tensor``)."""

from __future__ import annotations

from typing import Any

from hrx_core.hookspecs import hookimpl


@hookimpl
def hrx_kernels(engine: str) -> dict[str, Any]:
    from .kernels import kernels_for

    return kernels_for(engine)


@hookimpl
def hrx_doctor() -> list[tuple[str, str, str]]:
    """Whether the host engine runs hrx_tensor's compiled kernels or their numpy fallback."""
    from . import kernels, native

    state, detail = native.status()
    if state == "compiled" and not kernels.USE_NATIVE:
        state, detail = "numpy fallback", "hrx_tensor.kernels.USE_NATIVE is False"
    return [("native kernels", "host: hrx_tensor", f"{state} ({', '.join(native.KERNELS)}): {detail}")]
