"""DeviceTensor: a typed, shaped view of device memory with its producer's completion."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from ml_dtypes import bfloat16

from hrx_core.buffer import Buffer, View
from hrx_core.errors import InvalidArgument, OutOfBounds

if TYPE_CHECKING:
    from hrx_core.completion import Completion
    from hrx_core.stream import Stream

#: Names accepted wherever a dtype is expected, besides numpy dtypes.
DTYPE_NAMES = {"bf16": np.dtype(bfloat16), "bfloat16": np.dtype(bfloat16), "f32": np.dtype(np.float32),
               "float32": np.dtype(np.float32)}


def as_dtype(name: str, value: Any) -> np.dtype:
    if isinstance(value, str) and value in DTYPE_NAMES:
        return DTYPE_NAMES[value]
    try:
        return np.dtype(value)
    except TypeError:
        raise InvalidArgument(f"{name}: {value!r} is not a dtype") from None


class SharedHold:
    """A reference count over one release action (an output slot shared by the
    tensors of one ``linear_many`` call); the action runs when the last closes."""

    __slots__ = ("_count", "_lock", "_release")

    def __init__(self, release: Any, count: int = 1) -> None:
        self._release = release
        self._count = count
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            self._count -= 1
            fire = self._count == 0
        if fire:
            self._release()


class DeviceTensor:
    """A shaped, typed view of device memory (``view`` = buffer + offset).

    ``completion`` completes when the producing work has finished (None for
    tensors wrapped around existing memory). A tensor returned by an operation
    retains its output slot until :meth:`close` (or garbage collection).
    """

    def __init__(
        self,
        view: Buffer | View,
        shape: Sequence[int],
        dtype: Any,
        *,
        strides: Sequence[int] | None = None,
        completion: Completion | None = None,
        stream: Stream | None = None,
        hold: SharedHold | None = None,
    ) -> None:
        if isinstance(view, Buffer):
            view = view.view()
        if not isinstance(view, View):
            raise InvalidArgument(f"view: expected an hrx Buffer or View, got {type(view).__name__}")
        try:
            shape = tuple(int(s) for s in shape)
        except (TypeError, ValueError):
            raise InvalidArgument(f"shape: expected a sequence of ints, got {shape!r}") from None
        if any(s < 0 for s in shape):
            raise InvalidArgument(f"shape: negative extent in {shape}")
        dt = as_dtype("dtype", dtype)
        contiguous = _contiguous_strides(shape, dt.itemsize)
        if strides is None:
            strides = contiguous
        else:
            strides = tuple(int(s) for s in strides)
            if len(strides) != len(shape):
                raise InvalidArgument(f"strides: {strides} does not match shape {shape}")
        span = _span(shape, strides, dt.itemsize)
        if span > view.length:
            raise OutOfBounds(f"shape: {shape} of {dt} spans {span} bytes, the view has {view.length}")
        if strides == contiguous and span != view.length:
            raise InvalidArgument(
                f"shape: {shape} of {dt} is {span} bytes, the view has {view.length} (slice the view to fit)"
            )
        self.view = view
        self.shape: tuple[int, ...] = shape
        self.dtype: np.dtype = dt
        self.strides: tuple[int, ...] = strides
        self.completion = completion
        self.stream = stream
        self._hold = hold
        self._closed = False
        self._contiguous = strides == contiguous

    @classmethod
    def _output(cls, view: View, shape: tuple[int, ...], dtype: np.dtype, completion: Completion,
                stream: Stream, hold: SharedHold) -> DeviceTensor:
        """An operation's contiguous output, built without re-validating what the plan fixed."""
        t = cls.__new__(cls)
        t.view = view
        t.shape = shape
        t.dtype = dtype
        t.strides = _contiguous_strides(shape, dtype.itemsize)
        t.completion = completion
        t.stream = stream
        t._hold = hold
        t._closed = False
        t._contiguous = True
        return t

    @property
    def buffer(self) -> Buffer:
        return self.view.buffer

    @property
    def offset(self) -> int:
        """Byte offset of the first element inside :attr:`buffer`."""
        return self.view.offset

    @property
    def device(self) -> Any:
        return self.view.buffer.device

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def contiguous(self) -> bool:
        return self._contiguous

    @property
    def closed(self) -> bool:
        return self._closed

    def numpy(self) -> np.ndarray:
        """Download the tensor (after its producer) into a new numpy array."""
        if self._closed:
            raise InvalidArgument("tensor is closed")
        stream = self.stream
        if stream is None:
            stream = self.device.stream()
        elif self.completion is not None and self.completion.slot is not stream.slot:
            self.completion.wait()
        raw = stream.download(self.view)
        if self.contiguous:
            return raw.view(self.dtype).reshape(self.shape)
        return np.lib.stride_tricks.as_strided(raw.view(self.dtype), self.shape, self.strides).copy()

    def close(self) -> None:
        """Release the output slot this tensor retains (idempotent)."""
        if not self._closed:
            self._closed = True
            hold, self._hold = self._hold, None
            if hold is not None:
                hold.release()

    def __enter__(self) -> DeviceTensor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<hrx_tensor.DeviceTensor {list(self.shape)} {self.dtype} at {self.view!r}{state}>"


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


def _span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    if any(s == 0 for s in shape):
        return 0
    return sum((s - 1) * abs(st) for s, st in zip(shape, strides)) + itemsize
