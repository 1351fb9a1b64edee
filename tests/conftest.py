"""Shared fixtures: the conformance suite runs every test on every engine present."""

from __future__ import annotations

import contextlib
import threading

import pytest

import hrx_core as hrx

from hrx_core.testing import ENGINES, engine_params, open_device  # noqa: F401 - tests import these from here


@pytest.fixture(params=engine_params())
def engine(request) -> str:
    return request.param


@pytest.fixture
def dev(engine):
    """A device of each engine present (host always; cuda on a GPU machine)."""
    return open_device(engine)


@pytest.fixture
def small_dev(engine):
    """A device whose single-command transfer limit is tiny, so splitting runs."""
    return open_device(engine, max_transfer_bytes=4096)


@pytest.fixture
def stream(dev):
    s = dev.stream()
    yield s
    try:
        s.synchronize(timeout=60)
    except hrx.HRXError:
        pass


def live_bytes(dev) -> int:
    """Tracked live bytes after collecting garbage from earlier tests and retiring
    deferred frees of work that already finished (on every queue; nothing waits)."""
    import gc

    gc.collect()
    dev._retire_finished()
    return dev.stats.live_bytes


def count_calls(monkeypatch, cls, name: str) -> list[int]:
    """Count calls of method ``name`` of ``cls`` (still calling it): a one-element list."""
    calls = [0]
    real = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def compiled_or_python(mode: str, monkeypatch, off) -> str:
    """For tests run with the core's compiled extension (hrx_core.fastpath), then
    without it: in "compiled" mode skip where it cannot be built here; in "python" mode
    call ``off(monkeypatch)`` to keep the compiled path from being made."""
    from hrx_core import fastpath

    monkeypatch.delenv("HRX_HOT_PATH", raising=False)
    if mode == "compiled":
        mod = fastpath.module()
        if not mod.compiled:
            pytest.skip(f"hrx_core.fastpath not built here: {mod.reason}")
    else:
        off(monkeypatch)
    return mode


def run_threads(n, target, timeout=10.0):
    """Run ``target(i)`` on ``n`` threads at once; fail if one is still running after
    ``timeout`` seconds or raised (the first exception is raised here)."""
    errors = []

    def run(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


@contextlib.contextmanager
def collector_off():
    """Free earlier tests' garbage now (closes queued by finalizers included, see
    hrx_core.finalize) and keep the cyclic collector off inside: no free moves the
    launch records' epoch, or runs a finalizer, at a point the test did not choose."""
    import gc

    from hrx_core import finalize

    gc.collect()
    finalize.drain()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def lock_held_elsewhere(lock, timeout=60.0):
    """Hold ``lock`` on another thread while the block runs; yields the Event that lets
    it go (set on exit at the latest, then the thread is joined)."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(timeout)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(timeout)
    try:
        yield release
    finally:
        release.set()
        t.join(timeout)
