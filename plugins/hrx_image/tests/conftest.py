"""Fixtures: every test runs on each engine present (host always; cuda on a GPU machine)."""

from __future__ import annotations

import pytest

from hrx_core.testing import engine_params, open_device


@pytest.fixture(scope="module", params=engine_params())
def dev(request):
    return open_device(request.param)


@pytest.fixture(scope="module")
def ops(dev):
    from hrx_image import ImageOps

    return ImageOps(dev)


@pytest.fixture(scope="module")
def host_dev():
    return open_device("host")


@pytest.fixture(scope="module")
def cuda_dev():
    return open_device("cuda")
