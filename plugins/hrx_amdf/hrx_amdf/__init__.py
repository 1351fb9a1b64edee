"""hrx-amdf: the layer both AMD engines of HRX stand on.

* :mod:`hrx_amdf.provider` -- one Python interface over libamdf's object model.
* :mod:`hrx_amdf.native` -- the libamdf binding (cffi, ABI mode) behind it.
* :mod:`hrx_amdf.fake` -- a simulated Strix Halo (gfx1151 + NPU5) behind it: a
  strict command processor for PM4, SDMA and AQL and an NPU kernel queue, so CI
  proves the engines without AMD hardware. It is a test fixture, never a claim of
  hardware support.
* :mod:`hrx_amdf.errors` -- libamdf statuses as HRX errors.

``HRX_AMDF_PROVIDER`` (``libamdf`` or ``fake``) selects the provider the engines use;
``HRX_AMDF_LIBRARY`` points at a libamdf build. See docs/amd.md.
"""

from __future__ import annotations

from .constants import *  # noqa: F403
from .errors import AmdfError
from .provider import Provider
from .select import close_shared, open_provider, provider_kind, shared_provider

__all__ = ["AmdfError", "Provider", "open_provider", "shared_provider", "provider_kind", "close_shared"]
