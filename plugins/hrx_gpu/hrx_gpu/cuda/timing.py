"""Event timing: a CUDA event created with timing enabled, recorded on a stream;
``cuEventElapsedTime`` gives the milliseconds between two of them (as torch.cuda.Event)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from hrx_core.engine import NativeTimestamp
from hrx_core.errors import InvalidArgument

from ._driver import CURRENT, EXIT

if TYPE_CHECKING:
    from .device import CudaDevice

#: cuEventCreate flags: CU_EVENT_DEFAULT (timing enabled, no blocking sync).
CU_EVENT_DEFAULT = 0x0


def _destroy(device: CudaDevice, event: Any) -> None:
    if device.closed or EXIT.exiting:
        return  # the context (and its events) went with the device
    device.driver.lib.cuEventDestroy_v2(event)


class CudaTimestamp(NativeTimestamp):
    """A timing-enabled CUDA event recorded on one of the device's streams."""

    def __init__(self, device: CudaDevice, stream: Any, where: str) -> None:
        driver = device.driver
        lib = driver.lib
        if CURRENT.ctx is not device.ctx:
            device._activate()
        out = driver.ffi.new("CUevent *")
        driver.check(lib.cuEventCreate(out, CU_EVENT_DEFAULT), "cuEventCreate", where)
        code = lib.cuEventRecord(out[0], stream)
        if code:
            lib.cuEventDestroy_v2(out[0])
            driver.check(code, "cuEventRecord", where)
        self.device = device
        self.event = out[0]
        self._finalizer = weakref.finalize(self, _destroy, device, out[0])

    def elapsed_ms(self, end: NativeTimestamp) -> float:
        if not isinstance(end, CudaTimestamp) or end.device is not self.device:
            raise InvalidArgument(f"end: expected a timestamp of cuda:{self.device.index}, got {type(end).__name__}")
        device = self.device
        if CURRENT.ctx is not device.ctx:
            device._activate()
        ms = device.driver.ffi.new("float *")
        device.driver.check(device.driver.lib.cuEventElapsedTime(ms, self.event, end.event), "cuEventElapsedTime",
                            f"cuda:{device.index}")
        return float(ms[0])

    def close(self) -> None:
        self._finalizer()
