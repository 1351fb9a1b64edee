"""The amdgpu engine's own command encoders: PM4 (:mod:`.pm4`), SDMA (:mod:`.sdma`) and
AQL (:mod:`.aql`). Pure functions from arguments to words, tested against literal
words; they share nothing with the simulated Strix Halo that interprets them."""

from __future__ import annotations

import array
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

MASK32 = 0xFFFFFFFF
_NATIVE_DWORDS = array.array("I").itemsize == 4 and sys.byteorder == "little"


def as_dwords(words: Sequence[int]) -> Any:
    """Words as little-endian dwords, each taken modulo 2**32 as the hardware reads it:
    an ``array.array("I")`` where that is one (a buffer memoryviews copy at C speed),
    else a NumPy ``<u4`` array. Item assignment works on either."""
    if _NATIVE_DWORDS:
        try:
            return array.array("I", words)
        except OverflowError:
            return array.array("I", [w & MASK32 for w in words])
    return np.array([w & MASK32 for w in words], dtype="<u4")
