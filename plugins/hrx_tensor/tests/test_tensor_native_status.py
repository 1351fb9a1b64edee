"""The host engine's compiled hrx_tensor kernels: a fallback to numpy is logged once with the
reason, and `hrx doctor` says which path is active."""

from __future__ import annotations

import logging

import pytest
from hrx_tensor import native, plugin


def _fresh(monkeypatch):
    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setattr(native, "_failed", None)
    monkeypatch.setattr(native, "_index_funcs", None)


def test_fallback_is_logged_once_and_reported(monkeypatch, caplog):
    _fresh(monkeypatch)

    def no_compiler():
        raise OSError("cc: not found")

    monkeypatch.setattr(native, "_build", no_compiler)
    with caplog.at_level("INFO", logger="hrx.kernels"):
        assert not native.available()
        assert not native.available()  # remembered: said once
    (record,) = [r for r in caplog.records if r.name == "hrx.kernels"]
    assert record.levelno == logging.WARNING
    assert "hrx_gemv_bf16" in record.getMessage() and "OSError: cc: not found" in record.getMessage()
    assert "numpy runs them instead" in record.getMessage()
    (row,) = plugin.hrx_doctor()
    assert row[:2] == ("native kernels", "host: hrx_tensor") and row[2].startswith("numpy fallback (hrx_gemv_bf16")
    assert row[2].endswith("OSError: cc: not found")


def test_disabled_is_info(monkeypatch, caplog):
    _fresh(monkeypatch)
    monkeypatch.setenv("HRX_TENSOR_NATIVE", "0")
    with caplog.at_level("INFO", logger="hrx.kernels"):
        assert native.status() == ("numpy fallback", "disabled by HRX_TENSOR_NATIVE=0")
    (record,) = [r for r in caplog.records if r.name == "hrx.kernels"]
    assert record.levelno == logging.INFO


def test_compiled_is_reported(monkeypatch):
    if not native.available():
        pytest.skip(f"the native kernels do not build here: {native.why_unavailable()}")
    (row,) = plugin.hrx_doctor()
    assert row[2].startswith("compiled (hrx_gemv_bf16") and native.status()[1] in row[2]
    monkeypatch.setattr("hrx_tensor.kernels.USE_NATIVE", False)
    assert plugin.hrx_doctor()[0][2].startswith("numpy fallback")
