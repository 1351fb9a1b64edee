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


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python bench/table.py RESULTS.json", file=sys.stderr)
        return 2
    print(table(sys.argv[1]))
    return 0


if __name__ == "__main__":
    from hrx_core.cli.main import run_reporting

    sys.exit(run_reporting("bench/table.py", main))
