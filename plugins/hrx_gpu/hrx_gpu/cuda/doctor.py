"""``hrx doctor`` rows for the cuda engine (never raises, opens no context)."""

from __future__ import annotations


def rows() -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    try:
        from . import _driver
        from .device import cuda_version_string, describe, driver_release
        from .errors import DriverUnavailable

        try:
            driver = _driver.load()
        except DriverUnavailable as exc:
            return [("cuda", "unavailable", str(exc))]
        release = driver_release()
        out.append(
            ("cuda", "driver", (release + " " if release else "") + f"(CUDA {cuda_version_string(driver.version)})")
        )
        count = driver.device_count()
        if count == 0:
            out.append(("cuda", "unavailable", "the CUDA driver reports no devices"))
        for index in range(count):
            try:
                info = describe(driver, index)
                p = info.properties
                out.append(
                    (
                        "cuda",
                        f"device {index}",
                        f"{info.name}, {p['arch']}, {info.memory_bytes / 2**30:.1f} GiB"
                        + (f" at {p['memory_bandwidth'] / 1e12:.2f} TB/s peak" if p.get("memory_bandwidth") else "")
                        + f", {p['multiprocessors']} SMs, {p['copy_engines']} copy engines, PCI {p['pci_bus_id']}",
                    )
                )
            except Exception as exc:  # noqa: BLE001
                out.append(("cuda", f"device {index}", f"error: {exc}"))
    except Exception as exc:  # noqa: BLE001
        out.append(("cuda", "unavailable", f"{type(exc).__name__}: {exc}"))
        return out
    try:
        from . import _nvrtc

        nvrtc = _nvrtc.load()
        out.append(("cuda", "nvrtc", f"{nvrtc.version[0]}.{nvrtc.version[1]} ({nvrtc.path})"))
    except Exception as exc:  # noqa: BLE001
        out.append(("cuda", "nvrtc", f"not found: {exc}"))
    return out


__all__ = ["rows"]
