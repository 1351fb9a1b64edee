"""The README's example runs as written (on the host engine)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_python_example_runs(monkeypatch, capsys):
    monkeypatch.setenv("HRX_ENGINE", "host")
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert "[0. 2. 4. 6.]" in capsys.readouterr().out


def test_readme_shows_exactly_two_shell_commands():
    text = (ROOT / "README.md").read_text()
    fresh = text.split("## On a fresh machine", 1)[1].split("## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", fresh, re.S)
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in commands[1] and "pytest" in ci
