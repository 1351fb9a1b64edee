"""The libamdf binding: cffi declarations (:mod:`.cdef`), library loading and ABI
negotiation (:mod:`.library`) and :class:`LibamdfProvider` (:mod:`.provider`).

Importing this package never needs libamdf: :func:`probe` says whether the library is
usable and, when it is not, how to point ``HRX_AMDF_LIBRARY`` at a build.
"""

from __future__ import annotations

from .library import LibraryNotFound, probe
from .provider import LibamdfProvider

__all__ = ["LibamdfProvider", "LibraryNotFound", "probe"]
