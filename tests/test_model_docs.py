"""docs/model.md's first example runs as written (on the host engine)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_model_guide_example_runs(monkeypatch, capsys):
    monkeypatch.setenv("HRX_ENGINE", "host")
    text = (ROOT / "docs" / "model.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 2, "docs/model.md lost its examples"
    exec(compile(blocks[0], "docs/model.md", "exec"), {})
    out = capsys.readouterr().out
    assert "[1.        1.0009775 1.001955 ]" in out
    assert "(1024,) float32" in out
