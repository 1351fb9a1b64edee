"""DeviceTensor: a typed, shaped view of device memory with its producer and lease.

A tensor is metadata (shape, dtype, strides) over a :class:`~hrx_core.View`, plus
what a consumer needs to use it safely: ``completion`` (the producing work; None
for memory that was simply wrapped) and a *hold* -- a lease on the storage, such as
an inference slot's output. While any tensor (or any view derived from it with
:meth:`DeviceTensor.reshape`, :meth:`~DeviceTensor.rows` or
:meth:`~DeviceTensor.share`) is open, the lease stays held: a prepared model does
not reuse the slot's outputs until every consumer closed its views.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np
from ml_dtypes import bfloat16

from ..buffer import Binding, Buffer, View
from ..completion import Completion
from ..errors import InvalidArgument, OutOfBounds, show
from ..finalize import close_later_if_collecting
from ..stream import Stream

if TYPE_CHECKING:
    from ..device import Device

#: Names accepted wherever a dtype is expected, besides numpy dtypes.
DTYPE_NAMES = {"bf16": np.dtype(bfloat16), "bfloat16": np.dtype(bfloat16), "f32": np.dtype(np.float32),
               "float32": np.dtype(np.float32)}


def as_dtype(name: str, value: Any) -> np.dtype[Any]:
    """A numpy dtype of fixed-size elements from a dtype, a numpy name or one of
    :data:`DTYPE_NAMES` (object, string and structured dtypes are refused)."""
    if isinstance(value, str) and value in DTYPE_NAMES:
        named: np.dtype[Any] = DTYPE_NAMES[value]
        return named
    if value is None:  # numpy would read None as float64
        raise InvalidArgument(f"{name}: expected a dtype, got None")
    try:
        dt: np.dtype[Any] = np.dtype(value)
    except (TypeError, ValueError, SyntaxError, RecursionError):
        raise InvalidArgument(f"{name}: {show(value)} is not a dtype") from None
    if dt.hasobject or dt.itemsize == 0 or dt.kind not in "biufcV" or dt.shape != () or dt.fields is not None:
        raise InvalidArgument(f"{name}: {dt} is not a dtype of plain fixed-size elements")
    return dt


#: Most dimensions a tensor may have (numpy's limit), and the largest extent or stride.
MAX_DIMS = 32
MAX_EXTENT = 2**62


def as_shape(name: str, value: Any) -> tuple[int, ...]:
    """A tuple of non-negative ints (an int is a 1-d shape), at most :data:`MAX_DIMS`."""
    return _int_tuple(name, value, minimum=0)


def _int_tuple(name: str, value: Any, *, minimum: int | None) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, np.ndarray)):
        raise InvalidArgument(f"{name}: expected a sequence of ints, got {show(value)}")
    items = list(value)
    if len(items) > MAX_DIMS:
        raise InvalidArgument(f"{name}: {len(items)} dimensions exceed the limit of {MAX_DIMS}")
    if any(isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in items):
        raise InvalidArgument(f"{name}: expected a sequence of ints, got {show(value)}")
    out = tuple(int(s) for s in items)
    if minimum is not None and any(s < minimum for s in out):
        raise InvalidArgument(f"{name}: {list(out)} has an entry below {minimum}")
    if any(abs(s) > MAX_EXTENT for s in out):
        raise InvalidArgument(f"{name}: an entry of {show(list(out))} exceeds {MAX_EXTENT}")
    return out


class SharedHold:
    """A reference count over one release action; it runs when the count drops to 0.

    ``retain()`` adds a reference (a derived view), ``release()`` drops one.
    """

    __slots__ = ("_count", "_lock", "_release")

    def __init__(self, release: Callable[[], Any], count: int = 1) -> None:
        if not callable(release):
            raise InvalidArgument(f"release: expected a callable, got {type(release).__name__}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidArgument(f"count: expected an int >= 1, got {show(count)}")
        self._release: Callable[[], Any] | None = release
        self._count = count
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    def retain(self) -> SharedHold:
        with self._lock:
            if self._count <= 0:
                raise InvalidArgument("hold: already released")
            self._count += 1
        return self

    def release(self) -> None:
        with self._lock:
            if self._count <= 0:
                raise InvalidArgument("hold: released more often than retained")
            self._count -= 1
            fire = self._count == 0
            action, self._release = (self._release, None) if fire else (None, self._release)
        if action is not None:
            action()


def _spec_shape(value: Any) -> tuple[int, ...]:
    return as_shape("shape", value)


def _spec_dtype(value: Any) -> np.dtype[Any]:
    return as_dtype("dtype", value)


@attrs.frozen
class TensorSpec:
    """The declared shape and dtype of a fragment input, output or scratch tensor."""

    shape: tuple[int, ...] = attrs.field(converter=_spec_shape)
    dtype: np.dtype[Any] = attrs.field(converter=_spec_dtype)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @classmethod
    def coerce(cls, name: str, value: Any) -> TensorSpec:
        """A spec from a TensorSpec, a ``(shape, dtype)`` pair or a DeviceTensor."""
        if isinstance(value, TensorSpec):
            return value
        if isinstance(value, DeviceTensor):
            return cls(value.shape, value.dtype)
        if isinstance(value, tuple) and len(value) == 2:
            try:
                return cls(value[0], value[1])
            except InvalidArgument as exc:
                raise InvalidArgument(f"{name}: {exc}") from None
        raise InvalidArgument(f"{name}: expected a TensorSpec or a (shape, dtype) pair, got {show(value)}")

    def matches(self, tensor: DeviceTensor) -> bool:
        return tensor.shape == self.shape and tensor.dtype == self.dtype


class DeviceTensor:
    """A shaped, typed view of device memory (``view`` = buffer + offset).

    ``completion`` completes when the producing work has finished (None for tensors
    wrapped around existing memory). ``hold`` is a lease the tensor keeps until
    :meth:`close` (or garbage collection): an inference slot's output, an
    operation's output buffer. Derived views retain the same lease.
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
        shape = as_shape("shape", shape)
        dt = as_dtype("dtype", dtype)
        contiguous = _contiguous_strides(shape, dt.itemsize)
        if strides is None:
            strides = contiguous
        else:
            # non-negative: the view starts at the first element (negative strides
            # would address bytes before it, outside the view)
            strides = _int_tuple("strides", strides, minimum=0)
            if len(strides) != len(shape):
                raise InvalidArgument(f"strides: {list(strides)} does not match shape {list(shape)}")
        if completion is not None and not isinstance(completion, Completion):
            raise InvalidArgument(f"completion: expected a Completion or None, got {type(completion).__name__}")
        if stream is not None and (not isinstance(stream, Stream) or stream.device is not view.buffer.device):
            raise InvalidArgument(f"stream: expected a Stream of {view.buffer.device.name} or None, got {show(stream)}")
        span = _span(shape, strides, dt.itemsize)
        if span > view.length:
            raise OutOfBounds(f"shape: {shape} of {dt} spans {span} bytes, the view has {view.length}")
        if strides == contiguous and span != view.length:
            raise InvalidArgument(
                f"shape: {shape} of {dt} is {span} bytes, the view has {view.length} (slice the view to fit)"
            )
        if hold is not None and not isinstance(hold, SharedHold):
            raise InvalidArgument(f"hold: expected a SharedHold or None, got {type(hold).__name__}")
        self.view = view
        self.shape: tuple[int, ...] = shape
        self.dtype: np.dtype = dt
        self.strides: tuple[int, ...] = tuple(strides)
        self.completion = completion
        self.stream = stream
        self._hold = hold
        self._closed = False
        self._contiguous = self.strides == contiguous

    @classmethod
    def _output(cls, view: View, shape: tuple[int, ...], dtype: np.dtype, completion: Completion | None,
                stream: Stream | None, hold: SharedHold | None) -> DeviceTensor:
        """An operation's contiguous output whose geometry the operation's plan already
        checked: built without re-validating (the per-call fast path of tensor ops)."""
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

    # -- metadata -----------------------------------------------------------------

    @property
    def buffer(self) -> Buffer:
        return self.view.buffer

    @property
    def offset(self) -> int:
        """Byte offset of the first element inside :attr:`buffer`."""
        return self.view.offset

    @property
    def device(self) -> Device:
        return self.view.buffer.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def contiguous(self) -> bool:
        return self._contiguous

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def hold(self) -> SharedHold | None:
        """The lease this tensor keeps (None for plain wrapped memory)."""
        return self._hold

    @property
    def is_ready(self) -> bool:
        """True when the producing work (if any) has finished."""
        return self.completion is None or self.completion.is_complete

    def wait(self, timeout: float | None = None) -> None:
        """Block until the producing work has finished (raises its failure or Timeout)."""
        if self.completion is not None:
            self.completion.wait(timeout)

    # -- bindings for recording ------------------------------------------------------

    def _open_view(self) -> View:
        if self._closed:
            raise InvalidArgument("tensor is closed")
        return self.view

    def read(self) -> Binding:
        """The tensor's bytes bound for reading (for graph dispatches)."""
        return self._open_view().read()

    def write(self) -> Binding:
        """The tensor's bytes bound for writing."""
        return self._open_view().write()

    def read_write(self) -> Binding:
        """The tensor's bytes bound for reading and writing."""
        return self._open_view().read_write()

    # -- derived views ----------------------------------------------------------------

    def _derive(self, view: View, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None) -> DeviceTensor:
        self._open_view()
        hold = self._hold.retain() if self._hold is not None else None
        try:
            return DeviceTensor(view, shape, dtype, strides=strides, completion=self.completion, stream=self.stream, hold=hold)
        except BaseException:
            if hold is not None:
                hold.release()
            raise

    def share(self) -> DeviceTensor:
        """Another handle on the same view; it retains the same lease until closed."""
        return self._derive(self.view, self.shape, self.dtype, self.strides)

    def reshape(self, *shape: Any, dtype: Any = None) -> DeviceTensor:
        """A contiguous view with another shape (and optionally dtype) of the same bytes."""
        if not self.contiguous:
            raise InvalidArgument(f"reshape: tensor is not contiguous (strides {list(self.strides)})")
        target = as_shape("shape", shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape)
        return self._derive(self.view, target, self.dtype if dtype is None else dtype)

    def rows(self, start: int, count: int) -> DeviceTensor:
        """Rows ``[start, start + count)`` along the first axis (a contiguous tensor)."""
        if not self.contiguous or not self.shape:
            raise InvalidArgument(f"rows: needs a contiguous tensor with at least one axis, got shape {list(self.shape)}")
        from ..buffer import check_int

        start = check_int("start", start)
        count = check_int("count", count, minimum=1)
        if start + count > self.shape[0]:
            raise OutOfBounds(f"rows: [{start}, {start + count}) is outside the {self.shape[0]} rows")
        row = self.strides[0]
        return self._derive(self.view.slice(start * row, count * row), (count, *self.shape[1:]), self.dtype)

    # -- host access ------------------------------------------------------------------

    def numpy(self, stream: Stream | None = None) -> np.ndarray:
        """Download the tensor (after its producer) into a new numpy array."""
        view = self._open_view()
        if stream is not None and (not isinstance(stream, Stream) or stream.device is not self.device):
            raise InvalidArgument(f"stream: expected a Stream of {self.device.name} or None, got {show(stream)}")
        stream = stream or self.stream or self.device.stream()
        if self.completion is not None:
            self.completion.wait()  # raises if the producer failed: never stale bytes
        raw = stream.download(view)
        if self.contiguous:
            return raw.view(self.dtype).reshape(self.shape)
        # np.ndarray checks that the strided extent lies inside the downloaded bytes
        return np.ndarray(self.shape, self.dtype, buffer=raw, strides=self.strides).copy()

    # -- interop ------------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        from ..interop import dlpack_device

        return dlpack_device(self._open_view())

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        """A zero-copy DLPack export with this tensor's shape, strides and dtype (after
        its producer finished: a failed producer raises here). The export keeps the
        memory and the tensor's lease until the consumer releases it."""
        from ..interop import to_dlpack

        view = self._open_view()
        if self.completion is not None:
            self.completion.wait()  # raises if the producer failed: never stale bytes
        hold = self._hold.retain() if self._hold is not None else None
        return to_dlpack(view, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy,
                         layout=(self.shape, self.strides, self.dtype), release=hold.release if hold is not None else None)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """Refused, as CuPy does: the data lives in device memory, and a silent copy (or
        a 0-d object array) hides that; call :meth:`numpy` to download it explicitly."""
        raise TypeError(
            "Implicit conversion of an hrx DeviceTensor to a NumPy array is not allowed: "
            "call tensor.numpy() to download it explicitly (or np.from_dlpack(tensor) for host memory)"
        )

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the lease this tensor keeps (idempotent)."""
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
            if not self._closed and not close_later_if_collecting(self.close):  # (see hrx_core.finalize)
                self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<hrx.DeviceTensor {list(self.shape)} {self.dtype} at {self.view!r}{state}>"


def check_tensor(name: str, value: Any, device: Device) -> DeviceTensor:
    """Validate an argument that must be an open, contiguous DeviceTensor on ``device``."""
    if isinstance(value, (Buffer, View)):
        raise InvalidArgument(f"{name}: a {type(value).__name__} has no shape; wrap it as DeviceTensor(view, shape, dtype)")
    if not isinstance(value, DeviceTensor):
        raise InvalidArgument(f"{name}: expected a DeviceTensor, got {type(value).__name__}")
    if value.closed:
        raise InvalidArgument(f"{name}: tensor is closed")
    if value.device is not device:
        raise InvalidArgument(f"{name}: lives on {value.device.name}, not {device.name}")
    if not value.contiguous:
        raise InvalidArgument(f"{name}: tensor is not contiguous (shape {list(value.shape)}, strides {list(value.strides)})")
    return value


@functools.lru_cache(maxsize=1024)  # per eager op output: a handful of shapes repeat
def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides = []
    step = itemsize
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


def _span(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> int:
    """Bytes from the first element to the end of the farthest one (strides >= 0)."""
    if any(s == 0 for s in shape):
        return 0
    return sum((s - 1) * st for s, st in zip(shape, strides)) + itemsize
