"""Which provider the AMD engines use: libamdf, or the simulated Strix Halo.

``HRX_AMDF_PROVIDER`` selects it: ``libamdf`` (the default; the library is found
through ``HRX_AMDF_LIBRARY`` or the usual library names) or ``fake`` (the simulated
Strix Halo, a test fixture). Both AMD engines of one process share one provider
instance, as they share one libamdf instance on hardware, so GPU memory exported to
the NPU and back stays in one address universe.
"""

from __future__ import annotations

import os
import threading

from hrx_core.errors import InvalidArgument

from .provider import Provider

KINDS = ("libamdf", "fake")

_lock = threading.Lock()
_shared: dict[str, Provider] = {}


def provider_kind(kind: str | None = None) -> str:
    """The provider kind asked for (argument, else ``HRX_AMDF_PROVIDER``, else libamdf)."""
    chosen = kind if kind is not None else os.environ.get("HRX_AMDF_PROVIDER", "libamdf") or "libamdf"
    if chosen not in KINDS:
        raise InvalidArgument(f"provider: expected one of {', '.join(KINDS)}, got {chosen!r} (HRX_AMDF_PROVIDER)")
    return chosen


def open_provider(kind: str | None = None) -> Provider:
    """A new provider instance of ``kind`` (the caller closes it)."""
    chosen = provider_kind(kind)
    if chosen == "fake":
        from .fake import FakeProvider

        return FakeProvider()
    from .native import LibamdfProvider

    return LibamdfProvider()


def shared_provider(kind: str | None = None) -> Provider:
    """The process-wide provider of ``kind``, opened on first use."""
    chosen = provider_kind(kind)
    with _lock:
        provider = _shared.get(chosen)
        if provider is None:
            provider = _shared[chosen] = open_provider(chosen)
        return provider


def close_shared() -> None:
    """Close the shared providers (tests; engines must have released their devices)."""
    with _lock:
        providers = list(_shared.values())
        _shared.clear()
    for provider in providers:
        provider.close()
