"""``hrx doctor`` rows of the xdna engine: availability and the device's facts."""

from __future__ import annotations


def rows() -> list[tuple[str, str, str]]:
    """Whether xdna is available and, if so, the NPU's columns, rows, firmware
    interface and limits (a device is opened and closed to read them)."""
    from .engine import XdnaEngine

    engine = XdnaEngine()
    status = engine.probe()
    if not status.available:
        return [("npu", "xdna", f"unavailable: {status.reason}")]
    out = [("npu", "xdna", status.reason + ("" if status.default else "; used only when named (HRX_NPU_ENGINE=xdna)"))]
    try:
        device = engine.open_device(0)
    except Exception as exc:  # noqa: BLE001 - doctor reports, never raises
        return out + [("npu", "xdna device", f"cannot open: {type(exc).__name__}: {exc}")]
    try:
        p = device.info.properties
        out.append(("npu", "xdna device", f"{device.info.name}: PCI {p['pci']}, {p['architecture']} {p['target_id']}, "
                    f"{p['columns']} columns x {p['rows']} rows, contexts {p['scheduling']}, "
                    f"{p['max_pending_invocations']} pending invocations per program"))
        out.append(("npu", "xdna firmware interface", f"AIE transaction instructions: {p['instructions']}; provider: {p['provider']}; "
                    "libamdf ABI 5 reports no firmware version"))
    finally:
        device.close()
    return out
