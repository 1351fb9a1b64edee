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
