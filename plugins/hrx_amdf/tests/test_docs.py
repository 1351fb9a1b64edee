"""docs/amd.md's Python example runs as written (on the simulation)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "amd.md"


def test_amd_doc_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, "docs/amd.md has no Python example"
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})
    text = capsys.readouterr().out
    out = text.split()
    assert out[0] == "gfx1151" and out[1].startswith("0x") and out[2] == "42"
    assert "gfx1151 PM4 (user queues)" in text and "[0. 2. 4. 6.]" in text  # the amdgpu engine's example
