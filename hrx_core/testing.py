"""Helpers for conformance tests that run on every engine present (used by the core's
and the plugins' test suites; third-party engines can reuse them).

``engine_params()`` gives one pytest parameter per engine, marking the ones that need
GPU hardware ``gpu``; ``open_device(name)`` opens a device or skips the test with the
reason the engine is missing or unavailable. pytest is imported only when these are
called. The engines are :data:`ENGINES` unless a run chooses others:
``pytest --hrx-engine NAME`` (repeatable; the ``hrx`` pytest plugin) or
:func:`set_engines`. ``amdgpu`` runs wherever its provider does: on the simulated Strix Halo in CI
(``HRX_AMDF_PROVIDER=fake``), on libamdf on a Strix Halo.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .errors import InvalidArgument, show
from .kernel import Kernel

if TYPE_CHECKING:
    from .device import Device

#: The default engines the conformance suites run on (host always; cuda where a GPU is
#: present; amdgpu where its provider is, the simulation included).
ENGINES: tuple[str, ...] = ("host", "cuda", "amdgpu")
#: Engines whose tests need GPU hardware on the machine (the ``gpu`` marker).
HARDWARE_ENGINES = frozenset({"cuda"})

_selected: tuple[str, ...] | None = None


def set_engines(names: Sequence[str] | None) -> None:
    """Choose the engines the suites run on (``None``: back to :data:`ENGINES`). The
    pytest plugin calls it for ``--hrx-engine NAME`` before test modules are collected."""
    global _selected
    if names is None:
        _selected = None
        return
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise InvalidArgument(f"names: expected a sequence of engine names, got {show(names)}")
    _selected = tuple(dict.fromkeys(names))


def engines() -> tuple[str, ...]:
    """The engines the suites run on now: those chosen with :func:`set_engines`
    (``pytest --hrx-engine NAME``), else :data:`ENGINES`."""
    return _selected if _selected is not None else ENGINES


def engine_params(engines: Sequence[str] | None = None) -> list[Any]:
    """``pytest.param`` per engine (default: :func:`engines`, read at call time), with
    the ``gpu`` mark on engines that need GPU hardware."""
    import pytest

    names = _current() if engines is None else engines
    return [pytest.param(n, marks=[pytest.mark.gpu] if n in HARDWARE_ENGINES else [], id=n) for n in names]


_current = engines


_ADD_U32_CUDA = r"""
extern "C" __global__ void add_u32(unsigned int* data, unsigned int value, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += value;
}
"""


def _add_u32(data: np.ndarray, value: np.uint32, n: np.uint32) -> None:
    data.view(np.uint32)[:n] += value


#: A test kernel with host and CUDA sources: ``data[i] += value`` for the first ``n``
#: uint32 elements (the shipped conformance suite and hrx-core's tests use it).
ADD_U32 = Kernel("add_u32", buffers=("read_write",), scalars=(np.uint32, np.uint32), host=_add_u32, cuda=_ADD_U32_CUDA)


#: A record scalar (passed by value): eight uint32 values.
RECORD8 = np.dtype([("v", np.uint32, (8,))])

_COPY_RECORD_CUDA = r"""
struct Record8 { unsigned int v[8]; };
extern "C" __global__ void copy_record(unsigned int* out, const __grid_constant__ Record8 record) {
    if (threadIdx.x < 8) out[threadIdx.x] = record.v[threadIdx.x];
}
"""


def _copy_record(out: np.ndarray, record: np.void) -> None:
    out.view(np.uint32)[:8] = record["v"]


#: A test kernel taking a record scalar (:data:`RECORD8`) by value: ``out[0:8] = record.v``.
COPY_RECORD = Kernel("copy_record", buffers=("write",), scalars=(RECORD8,), host=_copy_record, cuda=_COPY_RECORD_CUDA)


def record8(values: Any) -> np.void:
    """A :data:`RECORD8` value holding ``values`` (eight integers)."""
    rec = np.zeros((), RECORD8)
    rec["v"] = values
    return cast(np.void, rec[()])  # (numpy's stubs type rec[()] as an array)


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


__all__ = ["ADD_U32", "COPY_RECORD", "ENGINES", "RECORD8", "record8", "HARDWARE_ENGINES", "engine_params", "engines", "open_device", "set_engines"]
