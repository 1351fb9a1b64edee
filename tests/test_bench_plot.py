"""bench/plot.py: the committed results drawn as ratios against goals, per area, linked
from docs/performance.md; matplotlib optional with a one-line error."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import plot  # noqa: E402

sys.path.remove(str(BENCH))


def test_goals_parse_and_compare():
    assert plot.parse_goal("<= 1.15") == ("<=", 1.15) and plot.parse_goal(">=3") == (">=", 3.0)
    assert plot.parse_goal(None) is None
    with pytest.raises(ValueError, match="goal"):
        plot.parse_goal("about 2")
    assert plot.goal_met(1.1, "<= 1.15") is True and plot.goal_met(1.2, "<= 1.15") is False
    assert plot.goal_met(0.9, ">= 0.95") is False and plot.goal_met(1.0, ">= 0.95") is True
    assert plot.goal_met(7.0, None) is None


def test_areas_keep_only_figures_with_a_peer():
    data = {"results": [
        {"id": "cuda.b", "ratio": 1.0, "goal": None}, {"id": "cuda.a", "ratio": 2.0, "goal": "<= 1.0"},
        {"id": "model.x", "ratio": None, "goal": None}, {"id": "image.y", "ratio": 0.5, "goal": ">= 1.0"},
    ]}
    got = plot.areas(data)
    assert list(got) == ["cuda", "image"]
    assert [r["id"] for r in got["cuda"]] == ["cuda.a", "cuda.b"]


def test_every_committed_results_file_is_drawn_and_linked():
    """docs/img holds a picture of each area of each committed results file, and
    docs/performance.md shows each of them."""
    page = (ROOT / "docs" / "performance.md").read_text()
    linked = set(re.findall(r"!\[[^\]]*\]\((img/[^)]+\.png)\)", page))
    expected = {}
    for f in sorted((BENCH / "results").glob("*.json")):
        data = json.loads(f.read_text())
        for area, entries in plot.areas(data).items():
            expected[f"img/{f.stem}-{area}.png"] = plot.digest(data["machine"], entries)
    assert expected and set(expected) == linked
    for rel, digest in expected.items():
        assert plot.png_source(ROOT / "docs" / rel) == digest, f"docs/{rel} is older than its results: run python bench/plot.py"


def test_plot_draws_one_png_per_area(tmp_path):
    pytest.importorskip("matplotlib")
    results = tmp_path / "box.json"
    results.write_text(json.dumps({"machine": "a box", "results": [
        {"id": "cuda.dispatch", "ratio": 1.2, "goal": "<= 1.15"}, {"id": "cuda.copy", "ratio": 0.99, "goal": ">= 0.95"},
        {"id": "tensor.linear", "ratio": 3.0, "goal": None}, {"id": "model.plain", "ratio": None, "goal": None},
    ]}))
    assert plot.main([str(results), "--out", str(tmp_path / "img")]) == 0
    names = sorted(p.name for p in (tmp_path / "img").iterdir())
    assert names == ["box-cuda.png", "box-tensor.png"]
    for name in names:
        assert (tmp_path / "img" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cuda = plot.areas(json.loads(results.read_text()))["cuda"]
    assert plot.png_source(tmp_path / "img" / "box-cuda.png") == plot.digest("a box", cuda)


def test_a_bad_goal_is_one_line_and_a_failure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    results = tmp_path / "bad.json"
    results.write_text(json.dumps({"machine": "m", "results": [{"id": "cuda.x", "ratio": 1.0, "goal": "fast"}]}))
    assert plot.main([str(results), "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad.json" in err and "'fast'" in err


def test_without_matplotlib_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(SystemExit) as info:
        plot.main(["--out", str(tmp_path)])
    message = str(info.value)
    assert "\n" not in message and "matplotlib" in message and "[plot]" in message
    assert not any(tmp_path.iterdir())
