"""The engine-author kit: the complete engine of docs/engines.md passes the shipped
conformance suite (``pytest --pyargs hrx_core.conformance --hrx-engine NAME``); hook
names are validated; engine name clashes and default-device choice are explicit; the
engine rules are errors where the core first meets them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import hrx_core as hrx
from hrx_core import plugins, testing
from hrx_core.engine import EngineStatus, Limits
from hrx_core.errors import PluginError, Unsupported
from hrx_core.hookspecs import hookimpl

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "engines.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


@pytest.fixture
def guide() -> types.ModuleType:
    """The guide's engine and hook classes (its first two Python blocks), unregistered."""
    module = types.ModuleType("tiny_guide_classes")
    for block in _blocks()[:2]:
        exec(compile(block, str(GUIDE), "exec"), module.__dict__)
    return module


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch):
    """A fresh registry before and after (tests register plugins in-process)."""
    monkeypatch.delenv("HRX_ENGINE", raising=False)
    plugins.reload()
    yield plugins.registry()
    plugins.reload()


def _plugin(*engines):
    class Plugin:
        @hookimpl
        def hrx_engines(self):
            return list(engines)

    return Plugin()


def test_the_guide_runs_as_written(clean) -> None:
    namespace: dict = {"__name__": "guide"}
    for block in _blocks():
        exec(compile(block, str(GUIDE), "exec"), namespace)
    assert hrx.device("tiny").info.engine == "tiny"


def _pytest_on_the_guide_engine(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in a new process with the guide's engine as the plugin module ``tiny_guide``."""
    (tmp_path / "tiny_guide.py").write_text("\n\n".join(_blocks()[:3]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hrx-engine", "tiny",
         "--hrx-plugin", "tiny_guide", *args],
        cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )


def test_the_guide_engine_passes_the_conformance_suite(tmp_path: Path) -> None:
    out = _pytest_on_the_guide_engine(tmp_path, tmp_path, "--pyargs", "hrx_core.conformance")
    assert out.returncode == 0, out.stdout + out.stderr
    summary = out.stdout.strip().splitlines()[-1]
    assert re.search(r"\b1[0-9] passed\b", summary) and "skipped" not in summary and "failed" not in summary, summary


def test_the_guide_engine_passes_hrx_cores_own_stream_and_buffer_suites(tmp_path: Path) -> None:
    """``--hrx-engine`` reaches this repository's suites too (their conftest parametrizes
    over hrx_core.testing.engines())."""
    out = _pytest_on_the_guide_engine(tmp_path, REPO, "tests/test_streams.py", "tests/test_buffers.py")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and int(re.search(r"(\d+) passed", summary).group(1)) >= 30, summary


def test_hrx_engine_chooses_the_engines_at_run_time() -> None:
    try:
        testing.set_engines(["tiny", "host"])
        assert testing.engines() == ("tiny", "host")
        assert [p.values[0] for p in testing.engine_params()] == ["tiny", "host"]
    finally:
        testing.set_engines(None)
    assert testing.engines() == testing.ENGINES
    with pytest.raises(hrx.InvalidArgument):
        testing.set_engines("host")


def test_a_misspelled_hook_is_an_error_naming_it(clean) -> None:
    class Misspelled:
        @hookimpl
        def hrx_engine(self):  # not hrx_engines
            return []

    with pytest.raises(PluginError, match=r"unknown hook 'hrx_engine' .*hrx_engines"):
        plugins.register(Misspelled(), "misspelled")
    assert not clean.pm.has_plugin("misspelled")


def test_a_misspelled_hook_in_an_installed_plugin_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean) -> None:
    (tmp_path / "hrx_misspelled_plugin.py").write_text(
        "from hrx_core.hookspecs import hookimpl\n\n@hookimpl\ndef hrx_enignes():\n    return []\n"
    )
    info = tmp_path / "hrx_misspelled-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hrx-misspelled\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hrx]\nmisspelled = hrx_misspelled_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reg = plugins.reload()
        [failure] = [f for f in reg.failures if f.name == "misspelled"]
        assert "unknown hook 'hrx_enignes'" in failure.error
        assert not reg.pm.has_plugin("misspelled")
        with pytest.raises(hrx.EngineNotFound, match="plugin 'misspelled' failed to load: .*hrx_enignes"):
            hrx.device("enignes")
    finally:
        sys.modules.pop("hrx_misspelled_plugin", None)


def test_a_plugin_engine_named_host_is_an_error_unless_it_opts_in(clean, guide) -> None:
    class Impostor(guide.TinyEngine):
        name = "host"

    with pytest.raises(PluginError, match=r"engine name 'host' is registered by plugins 'host' and 'impostor' .*replaces_builtin"):
        plugins.register(_plugin(Impostor()), "impostor")
    assert type(hrx.engines()["host"]).__name__ == "HostEngine"

    class Replacement(Impostor):
        replaces_builtin = True

    plugins.register(_plugin(Replacement()), "replacement")
    assert type(hrx.engines()["host"]) is Replacement


def test_two_plugins_registering_one_engine_name_is_an_error(clean, guide) -> None:
    plugins.register(_plugin(guide.TinyEngine()), "first")
    with pytest.raises(PluginError, match=r"engine name 'tiny' is registered by plugins 'first' and 'second'"):
        plugins.register(_plugin(guide.TinyEngine()), "second")
    assert not clean.pm.has_plugin("second") and "tiny" in hrx.engines()


def test_only_default_capable_engines_become_the_default(clean, guide) -> None:
    eager = _engine_with(guide, "eager")
    eager.priority = 10_000  # above every real engine
    plugins.register(_plugin(eager), "eager")
    assert plugins.best_engine() != "eager"  # no opt-in: used only when named
    assert hrx.device("eager").info.engine == "eager"  # named: allowed

    capable = _engine_with(guide, "capable")
    capable.priority, capable.default_capable = 10_000, True
    plugins.register(_plugin(capable), "capable")
    assert plugins.best_engine() == "capable"


def _engine_with(guide, name: str, **changes):
    """A guide engine named ``name`` whose devices get ``changes`` applied."""

    class Variant(guide.TinyEngine):
        def open_device(self, index, **options):
            dev = guide.TinyDevice(index, **options)
            import attrs

            info_changes = {k: v for k, v in changes.items() if k in attrs.fields_dict(type(dev.info))}
            dev.info = attrs.evolve(dev.info, engine=name, **info_changes)
            for key, value in changes.items():
                if key not in info_changes:
                    setattr(dev, key, value.__get__(dev) if hasattr(value, "__get__") else value)
            return dev

    Variant.name = name
    return Variant()


def test_a_device_must_carry_its_engine_name(clean, guide) -> None:
    class Liar(guide.TinyEngine):
        name = "liar"  # its devices still say engine="tiny"

    plugins.register(_plugin(Liar()), "liar")
    with pytest.raises(PluginError, match=r"engine 'liar': DeviceInfo.engine is 'tiny'"):
        hrx.open_device("liar")


def test_bad_alignment_and_ignored_max_transfer_are_errors_at_open(clean, guide) -> None:
    plugins.register(_plugin(_engine_with(guide, "odd", limits=Limits(max_transfer_bytes=1 << 20, alignment=24))), "odd")
    with pytest.raises(PluginError, match=r"Limits.alignment must be a power of two, got 24"):
        hrx.open_device("odd")
    plugins.register(_plugin(_engine_with(guide, "deaf", limits=Limits(max_transfer_bytes=1 << 20))), "deaf")
    with pytest.raises(PluginError, match=r"opened with max_transfer_bytes=4096 but reports Limits.max_transfer_bytes=1048576"):
        hrx.open_device("deaf", max_transfer_bytes=4096)
    assert hrx.open_device("deaf").info.limits.max_transfer_bytes == 1 << 20  # without the option: fine
    plugins.register(_plugin(_engine_with(guide, "aimless", targets=())), "aimless")
    with pytest.raises(PluginError, match=r"DeviceInfo.targets must be a nonempty tuple"):
        hrx.open_device("aimless")
    plugins.register(_plugin(_engine_with(guide, "unmapped", host_memory=True, host_mappable=False)), "unmapped")
    with pytest.raises(PluginError, match=r"DeviceInfo.host_memory needs host_mappable=True"):
        hrx.open_device("unmapped")


def test_misaligned_allocations_are_an_error_at_first_use(clean, guide) -> None:
    class Misaligned(guide.TinyBuffer):
        def __init__(self, nbytes):
            super().__init__(nbytes + 8)
            self.view = self.view[8:]

    def allocate(self, nbytes, *, shared=False):
        return Misaligned(nbytes)

    plugins.register(_plugin(_engine_with(guide, "skewed", allocate=allocate)), "skewed")
    dev = hrx.open_device("skewed")
    with pytest.raises(PluginError, match=r"allocate returned address 0x[0-9a-f]+, not aligned to Limits.alignment=256"):
        dev.allocate(64)
    assert dev.stats.live_bytes == 0 and dev.stats.allocations == 0  # the rejected call changed nothing


def test_host_mappable_without_a_host_view_is_an_error(clean, guide) -> None:
    class Opaque(guide.TinyBuffer):
        def host_view(self):
            return None

        def pointer(self):
            return 0x10000

    def allocate(self, nbytes, *, shared=False):
        return Opaque(nbytes)

    plugins.register(_plugin(_engine_with(guide, "opaque", allocate=allocate)), "opaque")
    with pytest.raises(PluginError, match=r"host_view\(\) returned None for ordinary buffers of a host_mappable device"):
        hrx.open_device("opaque").allocate(64)


def test_the_skeleton_mistakes_are_plugin_errors_not_attribute_errors(clean, guide) -> None:
    """An engine whose methods are still ``...`` (they return None) fails with the rule."""

    def nothing(self, *args, **kwargs):
        return None

    plugins.register(_plugin(_engine_with(guide, "skeleton", allocate=nothing)), "skeleton")
    with pytest.raises(PluginError, match=r"allocate returned NoneType, not an hrx_core.engine.NativeBuffer"):
        hrx.open_device("skeleton").allocate(16)
    plugins.register(_plugin(_engine_with(guide, "noqueue", create_queue=nothing)), "noqueue")
    with pytest.raises(PluginError, match=r"create_queue returned NoneType"):
        dev = hrx.open_device("noqueue")
        dev.stream().fill(dev.allocate(16), 0)


def test_load_executable_must_return_an_executable(clean, guide) -> None:
    def load_executable(self, artifact):
        return artifact  # the Artifact itself, not an Executable

    plugins.register(_plugin(_engine_with(guide, "raw", load_executable=load_executable)), "raw")
    dev = hrx.open_device("raw")
    with pytest.raises(PluginError, match=r"load_executable returned Artifact, not an hrx_core.engine.Executable"):
        dev.stream().dispatch(hrx.Kernel("k", buffers=1, host=lambda x: None), 1, [dev.allocate(16)])


def test_a_custom_target_without_sources_says_how_to_serve_it(clean, guide) -> None:
    plugins.register(_plugin(_engine_with(guide, "myisa", targets=("myisa",))), "myisa")
    dev = hrx.open_device("myisa")
    kernel = hrx.Kernel("k", buffers=1, host=lambda x: None)
    with pytest.raises(Unsupported, match=r"runs myisa .*sources=\{target: \.\.\.\}.*lists 'host' among its targets"):
        dev.stream().dispatch(kernel, 1, [dev.allocate(16)])


def test_simulated_status_still_keeps_an_opted_in_engine_off_the_default(clean, guide) -> None:
    class Simulated(guide.TinyEngine):
        name = "simulated-tiny"
        priority = 10_000
        default_capable = True

        def probe(self):
            return EngineStatus(True, "a simulation", 1, default=False)

    plugins.register(_plugin(Simulated()), "simulated-tiny")
    assert plugins.best_engine() != "simulated-tiny"
