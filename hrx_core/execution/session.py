"""NativeSession: synchronous, stream-bound model code inside a runtime.

Some models are plain Python driving a stream step by step (eager layers, a
library's own launches). A session reserves the runtime's compute lane for the
calling thread -- other threads' submissions with compute regions wait until it
ends -- and runs the model synchronously on that lane's stream, so its uploads,
kernels and downloads form one synchronous stage ordered after earlier compute work.
Inputs are borrowed: retained for the stage, not copied. Exceptions from the model or
from its progress callbacks are fenced (the stream is drained, the lane released, a
CallbackError raised with the original as its cause), so the runtime stays usable;
KeyboardInterrupt and SystemExit are not fenced: they propagate as they are, after
the drain. A stage reports only its own failures, never another submission's. When
the stage's completion is uncertain (its drain timed out or the device failed), the
borrowed owners are quarantined instead of released.

Lock order: the reservation is taken under the runtime's submit lock (so it begins
between submissions) and held as a flag, not a lock, for the session's duration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..buffer import Allocation, Binding, Buffer, View
from ..completion import Completion
from ..errors import CallbackError, HRXError, InvalidArgument, Timeout, show
from ..timeouts import check_timeout

if TYPE_CHECKING:
    from ..stream import Stream
    from .runtime import Runtime


class NativeSession:
    """Use as ``with runtime.native_session() as ns: ns.run(model, x, progress=cb)``."""

    def __init__(self, runtime: Runtime, name: str = "native") -> None:
        if not isinstance(name, str):
            raise InvalidArgument(f"name: expected a str, got {show(name)}")
        self.runtime = runtime
        self.name = name
        self._lane = runtime.lane("compute")
        self._held = False
        self._progress: Callable[..., Any] | None = None
        self._callback_error: BaseException | None = None
        self.steps = 0

    @property
    def stream(self) -> Stream:
        """The compute lane's stream: the model's uploads, kernels and downloads go here."""
        return self._lane.stream

    def __enter__(self) -> NativeSession:
        if self.runtime.closed:
            raise InvalidArgument("runtime is closed")
        if not self._held:
            self.runtime._reserve_lane("compute")
            self._held = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._held:
            self._held = False
            self.runtime._release_lane("compute")

    def progress(self, *args: Any, **kwargs: Any) -> None:
        """Report progress from inside the model; calls the run's callback, fenced
        (KeyboardInterrupt and SystemExit propagate at once, stopping the model)."""
        self.steps += 1
        cb = self._progress
        if cb is None or self._callback_error is not None:
            return
        try:
            cb(*args, **kwargs)
        except Exception as exc:  # fenced: reported when the stage ends
            self._callback_error = exc

    def run(self, model: Callable[..., Any], *inputs: Any, progress: Callable[..., Any] | None = None, timeout: float | None = 60.0) -> Any:
        """Run ``model(session, *inputs)`` as one synchronous stage and return its result."""
        if not self._held:
            raise InvalidArgument("native session: use it as a context manager (it reserves the compute lane)")
        if not callable(model):
            raise InvalidArgument(f"model: expected a callable, got {type(model).__name__}")
        if progress is not None and not callable(progress):
            raise InvalidArgument(f"progress: expected a callable, got {type(progress).__name__}")
        timeout = check_timeout("timeout", timeout)
        stream = self.stream
        borrowed: list[Allocation] = []
        try:
            for x in inputs:
                if isinstance(x, (Buffer, View, Binding)):
                    buf = x if isinstance(x, Buffer) else (x.buffer if isinstance(x, View) else x.view.buffer)
                    borrowed.append(buf.allocation.retain())
        except BaseException:
            for a in borrowed:
                a.release()
            raise
        start = stream.slot.mark_value()  # the stage's work comes after this value
        self._progress, self._callback_error = progress, None
        error: BaseException | None = None
        result = None
        try:
            result = model(self, *inputs)
        except BaseException as exc:
            error = exc
        finally:
            self._progress = None
        try:
            # the fence: the stage is over when its work is (failures of other
            # submissions on this lane are theirs, not the stage's)
            stream.slot.completion().wait_quiet(timeout)
        except HRXError as exc:
            # completion uncertain (timeout) or the device failed: keep the borrowed owners
            self.runtime._quarantine(borrowed, f"native session {self.name!r}: {exc!r}")
            self._release(borrowed)
            if error is not None and not isinstance(error, Exception):
                raise error from exc  # Ctrl-C / exit wins over the drain's outcome
            raise
        failed_at = stream._first_failure_after(start)
        self._release(borrowed)
        if error is not None:
            if not isinstance(error, Exception) or isinstance(error, HRXError):
                raise error  # KeyboardInterrupt, SystemExit propagate unchanged
            raise CallbackError(f"native session {self.name!r}: the model raised {error!r}") from error
        if failed_at is not None:
            Completion(stream.slot, failed_at)._raise_failure()
        if self._callback_error is not None:
            raise CallbackError(
                f"native session {self.name!r}: a progress callback raised {self._callback_error!r}"
            ) from self._callback_error
        return result

    @staticmethod
    def _release(borrowed: list[Allocation]) -> None:
        for a in borrowed:
            a.release()


__all__ = ["NativeSession", "Timeout"]
