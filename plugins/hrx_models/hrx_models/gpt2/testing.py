"""Comparison rules for GPT-2 outputs against a reference (used by the tests and the bench).

A reference is anything with ``logits(ids) -> [T, V]`` (logits at every position)
and ``greedy(prompt, n) -> list`` where needed: :class:`~.reference.NumpyGpt2`,
:class:`~.torch_reference.TorchGpt2`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

BF16_ULP = 2.0**-8


def logit_tolerance(ref_logits: np.ndarray) -> float:
    """BF16-level: four BF16 ulps of the largest logit (activations are BF16 on the device)."""
    return 4 * BF16_ULP * float(np.abs(ref_logits).max()) + 1e-3


def check_logits(got: np.ndarray, want: np.ndarray, where: str, *, tolerance: float | None = None) -> None:
    """Assert every logit is within ``tolerance`` (default :func:`logit_tolerance`)."""
    tol = logit_tolerance(want) if tolerance is None else tolerance
    err = np.abs(got.astype(np.float64) - want)
    worst = int(np.argmax(err))
    assert err[worst] <= tol, (
        f"{where}: logits differ by up to {err[worst]:.4g} at token {worst} (device {got[worst]:.6g}, "
        f"reference {want[worst]:.6g}); tolerance {tol:.4g}"
    )


def check_greedy(reference: Any, prompt: Sequence[int], got: Sequence[int], want: Sequence[int]) -> None:
    """Greedy tokens equal the reference's for every step -- or, where the device and
    the reference part ways, the reference forced along the device's tokens finds
    every device choice within the BF16 logit tolerance of its own best (a near-tie,
    warned about). A real bug fails both and the message lists the bad steps."""
    if tuple(got) == tuple(want):
        return
    i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    forced = reference.logits(list(prompt) + list(got[:-1]))[len(prompt) - 1:]
    lines = []
    for step, (tok, logits) in enumerate(zip(got, forced)):
        margin = float(logits.max() - logits[tok])
        if margin > logit_tolerance(logits):
            lines.append(f"step {step}: device chose {tok} ({logits[tok]:.6g}), reference best {int(np.argmax(logits))} "
                         f"({logits.max():.6g}): margin {margin:.3g} > tolerance {logit_tolerance(logits):.3g}")
    logits = forced[i]
    assert not lines, (
        f"greedy tokens differ first at step {i} (device {got[i]}, reference {want[i]}; reference margin there "
        f"{logits[want[i]] - logits[got[i]]:.3g}) and the device's choices are not near-ties:\n" + "\n".join(lines[:5])
        + f"\n device:    {list(got)}\n reference: {list(want)}"
    )
    warnings.warn(f"greedy tokens part ways at step {i} on a near-tie (reference margin "
                  f"{logits[want[i]] - logits[got[i]]:.3g}); every device choice is within BF16 tolerance")


def step_logits(decoder: Any, ids: Sequence[int]) -> np.ndarray:
    """Logits [T, V] of ``decoder`` at every position of ``ids``, one decode step each
    on a pooled slot (the device-side counterpart of a reference's ``logits``)."""
    with decoder.slot() as s:
        s.start(ids)
        out = []
        for _ in ids:
            s.step()
            out.append(s.logits())
    return np.stack(out)
