"""``hrx demo`` with the amdgpu engine on the simulated Strix Halo: GPU branches on
amdgpu with npu-host, and with xdna (both AMD engines on one simulated machine), every
output checked by the demo itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("npu_engine", ["npu-host", "xdna"])
def test_demo_on_amdgpu(tmp_path, npu_engine):
    env = dict(os.environ, HRX_AMDF_PROVIDER="fake")
    r = subprocess.run(
        [sys.executable, "-m", "hrx_core.cli.main", "demo", "--quick", "--n", "20000", "--m", "16", "--samples", "2",
         "--requests", "2", "--rounds", "1", "--gpu-engine", "amdgpu", "--npu-engine", npu_engine, "--trace", ""],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "GPU side: amdgpu:0" in r.stdout and "simulated Strix Halo" in r.stdout
    assert r.stdout.count("ok:") == 3 and " 0 wrong" in r.stdout and "resident_exchange" in r.stdout, r.stdout  # + resident_exchange
