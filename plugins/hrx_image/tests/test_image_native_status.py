"""The host engine's compiled hrx_image kernels: a fallback to numpy is logged once with the
kernels and the reason, and `hrx doctor` says which path is active."""

from __future__ import annotations

import logging

from hrx_image import kernels, native, plugin


def test_fallback_is_logged_once_and_reported(monkeypatch, caplog):
    monkeypatch.setattr(native, "_libs", {})
    monkeypatch.setattr(native, "_failed", {})

    def no_compiler(sources, folder):
        raise OSError("no C++ compiler (g++ or clang++) found")

    monkeypatch.setattr(native, "build", no_compiler)
    with caplog.at_level("INFO", logger="hrx.kernels"):
        assert native.library(kernels._SOURCES) is None
        assert native.library(kernels._SOURCES) is None  # remembered: said once
    (record,) = [r for r in caplog.records if r.name == "hrx.kernels"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert "hrx_image_normalize" in message and "hrx_image_composite" in message and "no C++ compiler" in message
    (row,) = plugin.hrx_doctor()
    assert row[1] == "host: hrx_image" and row[2].startswith("numpy fallback (hrx_image_normalize")


def test_disabled_is_info_and_compiled_is_reported(monkeypatch, caplog):
    monkeypatch.setattr(native, "_libs", {})
    monkeypatch.setattr(native, "_failed", {})
    monkeypatch.setenv("HRX_IMAGE_NATIVE", "0")
    with caplog.at_level("INFO", logger="hrx.kernels"):
        assert native.status(kernels._SOURCES) == ("numpy fallback", "disabled by HRX_IMAGE_NATIVE=0")
    assert [r.levelno for r in caplog.records if r.name == "hrx.kernels"] == [logging.INFO]
    monkeypatch.delenv("HRX_IMAGE_NATIVE")
    monkeypatch.setattr(native, "_failed", {})
    if native.library(kernels._SOURCES) is not None:
        assert plugin.hrx_doctor()[0][2].startswith("compiled (hrx_image_normalize")
