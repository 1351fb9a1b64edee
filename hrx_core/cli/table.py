"""Plain-text tables for the ``hrx`` command that fit a terminal width.

Columns keep their natural width while the table fits; otherwise the widest columns
shrink (never below a few characters) and their cells wrap onto continuation lines.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

#: The width every ``hrx`` table fits (terminals and CI logs of 100 columns).
WIDTH = 100
#: The narrowest a shrunk column becomes.
MIN_COLUMN = 8


def _fit(widths: list[int], width: int, indent: int, gap: int) -> list[int]:
    widths = list(widths)
    room = width - indent - gap * (len(widths) - 1)
    while sum(widths) > room:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        if widths[widest] <= MIN_COLUMN:
            break  # too many columns for the width: the best is every column at its minimum
        widths[widest] = max(MIN_COLUMN, widths[widest] - (sum(widths) - room))
    return widths


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    for part in text.splitlines() or [""]:
        lines.extend(textwrap.wrap(part, width, break_long_words=True, break_on_hyphens=False) or [""])
    return lines


def table(rows: Sequence[Sequence[object]], header: Sequence[str], *, width: int = WIDTH, indent: int = 0,
          gap: int = 2) -> str:
    """``header`` and ``rows`` as aligned columns, at most ``width`` characters a line
    (long cells wrap; short rows are padded with empty cells)."""
    cells = [[str(c) for c in r] + [""] * (len(header) - len(r)) for r in rows]
    natural = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    widths = _fit(natural, width, indent, gap)
    pad = " " * indent
    sep = " " * gap

    def render(row: Sequence[str]) -> list[str]:
        wrapped = [_wrap(c, w) for c, w in zip(row, widths)]
        height = max(len(w) for w in wrapped)
        out = []
        for k in range(height):
            parts = [(w[k] if k < len(w) else "").ljust(cw) for w, cw in zip(wrapped, widths)]
            out.append((pad + sep.join(parts)).rstrip())
        return out

    lines = render(list(header))
    lines.append((pad + sep.join("-" * w for w in widths)).rstrip())
    for r in cells:
        lines.extend(render(r))
    return "\n".join(lines)


__all__ = ["MIN_COLUMN", "WIDTH", "table"]
