"""Host timelines: a monotonic counter guarded by a condition variable."""

from __future__ import annotations

import threading

from ..engine import Timeline


class HostTimeline(Timeline):
    def __init__(self) -> None:
        self._value = 0
        self._cond = threading.Condition()
        self._errors: dict[int, BaseException] = {}

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
                self._errors[value] = error
                if len(self._errors) > 1024:  # bounded: keep the newest failures
                    for old in sorted(self._errors)[:-1024]:
                        del self._errors[old]
            if value > self._value:
                self._value = value
            self._cond.notify_all()

    def error(self, value: int) -> BaseException | None:
        return self._errors.get(value)
