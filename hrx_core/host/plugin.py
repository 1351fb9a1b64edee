"""Registers the host engine and the host compiler through the ``hrx`` hooks."""

from __future__ import annotations

from ..hookspecs import hookimpl
from .compiler import HOST_COMPILER
from .engine import HostEngine

_ENGINE = HostEngine()


@hookimpl
def hrx_engines():  # type: ignore[no-untyped-def]
    return [_ENGINE]


@hookimpl
def hrx_compilers():  # type: ignore[no-untyped-def]
    return [HOST_COMPILER]


@hookimpl
def hrx_doctor():  # type: ignore[no-untyped-def]
    """How HRX builds native host code here: each compiler, whether it builds, the
    cache; whether the core's compiled replay (hrx_core.fastpath) is in use, and the
    waits' compiled spin (hrx_core.timeouts.spin_u64)."""
    from .. import fastpath, native, timeouts

    return [*native.doctor_rows(), fastpath.doctor_row(), timeouts.spin_doctor_row()]


@hookimpl
def hrx_kernels(engine):  # type: ignore[no-untyped-def]
    """hrx_core's own kernels (the `hrx pipeline` check), for every engine."""
    from ..cli.pipeline import AXPY

    return {"hrx.axpy": AXPY}
