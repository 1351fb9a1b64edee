"""Host timelines: a monotonic counter guarded by a condition variable."""

from __future__ import annotations

import array
import threading

from ..engine import Timeline
from ..errors import DeviceError

#: Failures whose exception objects a timeline keeps; older failed values keep a
#: summary (type and message) so they still report failure, never success.
DETAILED_ERRORS = 1024


class HostTimeline(Timeline):
    def __init__(self) -> None:
        self._value = 0
        self._cond = threading.Condition()
        self._errors: dict[int, BaseException] = {}
        # failed values whose details were dropped -> one-line summary
        self._summaries: dict[int, str] = {}
        # [completed, failed] for the compiled paths (Timeline.c_completed, c_failed):
        # written after _value and before _errors shows a failure, under the GIL
        self._words = array.array("Q", [0, 0])
        address = self._words.buffer_info()[0]
        self.c_completed = address
        self.c_failed = address + self._words.itemsize

    def completed(self) -> int:
        return self._value  # an attribute read: no lock, no syscall

    def wait(self, value: int, timeout: float | None) -> bool:
        if self._value >= value:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._value >= value, timeout)

    def signal(self, value: int, error: BaseException | None = None) -> None:
        with self._cond:
            if error is not None:
                self._words[1] = 1
                self._errors[value] = error.with_traceback(None)  # frames would pin memory
                if len(self._errors) > DETAILED_ERRORS:  # keep the newest in full, summarise the rest
                    for old in sorted(self._errors)[:-DETAILED_ERRORS]:
                        exc = self._errors.pop(old)
                        self._summaries[old] = f"{type(exc).__name__}: {exc}"[:200]
            if value > self._value:
                self._value = value
                self._words[0] = value
            self._cond.notify_all()

    def has_errors(self) -> bool:
        return bool(self._errors or self._summaries)

    def error(self, value: int) -> BaseException | None:
        error = self._errors.get(value)
        if error is None and self._summaries:
            summary = self._summaries.get(value)
            if summary is not None:
                return DeviceError(f"work failed (details of older failures were dropped): {summary}")
        return error
