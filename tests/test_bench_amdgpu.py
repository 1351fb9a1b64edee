"""bench/amdgpu.py on the simulated Strix Halo, at a few calls: the four figures are
written, the provider's doorbell is measured apart and excluded, and the doorbell is
put back afterwards."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

import hrx_core as hrx

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_amdgpu_bench_excludes_the_simulated_doorbell(monkeypatch, tmp_path, capsys):
    status = hrx.engine_status().get("amdgpu")
    if status is None or not status.available:
        pytest.skip("the amdgpu engine is unavailable here")
    monkeypatch.setenv("HRX_AMDF_PROVIDER", "fake")
    monkeypatch.syspath_prepend(str(BENCH))
    import amdgpu as bench
    from hrx_amdf.fake.queues import FakeDoorbell

    write = FakeDoorbell.write
    out = tmp_path / "host-test.json"
    monkeypatch.setattr(sys, "argv", ["amdgpu.py", "--reps", "1", "--calls", "3", "--out", str(out)])
    assert bench.main() == 0
    assert FakeDoorbell.write is write  # put back
    printed = capsys.readouterr().out
    medians = ast.literal_eval(printed.split("medians (us): ", 1)[1].split("\n", 1)[0])
    for key in ("prepared", "dispatch", "replay100", "replay100_rebind3"):
        engine, bell, total = (medians[f"{k}.{key}"] for k in ("amdgpu", "fake_doorbell", "with_fake_doorbell"))
        # one round: the figure is the measured total less the doorbell's share
        assert engine > 0 and bell > 0 and engine + bell == pytest.approx(total, abs=2e-3)
    results = {r["id"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) >= {"amdgpu.prepared", "amdgpu.dispatch", "amdgpu.replay100", "amdgpu.replay100_rebind3"}
    assert all("doorbell" in results[k]["what"] and results[k]["hrx"] > 0 for k in results)
