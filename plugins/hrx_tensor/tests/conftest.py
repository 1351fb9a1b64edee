"""Fixtures: every test runs on each engine present (host always; cuda on a GPU machine)."""

from __future__ import annotations

import pytest

from hrx_core.testing import engine_params, open_device
from tensor_ops_variants import make_ops


@pytest.fixture(scope="module", params=engine_params())
def dev(request):
    return open_device(request.param)


@pytest.fixture(scope="module")
def ops(dev):
    from hrx_tensor import TensorOps

    return TensorOps(dev)


@pytest.fixture(scope="module", params=["params", "ring"])
def gops(dev, request):
    """TensorOps for gather tests, once per index path: indices in the launch's
    parameters (where the device takes them) and in a ring of host-visible memory."""
    return make_ops(dev, param_gather=request.param == "params")


@pytest.fixture(scope="module")
def ring_ops(dev):
    """TensorOps whose gathers read their indices from host-visible memory (the ring)."""
    return make_ops(dev, param_gather=False)
