"""The attack suite: bad arguments, hostile files, concurrency, injected faults, CLI.

Every test runs under a watchdog: if it has not finished within ``WATCHDOG_S`` the
tracebacks of every thread are dumped (faulthandler) and the process exits, so a
deadlock fails CI with the evidence instead of hanging it. Concurrency tests bound
each wait themselves (see :func:`join_all`).
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, settings

import hrx_core as hrx

from . import tally

WATCHDOG_S = float(os.environ.get("HRX_ATTACK_WATCHDOG_S", "120"))

# CI: bounded examples (the suite's budget is a few minutes on 2 cores); locally
# HRX_ATTACK_PROFILE=attack-deep tries many more.
settings.register_profile(
    "attack", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
settings.register_profile(
    "attack-deep", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
#: the settings attack tests use: ``@settings(ATTACK)``
ATTACK = settings.get_profile(os.environ.get("HRX_ATTACK_PROFILE", "attack"))


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def runtime_with_sleeper(nbytes: int, ns: int):
    """A host runtime (no observation), a buffer of ``nbytes`` and a graph whose
    compute region sleeps ``ns`` nanoseconds writing its first word."""
    from hrx_core.execution import Runtime, RuntimeOptions

    from ..kernels import SLEEPY

    rt = Runtime(hrx.open_device("host"), RuntimeOptions(observe=False))
    x = rt.allocate(nbytes)
    g = rt.graph()
    g.compute("sleep", lambda r: r.dispatch(SLEEPY, 1, [x.slice(0, 4)], scalars=(ns,)))
    return rt, x, g


def join_all(threads: Iterable[threading.Thread], timeout: float) -> None:
    """Join ``threads`` within ``timeout`` seconds in total; on a hang dump every
    thread's stack and fail (the deadlock is the finding)."""
    import time

    deadline = time.monotonic() + timeout
    threads = list(threads)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        pytest.fail(f"threads still running after {timeout} s (deadlock?): {stuck}")


def bounded(fn, timeout: float = 10.0):
    """Run ``fn`` on a daemon thread within ``timeout`` seconds and return or re-raise
    its outcome; a hang (a deadlock, a blocking open of a FIFO) fails with every
    thread's stack."""
    out: list = []

    def run():
        try:
            out.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001
            out.append(("err", exc))

    t = threading.Thread(target=run, daemon=True, name="attack-worker")
    t.start()
    join_all([t], timeout)
    kind, value = out[0]
    if kind == "err":
        raise value
    return value


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    totals = tally.totals()
    if not totals:
        return
    grand = sum(sum(v.values()) for v in totals.values())
    entries = len({e for v in totals.values() for e in v})
    terminalreporter.write_line(
        f"attack suite: {grand} inputs tried on {entries} entry points ("
        + ", ".join(f"{c}: {sum(v.values())}" for c, v in totals.items())
        + ")"
    )
    path = os.environ.get("HRX_ATTACK_TALLY")
    if path:
        with open(path, "w") as f:
            json.dump({"inputs": grand, "entry_points": entries, "by_category": totals}, f, indent=1, sort_keys=True)
