"""Logging and progress of the ``hrx`` command and library: the "hrx" logger's records for
plugin failures and the engine device() picks, -v/-vv/--quiet, and progress bars that are
drawn only on a terminal."""

from __future__ import annotations

import importlib.metadata as md
import io
import logging

import pytest

from hrx_core import plugins, progress
from hrx_core.cli.logs import level, verbosity
from hrx_core.cli.main import main
from hrx_core.errors import InvalidArgument


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_bars_are_off_unless_stderr_is_a_terminal(capsys, monkeypatch):
    with progress.bar(total=3, desc="work") as b:  # capsys: stderr is not a terminal
        assert b.disable
        b.update(3)
    assert "work" not in capsys.readouterr().err
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    assert progress.enabled()
    with progress.bar(total=3, desc="work", unit="step") as b:
        assert not b.disable
        b.update(3)
    assert "work:" in tty.getvalue() and "/3" in tty.getvalue()
    previous = progress.set_quiet(True)
    try:
        assert not progress.enabled() and progress.quiet()
        assert progress.bar(total=1, desc="quiet").disable
    finally:
        progress.set_quiet(previous)
    with pytest.raises(InvalidArgument, match="value"):
        progress.set_quiet(1)  # type: ignore[arg-type]


def test_verbosity_is_read_before_parsing():
    assert verbosity(["doctor"]) == (0, False)
    assert verbosity(["-v", "doctor", "--json"]) == (1, False)
    assert verbosity(["-vv", "pipeline"]) == (2, False)
    assert verbosity(["pipeline", "--verbose", "-v", "-q"]) == (2, True)
    assert verbosity(["generate", "--", "-v"]) == (0, False)
    assert [level(0, False), level(1, False), level(2, False), level(3, True)] == [
        logging.WARNING, logging.INFO, logging.DEBUG, logging.ERROR]


@pytest.mark.parametrize("argv", [["-v", "pipeline", "--elements", "1000"], ["pipeline", "--elements", "1000", "-v"]])
def test_verbose_logs_the_engine_choice(argv, capsys, monkeypatch):
    monkeypatch.delenv("HRX_ENGINE", raising=False)
    plugins.reload()  # a device opened now, and logged
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "hrx: INFO: hrx.plugins: device " in err and "the best available engine (priority" in err
    assert logging.getLogger("hrx").level == logging.NOTSET and not logging.getLogger("hrx").handlers  # restored
    plugins.reload()
    assert main(["pipeline", "--elements", "1000"]) == 0  # without -v: no INFO
    assert "INFO" not in capsys.readouterr().err
    plugins.reload()
    assert main(["pipeline", "--elements", "1000", "--engine", "host", "-vv"]) == 0
    assert "device host:0 " in capsys.readouterr().err


def test_quiet_and_verbose_set_the_level(monkeypatch):
    seen = []
    real = logging.Logger.setLevel

    def spy(self, value):
        if self.name == "hrx":
            seen.append(value)
        return real(self, value)

    monkeypatch.setattr(logging.Logger, "setLevel", spy)
    for argv in (["-q", "doctor"], ["doctor", "-vv"], ["doctor"]):
        main([*argv, "--json"])
    assert seen[0::2] == [logging.ERROR, logging.DEBUG, logging.WARNING]


def test_a_plugin_that_fails_to_load_is_logged(monkeypatch, caplog):
    broken = md.EntryPoint(name="hrx-test-broken", value="hrx_test_no_such_module:plugin", group="hrx")
    real = md.entry_points

    def entry_points(**kw):
        found = list(real(**kw))
        return [*found, broken] if kw.get("group") == "hrx" else found

    monkeypatch.setattr(plugins.md, "entry_points", entry_points)
    with caplog.at_level("WARNING", logger="hrx.plugins"):
        reg = plugins.Registry()
    assert [f.name for f in reg.failures] == ["hrx-test-broken"]
    (record,) = [r for r in caplog.records if r.name == "hrx.plugins"]
    assert record.levelno == logging.WARNING
    assert "plugin 'hrx-test-broken'" in record.getMessage() and "ModuleNotFoundError" in record.getMessage()


def test_the_logging_page_runs(caplog):
    """docs/logging.md: its Python block as written logs the engine choice."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "logging.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", page, re.S)
    root = logging.getLogger()
    handlers, hrx_level = list(root.handlers), logging.getLogger("hrx").level
    plugins.reload()  # the block opens a device anew
    try:
        exec(compile(block, "docs/logging.md", "exec"), {})
    finally:
        for h in root.handlers[len(handlers):]:
            root.removeHandler(h)
        logging.getLogger("hrx").setLevel(hrx_level)
    # (under pytest the root logger already has handlers, so basicConfig adds none: caplog sees it)
    assert [r.getMessage().split(" (")[0] for r in caplog.records if r.name == "hrx.plugins"] == ["device host:0"]
