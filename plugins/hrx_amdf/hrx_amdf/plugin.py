"""pluggy hooks of the ``hrx-amdf`` distribution (entry point ``hrx: amdf``).

``hrx doctor`` gets one row for libamdf (found and negotiated, or why not and how to
point ``HRX_AMDF_LIBRARY`` at a build), one for the simulated Strix Halo, and the
endpoints of the provider ``HRX_AMDF_PROVIDER`` selects. The engines themselves come
from hrx-gpu (``amdgpu``) and hrx-npu (``xdna``).
"""

from __future__ import annotations

from hrx_core.hookspecs import hookimpl


def provider_rows() -> list[tuple[str, str, str]]:
    """Doctor rows describing the providers and the selected provider's endpoints."""
    from .errors import AmdfError
    from .native import probe
    from .select import provider_kind, shared_provider

    rows: list[tuple[str, str, str]] = []
    ok, reason, _ = probe()
    rows.append(("amd", "libamdf", reason if ok else f"unavailable: {reason}"))
    rows.append(("amd", "simulated Strix Halo", "HRX_AMDF_PROVIDER=fake selects it: a test fixture that checks and executes commands, not hardware"))
    try:
        kind = provider_kind()
    except Exception as exc:  # a bad HRX_AMDF_PROVIDER is reported, not raised
        rows.append(("amd", "provider", f"invalid: {exc}"))
        return rows
    if kind == "libamdf" and not ok:
        rows.append(("amd", "provider", "libamdf (selected) is unavailable: the AMD engines cannot open devices"))
        return rows
    try:
        provider = shared_provider(kind)
        for endpoint in provider.endpoints():
            info = endpoint.info
            detail = f"{info.name}, PCI {info.pci.vendor_id:04x}:{info.pci.device_id:04x} rev {info.pci.revision_id:02x}"
            if info.engine_kind.name == "GPU":
                gpu = endpoint.gpu_info()
                detail += f", {gpu.target}, {gpu.compute_unit_count} CUs, wave{gpu.wavefront_size}, LDS {gpu.lds_bytes // 1024} KiB"
            elif info.engine_kind.name == "XDNA":
                detail += f", {endpoint.xdna_info().target_id}"
            families = ", ".join(
                f"{f.command_type.name.replace('GPU_', '')}({'user' if f.publication_modes & 1 else 'kernel'})" for f in endpoint.queue_families()
            )
            rows.append(("amd", f"{kind} endpoint {info.engine_kind.name.lower()}", f"{detail}; queue families {families}"))
    except AmdfError as exc:
        rows.append(("amd", "provider", f"{kind}: {exc}"))
    return rows


@hookimpl
def hrx_doctor() -> list[tuple[str, str, str]]:
    return provider_rows()
