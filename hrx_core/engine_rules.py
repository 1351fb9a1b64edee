"""The rules an engine must follow (docs/engines.md), checked where the core first
meets each one: when a device is opened, on its first allocation of each kind, and
when a queue, timeline or executable is created. A violation is a PluginError that
names the engine, the rule and what was found, instead of a wrong result or an
AttributeError deep inside the core later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .engine import DeviceInfo, EngineDevice, Executable, NativeBuffer, NativeQueue, Timeline
from .errors import PluginError, show

GUIDE = "see docs/engines.md, 'Rules'"


def _fail(engine: str, message: str) -> PluginError:
    return PluginError(f"engine {engine!r}: {message} ({GUIDE})")


def check_device(engine: str, native: Any, options: Mapping[str, Any]) -> None:
    """Rules about the device an engine opened (its ``info``), and the options it was
    opened with. Raises PluginError; the caller closes the device."""
    if not isinstance(native, EngineDevice):
        raise _fail(engine, f"open_device returned {type(native).__name__}, not an hrx_core.engine.EngineDevice")
    info = getattr(native, "info", None)
    if not isinstance(info, DeviceInfo):
        raise _fail(engine, f"the device's info is {type(info).__name__}, not a DeviceInfo")
    if info.engine != engine:
        raise _fail(engine, f"DeviceInfo.engine is {info.engine!r}; it must be the engine's name")
    limits = info.limits
    alignment = limits.alignment
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise _fail(engine, f"Limits.alignment must be a power of two, got {show(alignment)}")
    max_transfer = limits.max_transfer_bytes
    if isinstance(max_transfer, bool) or not isinstance(max_transfer, int) or max_transfer < 1:
        raise _fail(engine, f"Limits.max_transfer_bytes must be an int >= 1, got {show(max_transfer)}")
    asked = options.get("max_transfer_bytes")
    if asked is not None and max_transfer != asked:
        raise _fail(
            engine,
            f"opened with max_transfer_bytes={asked} but reports Limits.max_transfer_bytes={max_transfer}: "
            "the option must set the limit the core splits transfers to",
        )
    targets = info.targets
    if not isinstance(targets, tuple) or not targets or not all(isinstance(t, str) and t for t in targets):
        raise _fail(engine, f"DeviceInfo.targets must be a nonempty tuple of target names, got {show(targets)}")
    if info.host_memory and not info.host_mappable:
        raise _fail(engine, "DeviceInfo.host_memory needs host_mappable=True: the core writes uploads through host_view()")
    families = info.queue_families
    names = [f.name for f in families]
    if not families or len(set(names)) != len(names) or any(f.count < 1 for f in families):
        raise _fail(engine, f"DeviceInfo.queue_families must name each family once, with count >= 1, got {show(families)}")


def check_allocation(engine: str, info: DeviceInfo, buffer: Any, nbytes: int, shared: bool) -> None:
    """Rules about an allocation: a NativeBuffer, aligned to ``Limits.alignment``, with a
    host view where the device promises one (shared memory; ``host_mappable``)."""
    if not isinstance(buffer, NativeBuffer):
        raise _fail(engine, f"allocate returned {type(buffer).__name__}, not an hrx_core.engine.NativeBuffer")
    alignment = info.limits.alignment
    pointer = buffer.pointer()
    if pointer is not None and pointer % alignment:
        raise _fail(engine, f"allocate returned address {pointer:#x}, not aligned to Limits.alignment={alignment}")
    needs_view = shared or info.host_mappable
    if needs_view:
        view = buffer.host_view()
        why = "shared (allocate_shared) memory" if shared else "ordinary buffers of a host_mappable device"
        if view is None:
            raise _fail(engine, f"host_view() returned None for {why}: return a uint8 view, or set host_mappable=False")
        if getattr(view, "nbytes", -1) < nbytes:
            raise _fail(engine, f"host_view() of a {nbytes}-byte allocation has {getattr(view, 'nbytes', '?')} bytes")


def check_queue(engine: str, queue: Any, timeline: Any) -> None:
    if not isinstance(queue, NativeQueue):
        raise _fail(engine, f"create_queue returned {type(queue).__name__}, not an hrx_core.engine.NativeQueue")
    if not isinstance(timeline, Timeline):
        raise _fail(engine, f"create_timeline returned {type(timeline).__name__}, not an hrx_core.engine.Timeline")


def check_executable(engine: str, executable: Any) -> None:
    if not isinstance(executable, Executable):
        raise _fail(engine, f"load_executable returned {type(executable).__name__}, not an hrx_core.engine.Executable")


__all__ = ["check_allocation", "check_device", "check_executable", "check_queue"]
