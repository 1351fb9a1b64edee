"""`hrx demo` shows a progress bar over its timed samples on a terminal, none otherwise."""

from __future__ import annotations

import io

from hrx_core.cli.main import main

SMALL = ["--quick", "--trace", "", "--n", "256", "--m", "4", "--samples", "2", "--rounds", "2", "--requests", "1",
         "--gpu-engine", "host", "--npu-engine", "npu-host"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_demo_bar_on_a_terminal_only(monkeypatch, capsys):
    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["demo", *SMALL]) == 0
    assert "hrx demo:" in tty.getvalue() and "/4" in tty.getvalue()  # 2 samples + 2 rounds
    quiet = Terminal()
    monkeypatch.setattr("sys.stderr", quiet)
    assert main(["demo", *SMALL, "-q"]) == 0
    assert "sample" not in quiet.getvalue()
    monkeypatch.undo()
    assert main(["demo", *SMALL]) == 0
    assert "sample" not in capsys.readouterr().err  # not a terminal
