"""Plugin discovery through real entry points, engine selection, doctor."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import plugins

FAKE_PLUGIN = textwrap.dedent(
    '''
    """A third-party engine plugin: the host engine under another name."""
    from hrx_core.hookspecs import hookimpl
    from hrx_core.host.engine import HostDevice, HostEngine


    class FakeEngine(HostEngine):
        name = "fake"
        priority = 50

        def open_device(self, index, **options):
            dev = HostDevice(index, **options)
            object.__setattr__(dev.info, "engine", "fake")
            return dev


    @hookimpl
    def hrx_engines():
        return [FakeEngine()]


    @hookimpl
    def hrx_doctor():
        return [("fake", "status", "fake engine says hello")]
    '''
)


def _write_dist(root, dist, version, entry_name, module, source):
    (root / f"{module}.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[hrx]\n{entry_name} = {module}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("HRX_ENGINE", raising=False)
    yield tmp_path
    monkeypatch.undo()
    for name in ("hrx_fake_plugin", "hrx_broken_plugin", "hrx_cli_plugin"):
        sys.modules.pop(name, None)
    importlib.invalidate_caches()
    plugins.reload()


def test_third_party_plugin_is_discovered_through_entry_point(site):
    _write_dist(site, "hrx-fake-plugin", "1.2.3", "fake", "hrx_fake_plugin", FAKE_PLUGIN)
    importlib.invalidate_caches()
    plugins.reload()
    infos = {p.name: p for p in plugins.plugins()}
    assert infos["fake"].distribution == "hrx-fake-plugin"
    assert infos["fake"].version == "1.2.3"
    assert infos["host"].builtin
    assert "fake" in hrx.engines()
    # the higher-priority third-party engine is now the best device
    dev = hrx.device()
    assert dev.info.engine == "fake"
    s = dev.stream()
    buf = s.allocate_from(np.arange(8, dtype=np.uint8))
    assert s.download(buf).tolist() == list(range(8))


def test_env_variable_forces_engine(site, monkeypatch):
    _write_dist(site, "hrx-fake-plugin", "1.0", "fake", "hrx_fake_plugin", FAKE_PLUGIN)
    importlib.invalidate_caches()
    plugins.reload()
    monkeypatch.setenv("HRX_ENGINE", "host")
    assert hrx.device().info.engine == "host"
    monkeypatch.setenv("HRX_ENGINE", "rocm")
    with pytest.raises(hrx.EngineNotFound) as info:
        hrx.device()
    msg = str(info.value)
    assert "'rocm'" in msg and "HRX_ENGINE" in msg and "fake" in msg and "host" in msg


def test_unknown_engine_lists_installed(site):
    with pytest.raises(hrx.EngineNotFound, match="installed engines: .*host"):
        hrx.device("nonexistent")
    with pytest.raises(hrx.InvalidArgument):
        hrx.device("host", index=3)
    with pytest.raises(hrx.InvalidArgument):
        hrx.device("host", bogus_option=1)


def test_broken_plugin_is_reported_and_others_still_load(site):
    _write_dist(site, "hrx-broken-plugin", "0.1", "broken", "hrx_broken_plugin", "raise ImportError('needs libfoo.so')\n")
    _write_dist(site, "hrx-fake-plugin", "1.0", "fake", "hrx_fake_plugin", FAKE_PLUGIN)
    importlib.invalidate_caches()
    plugins.reload()
    failures = plugins.failures()
    assert [f.name for f in failures] == ["broken"]
    assert "libfoo" in failures[0].error and failures[0].distribution == "hrx-broken-plugin"
    assert "fake" in hrx.engines()


def _hrx(*args, env_path=None):
    env = dict(os.environ)
    env.pop("HRX_ENGINE", None)
    if env_path:
        env["PYTHONPATH"] = os.pathsep.join([str(env_path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "hrx_core.cli.main", *args], capture_output=True, text=True, env=env, timeout=120)


def test_doctor_table_and_json(site):
    _write_dist(site, "hrx-fake-plugin", "1.0", "fake", "hrx_fake_plugin", FAKE_PLUGIN)
    r = _hrx("doctor", env_path=site)
    assert r.returncode == 0, r.stderr
    for word in ("Plugins", "hrx-fake-plugin", "Engines", "Devices", "Queue families", "compute", "copy", "max transfer", "fake engine says hello", "Missing or broken"):
        assert word in r.stdout, word
    r = _hrx("doctor", "--json", env_path=site)
    data = json.loads(r.stdout)
    assert {p["name"] for p in data["plugins"]} >= {"host", "fake"}
    host = next(d for d in data["devices"] if d["engine"] == "host")
    assert {f["name"] for f in host["queue_families"]} == {"compute", "copy"}
    assert host["limits"]["max_transfer_bytes"] == 4 << 30


def test_doctor_fails_when_a_plugin_fails(site):
    _write_dist(site, "hrx-broken-plugin", "0.1", "broken", "hrx_broken_plugin", "raise ImportError('needs libfoo.so')\n")
    r = _hrx("doctor", env_path=site)
    assert r.returncode == 1
    assert "broken" in r.stdout and "libfoo" in r.stdout
    r = _hrx("prepare", env_path=site)
    assert r.returncode == 1 and "libfoo" in r.stdout


def test_prepare_and_pipeline(site):
    r = _hrx("prepare")
    assert r.returncode == 0 and "host" in r.stdout, r.stdout + r.stderr
    import re

    warmed = re.search(r"host: (\d+) plugin kernels ready", r.stdout)
    assert warmed and int(warmed.group(1)) >= 1  # at least hrx_core's own pipeline kernel
    r = _hrx("pipeline", "--engine", "host", "--elements", "5000")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "eager axpy  ok" in r.stdout and "graph x2    ok" in r.stdout
    r = _hrx("pipeline", "--engine", "nope")
    assert r.returncode == 2 and "EngineNotFound" in r.stderr


CLI_PLUGIN = textwrap.dedent(
    '''
    """A third-party plugin adding ``hrx hello`` and trying to replace ``hrx doctor``."""
    from hrx_core.cli import CliCommand
    from hrx_core.errors import InvalidArgument
    from hrx_core.hookspecs import hookimpl


    def _configure(parser):
        parser.add_argument("--times", type=int, default=1)


    def _run(args):
        if args.times < 1:
            raise InvalidArgument(f"--times: must be >= 1, got {args.times}")
        print("hello " * args.times)
        return 0


    @hookimpl
    def hrx_cli_commands():
        return [CliCommand("hello", "say hello", _configure, _run),
                CliCommand("doctor", "an impostor", _configure, _run)]
    '''
)


def test_plugins_add_cli_commands(site):
    _write_dist(site, "hrx-cli-plugin", "1.0", "cli", "hrx_cli_plugin", CLI_PLUGIN)
    r = _hrx("hello", "--times", "2", env_path=site)
    assert r.returncode == 0 and r.stdout.split() == ["hello", "hello"], r.stdout + r.stderr
    assert "second definition of the command 'doctor'" in r.stderr  # built-ins cannot be replaced
    r = _hrx("hello", "--times", "0", env_path=site)
    assert r.returncode == 2 and "InvalidArgument: --times" in r.stderr
    r = _hrx("doctor", "--json", env_path=site)
    assert r.returncode == 0 and json.loads(r.stdout)["plugins"]


SIMULATED_PLUGIN = textwrap.dedent(
    '''
    """An engine on simulated hardware: available, but never the default device."""
    from hrx_core.engine import EngineStatus
    from hrx_core.hookspecs import hookimpl
    from hrx_core.host.engine import HostDevice, HostEngine


    class SimulatedEngine(HostEngine):
        name = "simulated"
        priority = 500

        def probe(self):
            return EngineStatus(True, "a simulation", 1, default=False)

        def open_device(self, index, **options):
            dev = HostDevice(index, **options)
            object.__setattr__(dev.info, "engine", "simulated")
            return dev


    @hookimpl
    def hrx_engines():
        return [SimulatedEngine()]
    '''
)


def test_engine_on_simulated_hardware_is_never_the_default(site, monkeypatch):
    _write_dist(site, "hrx-simulated-plugin", "0.1", "simulated", "hrx_simulated_plugin", SIMULATED_PLUGIN)
    importlib.invalidate_caches()
    plugins.reload()
    try:
        assert "simulated" in hrx.engines()
        assert plugins.best_engine() != "simulated", "a higher priority must not make a simulation the default"
        assert hrx.device("simulated").info.engine == "simulated"  # still usable when named
        monkeypatch.setenv("HRX_ENGINE", "simulated")
        assert plugins.best_engine() == "simulated"
    finally:
        sys.modules.pop("hrx_simulated_plugin", None)
