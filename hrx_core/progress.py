"""Progress bars for long steps (writing or loading a checkpoint, the demo), drawn with
tqdm as huggingface_hub draws its downloads.

A bar is shown only where someone can see it: stderr is a terminal and nothing asked
for quiet (``hrx --quiet``, or :func:`set_quiet` from code). Otherwise :func:`bar` returns
a disabled bar, whose calls cost next to nothing, so code reports progress
unconditionally::

    with progress.bar(total=len(items), desc="loading", unit="tensor") as b:
        for item in items:
            ...
            b.update(1)
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any

_quiet = False
_lock = threading.Lock()


def set_quiet(value: bool) -> bool:
    """Turn every progress bar off (True) or back to "on a terminal" (False); returns
    the previous setting."""
    global _quiet
    if not isinstance(value, bool):
        from .errors import InvalidArgument

        raise InvalidArgument(f"value: expected a bool, got {type(value).__name__}")
    with _lock:
        previous, _quiet = _quiet, value
    return previous


def quiet() -> bool:
    """Whether progress bars are turned off (``hrx --quiet``)."""
    return _quiet


def enabled() -> bool:
    """Whether a bar would be drawn now: not quiet and stderr is a terminal."""
    if _quiet:
        return False
    stream = sys.stderr
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class _NullBar:
    """What :func:`bar` returns where tqdm is not installed."""

    disable = True
    n: float = 0

    def update(self, n: float = 1) -> None:
        self.n += n

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _NullBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        pass


def bar(*, total: float | None, desc: str, unit: str = "it", unit_scale: bool = False) -> Any:
    """A tqdm progress bar on stderr, disabled unless :func:`enabled`; ``leave=False``
    so finished bars do not stay between a command's output lines."""
    try:
        from tqdm.auto import tqdm  # type: ignore[import-untyped]
    except ImportError:
        return _NullBar()
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, leave=False,
                disable=not enabled(), file=sys.stderr, dynamic_ncols=True)


__all__ = ["bar", "enabled", "quiet", "set_quiet"]
