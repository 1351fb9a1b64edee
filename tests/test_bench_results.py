"""bench/results_file.py: figures go to the file named for the machine they ran on, and a
script never overwrites another machine's file (unless HRX_BENCH_ANY_FILE=1)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import hrx_core as hrx

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import results_file as rf  # noqa: E402

sys.path.remove(str(BENCH))


@pytest.fixture
def results(tmp_path, monkeypatch):
    """bench/results/ moved to a temporary folder holding another machine's h200.json,
    on a 2-core machine without a GPU."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "h200.json").write_text(json.dumps({"machine": "NVIDIA H200, 16 cores", "results": [{"id": "cuda.x"}]}))
    monkeypatch.setattr(rf, "RESULTS", folder)
    monkeypatch.setattr(rf.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(rf, "_gpu_names", lambda: [])
    monkeypatch.delenv(rf.ANY_FILE_ENV, raising=False)
    monkeypatch.setenv("HRX_COMMIT", "abc1234")
    return folder


def figure(id: str) -> dict:
    return rf.entry(id, "a figure", "us", 1.0, command="python bench/x.py")


def test_file_names_come_from_the_hardware(monkeypatch):
    assert rf.gpu_file("NVIDIA H200") == "h200.json"
    assert rf.gpu_file("NVIDIA GeForce RTX 4090") == "geforce-rtx-4090.json"
    assert rf.gpu_file("AMD Radeon 8060S (gfx1151)") == "radeon-8060s-gfx1151.json"
    monkeypatch.setattr(rf.os, "cpu_count", lambda: 16)
    assert rf.host_file() == "host-16core.json"
    assert rf.machine_file(hrx.device("host")) == "host-16core.json"
    cuda = SimpleNamespace(info=SimpleNamespace(engine="cuda", name="NVIDIA H200"))
    assert rf.machine_file(cuda) == "h200.json"


def test_another_machines_file_is_refused_and_left_alone(results):
    before = (results / "h200.json").read_bytes()
    with pytest.raises(rf.OtherMachineFile) as info:
        rf.write("h200.json", "AMD EPYC, 2 cores", [figure("host.y")])
    message = str(info.value)
    assert "\n" not in message and "h200.json" in message and "host-2core.json" in message and rf.ANY_FILE_ENV in message
    assert (results / "h200.json").read_bytes() == before
    with pytest.raises(rf.OtherMachineFile):  # the host file of a 16-core machine is another machine's too
        rf.write("host-16core.json", "AMD EPYC, 2 cores", [figure("host.y")])
    assert sorted(p.name for p in results.iterdir()) == ["h200.json"]


def test_own_file_keeps_the_other_entries(results):
    path = rf.write_for(hrx.device("host"), [figure("host.a"), figure("host.b")])
    assert path == results / "host-2core.json"
    rf.write_for(hrx.device("host"), [figure("host.b")])
    assert [r["id"] for r in json.loads(path.read_text())["results"]] == ["host.a", "host.b"]


def test_a_gpu_machine_writes_its_gpu_file(results, monkeypatch):
    monkeypatch.setattr(rf, "_gpu_names", lambda: ["NVIDIA H200"])
    rf.write("h200.json", "NVIDIA H200, 16 cores", [figure("cuda.y")])
    assert [r["id"] for r in json.loads((results / "h200.json").read_text())["results"]] == ["cuda.x", "cuda.y"]


def test_told_or_outside_results_is_allowed(results, monkeypatch, tmp_path):
    elsewhere = tmp_path / "scratch.json"
    assert rf.write(str(elsewhere), "AMD EPYC, 2 cores", [figure("host.y")]) == elsewhere
    monkeypatch.setenv(rf.ANY_FILE_ENV, "1")
    rf.write("h200.json", "NVIDIA H200, 16 cores", [figure("cuda.z")])
    assert "cuda.z" in (results / "h200.json").read_text()


@pytest.mark.gpu
def test_the_gpu_machine_owns_its_gpu_file():
    status = hrx.engine_status().get("cuda")
    if status is None or not status.available:
        pytest.skip("needs the cuda engine")
    name = rf.machine_file(hrx.device("cuda"))
    assert name == rf.gpu_file(hrx.device("cuda").info.name) and name in rf.own_files()
    assert rf.check_file(name) == rf.RESULTS / name  # this machine may write it


def test_rounds_alternate_and_take_medians():
    order: list[str] = []

    def make(name, values):
        it = iter(values)
        return lambda: (order.append(name), next(it))[1]

    assert rf.rounds([make("a", [3, 1, 2]), make("b", [10, 30, 20])], 3) == [2, 20]
    assert order == ["a", "b"] * 3


def test_idle_per_call_times_each_call_after_idle():
    """idle() runs before every call, untimed; the clock's ticks inside the calls are what count."""
    events: list[object] = []
    ticks = iter(range(0, 100, 1))
    clock = lambda: next(ticks) * 1e-6  # noqa: E731 - one microsecond a reading
    us = rf.idle_per_call(events.append, lambda: events.append("idle"), 3, clock=clock)
    assert events == ["idle", 0, "idle", 1, "idle", 2]
    assert us == pytest.approx(1.0)  # each call spans one tick of the clock
