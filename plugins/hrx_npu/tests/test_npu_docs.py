"""docs/npu.md's xdna example runs as written (on the simulated Strix Halo)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "npu.md"


def test_xdna_doc_example_runs(capsys):
    pytest.importorskip("hrx_amdf")
    section = DOC.read_text().split("## The xdna engine", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    exec(compile(blocks[0], str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert "[0. 2. 4. 6.] SPATIAL 1" in out
