"""Interleaved decode rounds of several decoder slots in one process: the shared loop of
the A/B diagnostics (pdl_ab.py, attention_ab.py, occupancy_ab.py), and the decoders they
compare (:func:`decoder_slots`)."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any


def decode_args(doc: str, rounds: int = 7) -> argparse.ArgumentParser:
    """The arguments every decode A/B tool takes (--shapes, --tokens, --rounds, --prompt),
    in a parser described by the first line of ``doc``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--shapes", default="gpt2,1b")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--prompt", type=int, default=16)
    return ap


@contextlib.contextmanager
def decoder_slots(dev: Any, shape: str, context: int, variants: Mapping[str, Callable[[Any], None]],
                  warm: Sequence[int] = (1, 2, 3)) -> Iterator[dict[str, Any]]:
    """One GPT-2 decoder a variant, each of the same random BF16 checkpoint of ``shape``
    (hrx_models.gpt2.SHAPES) with ``context`` positions and one slot: ``configure(decoder)``
    sets its kernels (or the device's settings read when its graphs are built) before
    the slot is acquired and warmed by decoding 4 tokens after ``warm`` (its graphs
    recorded). Yields the slots by label;
    closes the decoders on exit."""
    from hrx_models.gpt2 import SHAPES, Gpt2Decoder, write_random_checkpoint

    decs = []
    try:
        slots = {}
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = write_random_checkpoint(Path(tmp) / shape, SHAPES[shape], seed=0, dtype="bf16")
            for label, configure in variants.items():
                dec = Gpt2Decoder.load(ckpt, dev, context=context, max_slots=1)
                decs.append(dec)
                configure(dec)
                slot = dec.acquire()
                slot.generate(list(warm), 4)  # records and warms the graphs
                slots[label] = slot
        yield slots
    finally:
        for d in decs:
            d.close()


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
