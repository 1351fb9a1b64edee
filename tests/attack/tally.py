"""What the attack suite tried: inputs per category and entry point.

Every attack test counts the inputs it feeds the public API (``tried``); the
suite's conftest prints the totals at the end of the run and, with
``HRX_ATTACK_TALLY=path``, writes them as JSON (the counts the issue reports).
"""

from __future__ import annotations

import collections
import threading

_lock = threading.Lock()
#: (category, entry point) -> inputs tried
COUNTS: collections.Counter[tuple[str, str]] = collections.Counter()


def tried(category: str, entry: str, n: int = 1) -> None:
    """Count ``n`` inputs of ``category`` fed to ``entry``."""
    with _lock:
        COUNTS[(category, entry)] += n


def totals() -> dict[str, dict[str, int]]:
    """Inputs by category, then by entry point."""
    out: dict[str, dict[str, int]] = {}
    with _lock:
        for (category, entry), n in sorted(COUNTS.items()):
            out.setdefault(category, {})[entry] = n
    return out
