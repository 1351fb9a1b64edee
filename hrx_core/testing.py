"""Helpers for conformance tests that run on every engine present (used by the core's
and the plugins' test suites; third-party engines can reuse them).

``engine_params()`` gives one pytest parameter per engine, marking the ones that need
GPU hardware ``gpu``; ``open_device(name)`` opens a device or skips the test with the
reason the engine is missing or unavailable. pytest is imported only when these are
called. ``amdgpu`` runs wherever its provider does: on the simulated Strix Halo in CI
(``HRX_AMDF_PROVIDER=fake``), on libamdf on a Strix Halo.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .device import Device

#: Engines the conformance suites run on (host always; cuda where a GPU is present;
#: amdgpu where its provider is, the simulation included).
ENGINES: tuple[str, ...] = ("host", "cuda", "amdgpu")
#: Engines whose tests need GPU hardware on the machine (the ``gpu`` marker).
HARDWARE_ENGINES = frozenset({"cuda"})


def engine_params(engines: Sequence[str] = ENGINES) -> list[Any]:
    """``pytest.param`` per engine, with the ``gpu`` mark on engines that need GPU hardware."""
    import pytest

    return [pytest.param(n, marks=[pytest.mark.gpu] if n in HARDWARE_ENGINES else [], id=n) for n in engines]


def open_device(name: str, **options: Any) -> Device:
    """A device of engine ``name``, or ``pytest.skip`` saying why there is none."""
    import pytest

    from . import engine_status, engines
    from .plugins import device

    if name not in engines():
        pytest.skip(f"engine {name!r} is not installed")
    status = engine_status()[name]
    if not status.available:
        pytest.skip(f"engine {name!r} unavailable: {status.reason}")
    return device(name, **options)


__all__ = ["ENGINES", "HARDWARE_ENGINES", "engine_params", "open_device"]
