"""Helpers for conformance tests that run on every engine present (used by the core's
and the plugins' test suites; third-party engines can reuse them).

``engine_params()`` gives one pytest parameter per engine, marking the non-host ones
``gpu``; ``open_device(name)`` opens a device or skips the test with the reason the
engine is missing or unavailable. pytest is imported only when these are called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Engines the conformance suites run on (host always; cuda where a GPU is present).
ENGINES: tuple[str, ...] = ("host", "cuda")


def engine_params(engines: Sequence[str] = ENGINES) -> list[Any]:
    """``pytest.param`` per engine, with the ``gpu`` mark on every engine but the host's."""
    import pytest

    return [pytest.param(n, marks=[pytest.mark.gpu] if n != "host" else [], id=n) for n in engines]


def open_device(name: str, **options: Any) -> Any:
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


__all__ = ["ENGINES", "engine_params", "open_device"]
