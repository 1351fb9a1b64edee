"""bench/tools/host_instructions.py: its scenarios run (timed, not counted: no valgrind
needed) on the host engine. It patches the host graph class for its rebind scenario,
so it runs in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hrx_core import fastpath

TOOL = Path(__file__).resolve().parent.parent / "bench" / "tools" / "host_instructions.py"


def test_every_scenario_runs_and_reports_a_time() -> None:
    if not fastpath.module().compiled:
        pytest.skip(f"the core's compiled replay is not built here: {fastpath.module().reason}")
    out = subprocess.run([sys.executable, str(TOOL), "--no-valgrind", "--calls", "50"], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    lines = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in ("replay", "rebind", "resubmit")}
    assert sorted(lines) == ["rebind", "replay", "resubmit"]
    assert all("ns a call" in line for line in lines.values())


def test_an_unknown_scenario_is_refused() -> None:
    done = subprocess.run([sys.executable, str(TOOL), "--what", "nothing"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown" in done.stderr


def test_cold_needs_valgrind() -> None:
    """--cold counts the cache lines a call misses under callgrind's cache simulation:
    timed (--no-valgrind) there is nothing to count, and it says so."""
    done = subprocess.run([sys.executable, str(TOOL), "--what", "replay", "--no-valgrind", "--cold", "--calls", "5"],
                          capture_output=True, text=True, timeout=300)
    if not fastpath.module().compiled:
        pytest.skip(f"the core's compiled replay is not built here: {fastpath.module().reason}")
    assert done.returncode == 2 and "needs valgrind" in done.stderr


@pytest.mark.parametrize("what", ["replay", "resubmit"])
def test_the_cold_child_sweeps_before_every_call(what) -> None:
    """What callgrind runs under --cold: the scenario's calls, each after a sweep over
    all of COLD_SWEEP's bytes (none without --cold). In a process of its own: the
    scenario's buffers live on the shared host device."""
    if not fastpath.module().compiled:
        pytest.skip(f"the core's compiled replay is not built here: {fastpath.module().reason}")

    def child(*extra: str) -> str:
        return subprocess.run([sys.executable, str(TOOL), "--child", what, "--calls", "3", *extra], capture_output=True,
                              text=True, timeout=300, check=True).stdout

    assert f"swept {8 << 20} bytes before each of 3..3 calls" in child("--cold")
    assert "swept" not in child()
