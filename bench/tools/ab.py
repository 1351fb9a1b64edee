"""Interleaved decode rounds of several decoder slots in one process: the shared loop of
the A/B diagnostics (pdl_ab.py, attention_ab.py)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def interleaved(slots: Mapping[str, Any], prompt: Sequence[int], tokens: int, rounds: int, label: str) -> None:
    """Greedy decode of ``tokens`` tokens after ``prompt`` by each slot in turn, ``rounds``
    times; prints per slot the median tokens/s and us/token, how many greedy tokens agree
    with the first slot's, and every round's rate."""
    rates: dict[str, list[float]] = {key: [] for key in slots}
    toks: dict[str, list[int]] = {}
    for _ in range(rounds):
        for key, slot in slots.items():
            r = slot.generate(prompt, tokens)
            rates[key].append(r.tokens_per_s)
            toks[key] = list(r.tokens)
    first = next(iter(toks.values()))
    for key, rs in rates.items():
        same = sum(a == b for a, b in zip(first, toks[key]))
        print(f"{label} {key}: median {statistics.median(rs):8.1f} tokens/s "
              f"({statistics.median([1e6 / r for r in rs]):7.1f} us/token), tokens agree {same}/{tokens}; "
              "rounds " + " ".join(f"{r:.0f}" for r in rs), flush=True)
