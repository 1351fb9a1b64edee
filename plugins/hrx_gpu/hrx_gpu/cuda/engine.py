"""The ``cuda`` engine: NVIDIA GPUs through the CUDA driver API.

:class:`CudaEngine` is what the ``hrx_engines`` hook returns. ``probe()`` opens
``libcuda.so.1`` lazily and never raises; ``open_device(i)`` returns a
:class:`~hrx_gpu.cuda.device.CudaDevice`. Options of ``open_device``:

* ``stream_memops`` (bool, default: whatever the driver exports) -- signal and wait
  on timelines with ``cuStreamWriteValue64``/``cuStreamWaitValue64``; ``False``
  selects the host-function/event fallback.
* ``max_transfer_bytes`` (int, at most 4 GiB) -- a smaller single-command limit, so
  that the core's splitting runs in tests.
* ``compute_queues``, ``copy_queues`` (int) -- how many streams each family offers.
"""

from __future__ import annotations

from typing import Any

from hrx_core.engine import Engine, EngineStatus
from hrx_core.errors import EngineNotFound, InvalidArgument

from . import _driver
from .device import CudaDevice, cuda_version_string, driver_release
from .errors import DriverUnavailable


class CudaEngine(Engine):
    """NVIDIA GPUs (CUDA driver API through cffi, kernels through NVRTC)."""

    name = "cuda"
    priority = 100
    default_capable = True

    def probe(self) -> EngineStatus:
        try:
            driver = _driver.load()
            count = driver.device_count()
        except DriverUnavailable as exc:
            return EngineStatus(available=False, reason=str(exc))
        except Exception as exc:  # noqa: BLE001 - probe never raises
            return EngineStatus(available=False, reason=f"{type(exc).__name__}: {exc}")
        if count <= 0:
            return EngineStatus(available=False, reason="the CUDA driver reports no devices")
        release = driver_release()
        version = cuda_version_string(driver.version) + (f", driver {release}" if release else "")
        return EngineStatus(available=True, reason=f"CUDA {version}", device_count=count)

    def open_device(self, index: int, **options: Any) -> CudaDevice:
        unknown = set(options) - CudaDevice.OPTIONS
        if unknown:
            known = ", ".join(sorted(CudaDevice.OPTIONS))
            raise InvalidArgument(f"options: unknown {', '.join(sorted(unknown))} (the cuda engine takes {known})")
        stream_memops = options.get("stream_memops")
        if stream_memops is not None and not isinstance(stream_memops, bool):
            raise InvalidArgument(f"stream_memops: expected a bool or None, got {stream_memops!r}")
        for name in ("max_transfer_bytes", "compute_queues", "copy_queues"):
            value = options.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvalidArgument(f"{name}: expected an int >= 1, got {value!r}")
        try:
            driver = _driver.load()
        except DriverUnavailable as exc:
            raise EngineNotFound(f"cuda: {exc}") from exc
        count = driver.device_count()
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise InvalidArgument(f"index: expected 0 <= index < {count} (CUDA devices), got {index!r}")
        return CudaDevice(driver, index, **options)

    def prepare(self) -> list[str]:
        status = self.probe()
        if not status.available:
            return [f"cuda: unavailable: {status.reason}"]
        lines = []
        for index in range(status.device_count):
            try:
                device = self.open_device(index)
            except Exception as exc:  # noqa: BLE001
                lines.append(f"cuda:{index}: failed to open: {exc}")
                continue
            try:
                info = device.info
                lines.append(
                    f"cuda:{index}: {info.name} ({info.properties['arch']}, {info.memory_bytes / 2**30:.1f} GiB) ready"
                )
            finally:
                device.close()
        try:
            from . import _nvrtc

            nvrtc = _nvrtc.load()
            lines.append(f"cuda: NVRTC {nvrtc.version[0]}.{nvrtc.version[1]} at {nvrtc.path}")
        except Exception as exc:  # noqa: BLE001
            lines.append(f"cuda: NVRTC unavailable: {exc}")
        return lines

    def __repr__(self) -> str:
        return "<CudaEngine>"


__all__ = ["CudaEngine"]
