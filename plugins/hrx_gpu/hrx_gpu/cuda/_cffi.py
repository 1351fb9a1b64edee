"""A cffi FFI parsed once, on first use (importing the plugin must stay cheap and
must not need cffi's parser until a GPU is actually used)."""

from __future__ import annotations

import threading
from typing import Any


class LazyFFI:
    """Holds one ``cffi.FFI`` with ``cdef`` declarations, built on the first ``get``."""

    def __init__(self, cdef: str) -> None:
        self._cdef = cdef
        self._ffi: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        if self._ffi is None:
            with self._lock:
                if self._ffi is None:
                    import cffi

                    ffi = cffi.FFI()
                    ffi.cdef(self._cdef)
                    self._ffi = ffi
        return self._ffi
