"""Writing benchmark figures into bench/results/<machine>.json (../shared/BENCH.md)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def commit() -> str:
    """The measured commit: HRX_COMMIT (set where the tree has no .git), else git."""
    if os.environ.get("HRX_COMMIT"):
        return os.environ["HRX_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=RESULTS.parent, timeout=10)
        sha = out.stdout.strip()
        # the measured code: results files themselves do not make the tree dirty
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "hrx_core", "plugins", "bench/*.py"], capture_output=True, text=True, cwd=RESULTS.parent.parent, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "") if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def host_machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_for(dev, entries: list[dict[str, Any]], out: str | None = None) -> Path:
    """Write ``entries`` into the file of the machine ``dev`` runs on: h200.json for the
    cuda engine, host-2core.json otherwise (``out`` overrides the file name)."""
    if dev.info.engine == "cuda":
        info = dev.info
        machine = f"{info.name}, driver {info.properties.get('driver_version', '?')}, {os.cpu_count()} cores"
        default = "h200.json"
    else:
        machine, default = host_machine(), "host-2core.json"
    return write(out or default, machine, entries)


def d2d_bandwidth(dev, reps: int) -> float:
    """Median D2D copy bandwidth (read + write bytes, TB/s) of 1 GiB on ``dev``."""
    import statistics
    import time

    s = dev.stream()
    n = 1 << 30
    a, b = dev.allocate(n), dev.allocate(n)
    s.fill(a, pattern=1)
    s.synchronize()

    def d2d() -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            s.copyto(b, a)
        s.synchronize()
        return 2 * n * 5 / (time.perf_counter() - t0) / 1e12

    d2d()
    bw = statistics.median(d2d() for _ in range(reps))
    a.close(), b.close()
    return bw


def entry(id: str, what: str, unit: str, hrx: float, *, peer: str | None = None, peer_value: float | None = None,
          goal: str | None = None, command: str) -> dict[str, Any]:
    ratio = None if peer_value in (None, 0) else round(hrx / peer_value, 4)
    return {
        "id": id,
        "what": what,
        "unit": unit,
        "hrx": round(hrx, 4),
        "peer": peer,
        "peer_value": None if peer_value is None else round(peer_value, 4),
        "ratio": ratio,
        "goal": goal,
        "command": command,
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
    }


def write(machine_file: str, machine: str, entries: list[dict[str, Any]]) -> Path:
    """Replace this script's entries (by id) in the machine file, keeping the others."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / machine_file
    data: dict[str, Any] = {"machine": machine, "results": []}
    if path.exists():
        data = json.loads(path.read_text())
    ids = {e["id"] for e in entries}
    kept = [r for r in data.get("results", []) if r["id"] not in ids]
    data["machine"] = machine
    data["results"] = sorted(kept + entries, key=lambda r: r["id"])
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def report(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        ratio = "" if e["ratio"] is None else f"  ratio {e['ratio']:.3f} (goal {e['goal'] or '-'})"
        peer = "" if e["peer_value"] is None else f"  {e['peer']}: {e['peer_value']:.4g}"
        print(f"{e['id']:<34} {e['hrx']:>10.4g} {e['unit']:<5}{peer}{ratio}", file=sys.stderr if False else sys.stdout)
