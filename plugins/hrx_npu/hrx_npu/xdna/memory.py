"""xdna buffers: provider memory the NPU reaches through XDNA DMA addresses.

On Strix Halo the NPU's buffers are system memory (the APU shares it), created
through libamdf with an XDNA_DMA access for the NPU device and mapped for the host
once, for the buffer's life. Ordinary buffers use the cacheable profile: the NPU's
view is not coherent with the host's cache, so host writes are published with a
cache FLUSH and device writes acquired with an INVALIDATE (hrx's cache-control
protocol drives both). Shared buffers use the coherent profile.

**Import protocol.** A native buffer of another engine that is backed by provider
memory exposes it as ``amdf_memory`` (an :class:`hrx_amdf.provider.Memory` of the
same provider; xdna buffers do too). :meth:`XdnaBuffer.imported` exports that memory
(a dma-buf on Linux) and imports it with an XDNA_DMA access -- the spec's
export/import of a GPU allocation, with no host copy.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from hrx_core.engine import CacheOp, NativeBuffer
from hrx_core.errors import DeviceError


@runtime_checkable
class ProviderBacked(Protocol):
    """A native buffer backed by a whole provider memory (the import protocol)."""

    amdf_memory: Any


class XdnaBuffer(NativeBuffer):
    """Provider memory with an NPU access and a persistent host mapping."""

    def __init__(self, memory: Any, *, imported: bool = False, owner: Any = None) -> None:
        from hrx_amdf.constants import AddressKind, MapFlag

        self.amdf_memory = memory
        self.nbytes = memory.info.nbytes
        self.imported = imported
        self._owner = owner  # the device, told when the buffer is freed
        self.dma_address = memory.address(0, AddressKind.XDNA_DMA)
        try:
            self._mapping = memory.map(0, memory.info.nbytes, MapFlag.READ | MapFlag.WRITE)
        except BaseException:
            memory.destroy()
            raise
        #: Whether host access goes through a write-back cache the NPU does not snoop.
        self.cached = self._mapping.info.flush.needed
        self._view: np.ndarray | None = self._mapping.array

    def host_view(self) -> np.ndarray | None:
        view = self._view
        if view is None:
            raise DeviceError("xdna buffer used after free")
        return view

    def pointer(self) -> int | None:
        """The XDNA DMA address: what the NPU (and contract alignment checks) use."""
        return self.dma_address

    def cache_control(self, op: CacheOp, offset: int, length: int) -> None:
        from hrx_amdf.constants import HostCacheOperation

        if self.cached and length:
            self._mapping.cache_control(HostCacheOperation.FLUSH if op is CacheOp.FLUSH else HostCacheOperation.INVALIDATE, offset, length)

    # -- device-side access by the engine's queues (the CPU moving bytes "as the device") --

    def device_bytes(self, offset: int, length: int) -> np.ndarray:
        """The bytes as the NPU sees them, for reading: host cache lines reloaded."""
        if self.cached:
            self.cache_control(CacheOp.INVALIDATE, offset, length)
        return self.host_view()[offset : offset + length]  # type: ignore[index]

    def device_target(self, offset: int, length: int) -> np.ndarray:
        """Where the engine writes bytes "as the device": the host view, its cache
        lines first dropped (they may be stale: the NPU writes memory directly);
        :meth:`device_wrote` then publishes them."""
        if self.cached:
            self.cache_control(CacheOp.INVALIDATE, offset, length)
        return self.host_view()[offset : offset + length]  # type: ignore[index]

    def device_wrote(self, offset: int, length: int) -> None:
        """Publish bytes the engine wrote through :meth:`device_target` as device writes."""
        if self.cached:
            self.cache_control(CacheOp.FLUSH, offset, length)

    def free(self) -> None:
        if self._view is None:
            return
        self._view = None
        try:
            self._mapping.destroy()
        finally:
            self.amdf_memory.destroy()
            if self._owner is not None:
                self._owner._buffer_freed(self)


class HostArrayBuffer(NativeBuffer):
    """A transient wrapper of ordinary host memory for the engine's CPU copies
    (``wrap_host``); it has no NPU address and is never bound to a program."""

    def __init__(self, array: np.ndarray) -> None:
        self.nbytes = array.nbytes
        self._view = array.reshape(-1).view(np.uint8)

    def host_view(self) -> np.ndarray | None:
        return self._view

    def device_bytes(self, offset: int, length: int) -> np.ndarray:
        return self._view[offset : offset + length]

    def device_target(self, offset: int, length: int) -> np.ndarray:
        return self._view[offset : offset + length]

    def device_wrote(self, offset: int, length: int) -> None:
        pass

    def free(self) -> None:
        pass


__all__ = ["HostArrayBuffer", "ProviderBacked", "XdnaBuffer"]
