"""Fixtures: every test runs on each engine present (host always; cuda on a GPU machine)."""

from __future__ import annotations

import pytest

import hrx_core as hrx

ENGINES = ["host", "cuda"]


def open_device(name: str):
    if name not in hrx.engines():
        pytest.skip(f"engine {name!r} is not installed")
    status = hrx.engine_status()[name]
    if not status.available:
        pytest.skip(f"engine {name!r} unavailable: {status.reason}")
    return hrx.device(name)


@pytest.fixture(scope="module", params=[pytest.param(n, marks=[pytest.mark.gpu] if n != "host" else [], id=n) for n in ENGINES])
def dev(request):
    return open_device(request.param)


@pytest.fixture(scope="module")
def ops(dev):
    from hrx_tensor import TensorOps

    return TensorOps(dev)
