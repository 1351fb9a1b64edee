"""Zero-copy interop: DLPack capsules and ``__cuda_array_interface__``.

A view exports its bytes as a 1-D uint8 tensor on the buffer's device. The export
retains the allocation until the consumer's deleter runs, and pending HRX work on
the range is waited for first (the consumer's stream cannot see HRX timelines).
Reinterpret the dtype on the consumer side (``torch.from_dlpack(v).view(torch.float32)``).
"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any

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

# Exports alive: address of the managed tensor -> (struct, shape, allocation)
_live: dict[int, tuple[Any, Any, Any]] = {}
_live_lock = threading.Lock()


@_Deleter
def _delete_managed(ptr: Any) -> None:
    address = ctypes.cast(ptr, ctypes.c_void_p).value
    with _live_lock:
        entry = _live.pop(address or 0, None)
    if entry is not None:
        entry[2].release()


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


def to_dlpack(view: View, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
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
    _wait_pending(view)
    alloc = view.buffer.allocation
    managed = DLManagedTensor()
    shape = (ctypes.c_int64 * 1)(view.length)
    kind, index = dlpack_device(view)
    managed.dl_tensor.data = _pointer(view)
    managed.dl_tensor.device = DLDevice(kind, index)
    managed.dl_tensor.ndim = 1
    managed.dl_tensor.dtype = DLDataType(1, 8, 1)  # kDLUInt, 8 bits
    managed.dl_tensor.shape = shape
    managed.dl_tensor.strides = None
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete_managed
    address = ctypes.addressof(managed)
    alloc.retain()
    with _live_lock:
        _live[address] = (managed, shape, alloc)
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
