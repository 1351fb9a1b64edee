"""Hypothesis strategies of bad arguments, by the kind of parameter they attack.

Each strategy yields values a parameter of that kind must refuse: wrong types,
out-of-range numbers, NaN, bools posing as ints, NUL bytes in paths, hostile objects
whose ``__repr__``/``__len__``/``__index__`` raise, deeply nested lists, object
arrays. Values that need the world under test (a closed buffer, a buffer of another
device) are drawn as ``Lazy`` markers the harness resolves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st


class Lazy:
    """A bad value made from the world at call time (``make(world)``)."""

    def __init__(self, name: str, make: Callable[[Any], Any]) -> None:
        self.name = name
        self.make = make

    def __repr__(self) -> str:
        return f"<{self.name}>"


class Hostile:
    """An object whose dunder methods raise: code that pokes at arguments without
    checking their type trips over it."""

    def __repr__(self) -> str:
        return "<Hostile>"

    def __len__(self) -> int:
        raise RuntimeError("hostile __len__")

    def __index__(self) -> int:
        raise RuntimeError("hostile __index__")

    def __float__(self) -> float:
        raise RuntimeError("hostile __float__")

    def __iter__(self) -> Any:
        raise RuntimeError("hostile __iter__")

    def __fspath__(self) -> str:
        raise RuntimeError("hostile __fspath__")


class BadRepr:
    """An object whose ``repr`` raises (error messages must not)."""

    def __repr__(self) -> str:
        raise RuntimeError("hostile __repr__")


class HugeIndex:
    """``__index__`` claims a huge int."""

    def __index__(self) -> int:
        return 2**200


def _nested(depth: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(depth):
        out = [out]
    return out


OBJECTS = st.sampled_from([
    None, object(), Hostile(), Lazy("object with a failing __repr__", lambda w: BadRepr()), HugeIndex(), _nested(500), lambda: None, type, Ellipsis, NotImplemented,
    np.array([object()], dtype=object), np.zeros((2, 3, 4)), np.float64("nan"), np.array(1.5), 1j,
    {"a": 1}, {1, 2}, frozenset(), range(3), bytearray(b"x"), memoryview(b"xy"), b"\xff\xfe", "\x00", "é" * 5,
    "x" * 10_000, [], (), [None], [[1, 2], [3]], (1, "a"),
])
BOOLS = st.sampled_from([True, False, np.bool_(True)])
FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.5, 1.0, 1e300, np.float32(2.0), np.float64("nan")])
HUGE = st.sampled_from([2**63, 2**64, 2**100, -(2**63) - 1, 10**30])
STRINGS = st.one_of(st.sampled_from(["", "x", "\x00", "a/b", "../..", " ", "read ", "é", "1"]), st.text(max_size=5))


def not_int() -> st.SearchStrategy[Any]:
    """Anything that is not a plain integer."""
    return st.one_of(OBJECTS, BOOLS, FLOATS, STRINGS, st.binary(max_size=4))


def bad_count(minimum: int = 0, maximum: int | None = None) -> st.SearchStrategy[Any]:
    """Values an int parameter in ``minimum..maximum`` refuses."""
    parts = [not_int(), HUGE.filter(lambda v: v < minimum or (maximum is not None and v > maximum))]
    parts.append(st.integers(max_value=minimum - 1, min_value=minimum - 2**40))
    if maximum is not None:
        parts.append(st.integers(min_value=maximum + 1, max_value=maximum + 2**40))
    return st.one_of(*parts)


def bad_timeout() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([math.nan, -1, -1e-9, -math.inf, "1", True, [1], 1j]), OBJECTS.filter(lambda v: v is not None))


def bad_name() -> st.SearchStrategy[Any]:
    """Values a name parameter (a nonempty str) refuses."""
    return st.one_of(OBJECTS.filter(lambda v: not isinstance(v, str) or not v), st.just(""), BOOLS,
                     st.integers(), FLOATS)


def bad_path() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(["", "\x00", "a\x00b", b"a\x00b", Hostile(), None, 3, 2**70, 1.5, [], object()]))


def bad_callable() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from([None, 1, "f", b"f", [], {}, object(), np.array(1)]), BOOLS)


def bad_sequence() -> st.SearchStrategy[Any]:
    """Values a list parameter refuses outright (not sequences at all)."""
    return st.sampled_from([None, 1, 1.5, object(), Hostile(), True, {1: 2}, iter([1]), np.float64(1)])


def bad_dtype() -> st.SearchStrategy[Any]:
    return st.sampled_from([None, "abc", "O", object, [("a", "f4")], "U4", "S3", 5, 1.5, Hostile(), "datetime64[s]",
                            np.dtype("O"), "f4,f4", "(2,3)f4", dict])


def bad_shape() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from([None, "12", b"12", 1.5, (1.5,), (-1,), (2, -3), (True,), ((1,),), Hostile(), [Hostile()],
                         tuple(range(1, 40)), (2**63, 2**63), {1: 2}, np.array([[1, 2]])]),
        st.lists(st.integers(max_value=-1), min_size=1, max_size=3),
    )


def bad_bool() -> st.SearchStrategy[Any]:
    return st.sampled_from([None, 0, 1, "True", "", 1.0, [], object(), np.array([True, False])])


def bad_bindable(*, tensors: bool = False) -> st.SearchStrategy[Any]:
    """Values a Buffer/View/Binding parameter refuses: other types, and buffers it must
    not take (closed, of another device; a DeviceTensor unless ``tensors``, as fills
    take one)."""
    return st.one_of(
        st.sampled_from([None, 1, "buf", b"\x00" * 8, np.zeros(8, np.uint8), [], Hostile(), memoryview(b"12345678")]),
        st.sampled_from([
            Lazy("closed buffer", lambda w: w.closed_buffer()),
            Lazy("buffer of another device", lambda w: w.foreign_buffer()),
            *([] if tensors else [Lazy("device tensor", lambda w: w.tensor())]),
        ]),
    )


def bad_host_data() -> st.SearchStrategy[Any]:
    """Values a host-data parameter (numpy array or bytes-like, nonempty) refuses."""
    return st.sampled_from([None, 1, "text", [1, 2], b"", np.zeros(0, np.uint8), np.array([object()]), Hostile(), object(),
                            {1: 2}, 1.5])


def show(value: Any) -> str:
    from hrx_core.errors import show as _show

    return _show(value)


def resolve(value: Any, world: Any) -> Any:
    return value.make(world) if isinstance(value, Lazy) else value


__all__ = [
    "Hostile", "HugeIndex", "Lazy", "OBJECTS", "bad_bindable", "bad_bool", "bad_callable", "bad_count", "bad_dtype",
    "bad_host_data", "bad_name", "bad_path", "bad_sequence", "bad_shape", "bad_timeout", "not_int", "resolve",
]
