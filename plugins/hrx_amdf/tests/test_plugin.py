"""hrx doctor rows of hrx-amdf, and provider selection."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hrx_amdf import provider_kind
from hrx_amdf.plugin import provider_rows
from hrx_core.errors import InvalidArgument


def test_rows_without_libamdf_say_why_and_how(monkeypatch):
    monkeypatch.setenv("HRX_AMDF_LIBRARY", "/nonexistent/libamdf.so")
    monkeypatch.delenv("HRX_AMDF_PROVIDER", raising=False)
    rows = {item: detail for section, item, detail in provider_rows() if section == "amd"}
    assert rows["libamdf"].startswith("unavailable") and "HRX_AMDF_LIBRARY" in rows["libamdf"]
    assert "cannot open devices" in rows["provider"]
    assert "not hardware" in rows["simulated Strix Halo"]


def test_rows_with_the_simulation_list_its_endpoints(monkeypatch):
    monkeypatch.setenv("HRX_AMDF_PROVIDER", "fake")
    rows = {item: detail for section, item, detail in provider_rows() if section == "amd"}
    assert "gfx1151" in rows["fake endpoint gpu"] and "PM4(user)" in rows["fake endpoint gpu"]
    assert "17f0" in rows["fake endpoint xdna"] and "XDNA(kernel)" in rows["fake endpoint xdna"]


def test_provider_kind(monkeypatch):
    monkeypatch.setenv("HRX_AMDF_PROVIDER", "nonsense")
    with pytest.raises(InvalidArgument, match="HRX_AMDF_PROVIDER"):
        provider_kind()
    assert provider_kind("fake") == "fake"
    rows = {item: detail for _, item, detail in provider_rows()}
    assert rows["provider"].startswith("invalid")


def test_doctor_json_lists_the_amd_rows():
    env = {"HRX_AMDF_PROVIDER": "fake", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-m", "hrx_core.cli.main", "doctor", "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    extra = json.loads(out.stdout)["extra"]
    assert any(row[0] == "amd" and "gfx1151" in row[2] for row in extra)
