from __future__ import annotations

import pytest

from hrx_amdf.constants import EngineKind
from hrx_amdf.fake import FakeOptions, FakeProvider


@pytest.fixture
def provider():
    p = FakeProvider(FakeOptions(vram_bytes=64 << 20, gtt_bytes=256 << 20, poll_seconds=0.0002))
    yield p
    p.shutdown()


@pytest.fixture
def gpu(provider):
    return provider.endpoint(EngineKind.GPU).create_gpu_device()


@pytest.fixture
def npu(provider):
    return provider.endpoint(EngineKind.XDNA).create_xdna_device()
