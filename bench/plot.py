"""Draw the committed benchmark results as pictures: HRX / peer ratios against their goals.

    python bench/plot.py                      # every bench/results/*.json into docs/img/
    python bench/plot.py bench/results/h200.json --out /tmp/img

One PNG per results file and area (the first part of an id: cuda, image, model, ...),
named ``<file>-<area>.png``: a horizontal bar per figure that has a peer, its ratio on a
log scale, the goal as a tick on the bar, green where the goal is met, red where it is
missed and grey where there is no goal (format: ../shared/BENCH.md). Needs matplotlib
(``pip install -e '.[plot]'``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
IMAGES = ROOT / "docs" / "img"
GOAL = re.compile(r"^\s*(<=|>=)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*$")
COLORS = {True: "#2e7d32", False: "#c62828", None: "#9e9e9e"}


def parse_goal(goal: str | None) -> tuple[str, float] | None:
    """``"<= 1.15"`` -> ("<=", 1.15); None for no goal; ValueError for anything else."""
    if goal is None:
        return None
    m = GOAL.match(goal)
    if m is None:
        raise ValueError(f"goal: {goal!r} is neither '<= X' nor '>= X'")
    return m.group(1), float(m.group(2))


def goal_met(ratio: float, goal: str | None) -> bool | None:
    """Whether ``ratio`` meets ``goal`` (None without a goal)."""
    parsed = parse_goal(goal)
    if parsed is None:
        return None
    op, bound = parsed
    return ratio <= bound if op == "<=" else ratio >= bound


def areas(data: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The entries of one results file that have a ratio, by area, sorted by id."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data.get("results", []):
        if r.get("ratio") is not None:
            out[r["id"].split(".", 1)[0]].append(r)
    return {area: sorted(rs, key=lambda r: r["id"]) for area, rs in sorted(out.items())}


def digest(machine: str, entries: list[dict[str, Any]]) -> str:
    """What a picture shows, hashed: stored in its PNG (tEXt "Source") so a test finds a
    picture older than its results."""
    shown = [machine] + [[r["id"], r["ratio"], r.get("goal")] for r in entries]
    return "hrx-bench-plot " + hashlib.sha256(json.dumps(shown).encode()).hexdigest()[:16]


def png_source(path: Path) -> str | None:
    """The "Source" text of a PNG (see :func:`digest`), or None."""
    data = Path(path).read_bytes()
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"tEXt":
            key, _, text = data[pos + 8:pos + 8 + length].partition(b"\0")
            if key == b"Source":
                return text.decode("latin-1")
        pos += 12 + length
    return None


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("bench/plot.py needs matplotlib: pip install -e '.[plot]' (or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw(name: str, machine: str, area: str, entries: list[dict[str, Any]], out: Path) -> Path:
    """One area's ratios as ``out/<name>-<area>.png``."""
    plt = _pyplot()
    height = 1.0 + 0.32 * len(entries)
    fig, ax = plt.subplots(figsize=(9, height), dpi=100)
    ids = [r["id"][len(area) + 1:] for r in entries]
    ratios = [r["ratio"] for r in entries]
    met = [goal_met(r["ratio"], r.get("goal")) for r in entries]
    y = list(range(len(entries)))[::-1]
    ax.barh(y, ratios, color=[COLORS[m] for m in met], height=0.6)
    for yi, r in zip(y, entries):
        parsed = parse_goal(r.get("goal"))
        if parsed is not None:
            ax.plot([parsed[1]] * 2, [yi - 0.4, yi + 0.4], color="black", linewidth=2)
        label = f" {r['ratio']:.3g}" + (f"  (goal {r['goal']})" if parsed else "")
        ax.text(r["ratio"], yi, label, va="center", fontsize=7)
    ax.axvline(1.0, color="#555555", linewidth=0.8, linestyle=":")
    ax.set_xscale("log")
    lo, hi = min([*ratios, 1.0]), max([*ratios, 1.0])
    ax.set_xlim(lo / 1.5, hi * 4)
    ax.set_yticks(y, ids, fontsize=7)
    ax.set_xlabel("HRX / peer (time: lower is better, rate: higher is better); | goal", fontsize=8)
    ax.set_title(f"{name}: {area}  --  {machine}", fontsize=9)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{area}.png"
    fig.savefig(path, metadata={"Software": None, "Source": digest(machine, entries)})
    plt.close(fig)
    return path


def plot_file(path: Path, out: Path) -> list[Path]:
    """Every area of one results file; the PNGs written."""
    data = json.loads(Path(path).read_text())
    name = Path(path).stem
    groups = areas(data)
    for entries in groups.values():  # every goal is checked before anything is drawn
        for r in entries:
            parse_goal(r.get("goal"))
    return [draw(name, data.get("machine", "?"), area, entries, out) for area, entries in groups.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="results files (default: bench/results/*.json)")
    ap.add_argument("--out", type=Path, default=IMAGES, help=f"folder for the PNGs (default: {IMAGES.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    _pyplot()  # the one-line error before reading anything
    files = args.files or sorted(RESULTS.glob("*.json"))
    for f in files:
        try:
            for png in plot_file(f, args.out):
                print(png)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"bench/plot.py: {f}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
