"""Writing benchmark figures into bench/results/<machine>.json (../shared/BENCH.md), and the
timing helpers the benchmarks share (alternating rounds, per-call cost with the device idle)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
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


#: Set to 1 to let a script write a results file named for another machine.
ANY_FILE_ENV = "HRX_BENCH_ANY_FILE"


class OtherMachineFile(SystemExit):
    """A results file named for another machine was asked for (a one-line exit)."""


def gpu_file(gpu_name: str) -> str:
    """The results file of a machine by its GPU: "NVIDIA H200" -> h200.json."""
    words = re.sub(r"^(nvidia|amd)\s+", "", gpu_name.strip().lower())
    slug = re.sub(r"[^a-z0-9]+", "-", words).strip("-")
    return f"{slug or 'gpu'}.json"


def host_file() -> str:
    """The results file of host-engine figures: host-<cores>core.json (host-2core.json in CI)."""
    return f"host-{os.cpu_count()}core.json"


def machine_file(dev) -> str:
    """The results file for figures measured on ``dev``: its GPU's for the cuda engine,
    else the host's."""
    return gpu_file(dev.info.name) if dev.info.engine == "cuda" else host_file()


def _gpu_names() -> list[str]:
    """The name of this machine's GPU as the cuda engine sees it (device 0, the one the
    benchmarks use; none without a GPU)."""
    import hrx_core as hrx

    status = hrx.engine_status().get("cuda")
    if status is None or not status.available:
        return []
    return [hrx.device("cuda").info.name]


def own_files() -> set[str]:
    """The results files this machine may write: its host file and its GPU's."""
    return {host_file(), *(gpu_file(name) for name in _gpu_names())}


def check_file(name: str) -> Path:
    """The path of ``name`` in bench/results/, refusing (OtherMachineFile) a file
    there that is not named for this machine unless HRX_BENCH_ANY_FILE=1. Paths outside
    bench/results/ (``--out /tmp/x.json``) are the caller's own."""
    path = RESULTS / name
    if path.resolve().parent != RESULTS.resolve() or os.environ.get(ANY_FILE_ENV) == "1":
        return path
    if path.name == host_file() or path.name in own_files():
        return path
    raise OtherMachineFile(
        f"bench: refusing to write bench/results/{path.name}: this machine's results files are "
        f"{', '.join(sorted(own_files()))} (set {ANY_FILE_ENV}=1 to write another machine's file)"
    )


def cuda_machine(dev) -> str:
    """The "machine" line of a cuda device's results file."""
    info = dev.info
    return f"{info.name}, driver {info.properties.get('driver_version', '?')}, {os.cpu_count()} cores"


def write_for(dev, entries: list[dict[str, Any]], out: str | None = None) -> Path:
    """Write ``entries`` into the file of the machine ``dev`` runs on (:func:`machine_file`;
    ``out`` overrides the file name, still refusing another machine's file)."""
    machine = cuda_machine(dev) if dev.info.engine == "cuda" else host_machine()
    return write(out or machine_file(dev), machine, entries)


def rounds(fns, reps):
    """Run each fn once per round, alternating; return the median of each."""
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            samples[i].append(fn())
    return [statistics.median(x) for x in samples]


def idle_per_call(fn: Callable[[int], Any], idle: Callable[[], Any], calls: int,
                  clock: Callable[[], float] = time.perf_counter) -> float:
    """Microseconds per call of ``fn(i)`` (i = 0..calls-1) by ``clock``, each call timed
    on its own after ``idle()`` (untimed: the device drained, so a queue full of earlier
    work never throttles the issuing thread)."""
    total = 0.0
    for i in range(calls):
        idle()
        t = clock()
        fn(i)
        total += clock() - t
    return total / calls * 1e6


def d2d_bandwidth(dev, reps: int) -> float:
    """Median D2D copy bandwidth (read + write bytes, TB/s) of 1 GiB on ``dev``."""
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
    """Replace this script's entries (by id) in the machine file, keeping the others;
    another machine's file is refused (:func:`check_file`)."""
    path = check_file(machine_file)
    path.parent.mkdir(parents=True, exist_ok=True)
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
