"""Print a results file as a markdown table (for docs/performance.md).

    python bench/table.py bench/results/h200.json
"""

from __future__ import annotations

import json
import sys


def table(path: str) -> str:
    rows = json.load(open(path))["results"]
    out = ["| id | HRX | peer | peer value | ratio | goal |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        peer_value = "" if r["peer_value"] is None else f"{r['peer_value']:g} {r['unit']}"
        out.append(f"| {r['id']} | {r['hrx']:g} {r['unit']} | {r['peer'] or ''} | {peer_value} | {ratio} | {r['goal'] or ''} |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table(sys.argv[1]))
