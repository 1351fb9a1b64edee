"""Fixtures of the hrx-gpu tests: GPU tests skip cleanly where the engine is unavailable."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gpu: needs an NVIDIA GPU and the CUDA driver (skipped where the cuda engine is unavailable)"
    )


@pytest.fixture(scope="session")
def cuda_engine():  # type: ignore[no-untyped-def]
    from hrx_gpu.cuda.engine import CudaEngine

    return CudaEngine()


@pytest.fixture(scope="session")
def cuda_status(cuda_engine):  # type: ignore[no-untyped-def]
    status = cuda_engine.probe()
    if not status.available:
        pytest.skip(f"cuda engine unavailable: {status.reason}")
    return status


@pytest.fixture(scope="module")
def cuda_device(cuda_engine, cuda_status) -> Iterator:  # type: ignore[no-untyped-def,type-arg]
    device = cuda_engine.open_device(0)
    try:
        yield device
    finally:
        device.close()


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Pretend libcuda is absent (works on GPU machines too)."""
    from hrx_gpu.cuda import _driver, compilers

    monkeypatch.setenv("HRX_LIBCUDA", "/nonexistent/libcuda.so.1")
    _driver.reset_for_tests()
    compilers.default_architecture.cache_clear()
    compilers.salt.cache_clear()
    try:
        yield
    finally:
        monkeypatch.delenv("HRX_LIBCUDA", raising=False)
        _driver.reset_for_tests()
        compilers.default_architecture.cache_clear()
        compilers.salt.cache_clear()
