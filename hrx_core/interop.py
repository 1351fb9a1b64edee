"""Zero-copy interop: DLPack capsules and ``__cuda_array_interface__``.

A view exports its bytes as a 1-D uint8 tensor on the buffer's device; a
DeviceTensor exports its shape, strides and dtype. The export retains the allocation
(and a tensor's lease) until the consumer's deleter runs, and pending HRX work on
the range is waited for first (the consumer's stream cannot see HRX timelines).
Reinterpret a view's dtype on the consumer side (``torch.from_dlpack(v).view(torch.float32)``).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import InvalidArgument, Unsupported, show

if TYPE_CHECKING:
    from .buffer import View

K_DLCPU = 1
K_DLCUDA = 2
K_DLCUDA_HOST = 3
K_DLROCM = 10
K_DLROCM_HOST = 11
#: The device type of coherent host-visible memory of each GPU device type.
_HOST_KIND = {K_DLCUDA: K_DLCUDA_HOST, K_DLROCM: K_DLROCM_HOST}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

# The destructor gets the dying capsule as a raw pointer: converting it to a Python
# object would resurrect it during deallocation.
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_PyCapsule_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

# Exports alive: address of the managed tensor -> (struct, shape and strides, allocation, extra release)
_live: dict[int, tuple[Any, Any, Any, Callable[[], Any] | None]] = {}

#: DLPack type codes by numpy kind (kDLInt, kDLUInt, kDLFloat, kDLComplex, kDLBool).
_DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_DL_BFLOAT = 4
_live_lock = threading.Lock()


@_Deleter
def _delete_managed(ptr: Any) -> None:
    address = ctypes.cast(ptr, ctypes.c_void_p).value
    with _live_lock:
        entry = _live.pop(address or 0, None)
    if entry is not None:
        entry[2].release()
        if entry[3] is not None:
            entry[3]()


@_CapsuleDestructor
def _destroy_capsule(capsule: Any) -> None:
    # Only an unconsumed capsule still owns its tensor; consumers rename it.
    if _PyCapsule_IsValid(capsule, b"dltensor"):
        address = _PyCapsule_GetPointer(capsule, b"dltensor")
        if address:
            _delete_managed(ctypes.cast(address, ctypes.POINTER(DLManagedTensor)))


def dlpack_device(view: View) -> tuple[int, int]:
    info = view.buffer.device.info
    kind = info.dlpack_device_type
    if view.buffer.shared:
        kind = _HOST_KIND.get(kind, kind)
    return kind, info.index if kind != K_DLCPU else 0


def _pointer(view: View) -> int:
    alloc = view.buffer.allocation
    base = alloc.native.pointer()
    if base is None:
        raise Unsupported(f"{view.buffer.device.name}: buffer memory has no address for native clients")
    return base + view.start


def _wait_pending(view: View) -> None:
    alloc = view.buffer.allocation
    for completion, start, end, _ in alloc.pending_uses():
        if start < view.end and view.start < end:
            completion.wait()


def dl_dtype(dtype: np.dtype) -> DLDataType:
    """The DLPack data type of a numpy dtype (ml_dtypes bfloat16 included)."""
    from ml_dtypes import bfloat16

    if dtype == np.dtype(bfloat16):
        return DLDataType(_DL_BFLOAT, 16, 1)
    code = _DL_CODES.get(dtype.kind)
    if code is None or dtype.fields is not None or dtype.shape != ():
        raise Unsupported(f"DLPack has no type for {dtype}")
    return DLDataType(code, dtype.itemsize * 8, 1)


def to_dlpack(view: View, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None,
              layout: tuple[Sequence[int], Sequence[int], np.dtype] | None = None,
              release: Callable[[], Any] | None = None) -> Any:
    """A DLPack capsule of ``view``: 1-D uint8, or ``layout`` = (shape, byte strides,
    dtype) for a typed tensor. ``release`` runs when the consumer is done (after the
    allocation's reference is dropped); it runs at once if exporting fails."""
    try:
        return _to_dlpack(view, stream, max_version, dl_device, copy, layout, release)
    except BaseException:
        if release is not None:
            release()
        raise


def _to_dlpack(view: View, stream: Any, max_version: Any, dl_device: Any, copy: Any,
               layout: tuple[Sequence[int], Sequence[int], np.dtype] | None, release: Callable[[], Any] | None) -> Any:
    if copy is not None and not isinstance(copy, bool):
        raise InvalidArgument(f"copy: expected None or a bool, got {type(copy).__name__}")
    if copy:
        raise InvalidArgument("copy: HRX exports without copying; copy=True is not supported")
    if stream is not None and (isinstance(stream, bool) or not isinstance(stream, int) or stream < -1):
        raise InvalidArgument(f"stream: expected None, -1 or a stream handle (an int >= 0), got {show(stream)}")
    if max_version is not None and not (isinstance(max_version, tuple) and len(max_version) == 2
                                        and all(type(v) is int for v in max_version)):
        raise InvalidArgument(f"max_version: expected None or a (major, minor) tuple of ints, got {type(max_version).__name__}")
    if dl_device is not None and (not isinstance(dl_device, tuple) or dl_device != dlpack_device(view)):
        raise InvalidArgument(f"dl_device: HRX exports on the buffer's own device {dlpack_device(view)}, got {show(dl_device)}")
    dims: Sequence[int]
    elem_strides: list[int] | None
    if layout is None:
        dims, elem_strides, dtype = (view.length,), None, DLDataType(1, 8, 1)  # kDLUInt, 8 bits
    else:
        dims, byte_strides, np_dtype = layout
        dtype = dl_dtype(np_dtype)
        if any(st % np_dtype.itemsize for st in byte_strides):
            raise Unsupported(f"DLPack strides count elements: byte strides {list(byte_strides)} are not multiples "
                              f"of the {np_dtype.itemsize}-byte {np_dtype}")
        elem_strides = [st // np_dtype.itemsize for st in byte_strides]
    _wait_pending(view)
    alloc = view.buffer.allocation
    managed = DLManagedTensor()
    ndim = len(dims)
    shape = (ctypes.c_int64 * max(ndim, 1))(*dims)
    strides = None if elem_strides is None else (ctypes.c_int64 * max(ndim, 1))(*elem_strides)
    kind, index = dlpack_device(view)
    managed.dl_tensor.data = _pointer(view)
    managed.dl_tensor.device = DLDevice(kind, index)
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype = dtype
    managed.dl_tensor.shape = shape
    managed.dl_tensor.strides = strides
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete_managed
    address = ctypes.addressof(managed)
    alloc.retain()
    with _live_lock:
        _live[address] = (managed, (shape, strides), alloc, release)
    return _PyCapsule_New(address, b"dltensor", _destroy_capsule)


def cuda_array_interface(view: View) -> dict[str, Any]:
    info = view.buffer.device.info
    if info.dlpack_device_type != K_DLCUDA:
        raise AttributeError(f"{view.buffer.device.name} memory is not CUDA memory")
    _wait_pending(view)
    return {
        "shape": (view.length,),
        "typestr": "|u1",
        "data": (_pointer(view), False),
        "strides": None,
        "version": 3,
    }
