"""The ``amdgpu`` engine: AMD gfx1151 GPUs (Strix Halo) through hrx_amdf's provider.

``HRX_AMDF_PROVIDER`` (or the ``provider`` option) selects libamdf -- the default, on a
Strix Halo -- or the simulated Strix Halo, a test fixture. On the simulation the
engine is available but never the default device: name it (``HRX_ENGINE=amdgpu`` or
``hrx.device("amdgpu")``). Options of ``open_device``:

* ``provider`` ("libamdf" or "fake") -- overrides ``HRX_AMDF_PROVIDER``;
* ``compute_engine`` ("pm4", the default, or "aql") -- the compute queues' format;
* ``max_private_bytes`` (int) -- AQL scratch per lane (the spec's
  ``ComputeEngine::Aql { maximum_private_bytes }``);
* ``max_transfer_bytes`` (int, at most 1 GiB) -- a smaller single-command limit so the
  core's splitting runs in tests;
* ``compute_queues``, ``copy_queues`` (int) -- queues per family.
"""

from __future__ import annotations

from typing import Any

from hrx_core.engine import Engine, EngineStatus
from hrx_core.errors import EngineNotFound, InvalidArgument


class AmdgpuEngine(Engine):
    """AMD gfx1151 GPUs through libamdf (or the simulated Strix Halo)."""

    name = "amdgpu"
    priority = 90
    default_capable = True

    def probe(self) -> EngineStatus:
        try:
            from hrx_amdf import provider_kind, shared_provider
            from hrx_amdf.constants import EngineKind
        except ImportError as exc:
            return EngineStatus(False, f"hrx-amdf is not installed ({exc}): pip install -e plugins/hrx_amdf")
        try:
            kind = provider_kind()
        except Exception as exc:  # noqa: BLE001 - probe never raises
            return EngineStatus(False, str(exc))
        if kind == "libamdf":
            from hrx_amdf.native import probe

            ok, reason, _ = probe()
            if not ok:
                return EngineStatus(False, f"libamdf unavailable: {reason}")
        try:
            provider = shared_provider(kind)
            count = sum(1 for e in provider.endpoints() if e.info.engine_kind == EngineKind.GPU)
        except Exception as exc:  # noqa: BLE001
            return EngineStatus(False, f"{kind}: {type(exc).__name__}: {exc}")
        if count == 0:
            return EngineStatus(False, f"{kind}: no GPU endpoint")
        if kind == "fake":
            return EngineStatus(True, "simulated Strix Halo (HRX_AMDF_PROVIDER=fake): a test fixture, not hardware", count, default=False)
        return EngineStatus(True, f"libamdf ABI {provider.abi_version}", count)

    def open_device(self, index: int, **options: Any) -> Any:
        from .device import AmdgpuDevice

        unknown = set(options) - AmdgpuDevice.OPTIONS
        if unknown:
            raise InvalidArgument(f"options: unknown {', '.join(sorted(unknown))} (the amdgpu engine takes {', '.join(sorted(AmdgpuDevice.OPTIONS))})")
        compute_engine = options.pop("compute_engine", "pm4")
        if compute_engine not in ("pm4", "aql"):
            raise InvalidArgument(f"compute_engine: expected 'pm4' or 'aql', got {compute_engine!r}")
        private = options.pop("max_private_bytes", 0)
        if isinstance(private, bool) or not isinstance(private, int) or not 0 <= private <= 1 << 20:
            raise InvalidArgument(f"max_private_bytes: expected an int in 0..{1 << 20}, got {private!r}")
        for name in ("max_transfer_bytes", "compute_queues", "copy_queues"):
            value = options.get(name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1 or (name != "max_transfer_bytes" and value > 64)):
                raise InvalidArgument(f"{name}: expected an int >= 1{' (at most 64)' if name != 'max_transfer_bytes' else ''}, got {value!r}")
        try:
            from hrx_amdf import shared_provider
        except ImportError as exc:
            raise EngineNotFound(f"amdgpu: hrx-amdf is not installed ({exc})") from exc
        provider = shared_provider(options.pop("provider", None))
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidArgument(f"index: expected an int >= 0, got {index!r}")
        return AmdgpuDevice(provider, index, compute_engine=compute_engine, max_private_bytes=private, **options)

    def prepare(self) -> list[str]:
        status = self.probe()
        if not status.available:
            return [f"amdgpu: unavailable: {status.reason}"]
        lines = []
        for index in range(status.device_count):
            try:
                device = self.open_device(index)
            except Exception as exc:  # noqa: BLE001
                lines.append(f"amdgpu:{index}: failed to open: {exc}")
                continue
            try:
                lines.append(f"amdgpu:{index}: {device.info.name} ({device.info.properties['provider']}) ready")
            finally:
                device.close()
        return lines

    def __repr__(self) -> str:
        return "<AmdgpuEngine>"


__all__ = ["AmdgpuEngine"]
