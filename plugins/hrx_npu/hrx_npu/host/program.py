"""Programs loaded on an npu-host device: a C entry point (cffi) or a numpy callable,
run once per occupied column, in parallel, with the column's scratch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hrx_core.engine import Access, Artifact, BufferArg, Executable
from hrx_core.errors import DeviceError, InvalidArgument
from hrx_core.host.graph import _threads  # the host engine's worker pool runs the extra columns

from ..compiler import TARGET as C_TARGET
from ..compiler import load_entry
from ..contract import KernelContract
from ..pending import PendingLimit
from ..seam import NpuExecutable

if TYPE_CHECKING:
    from .array import HostArray

class NpuImage(Executable):
    """An artifact loaded without a contract (``Kernel.executable``, ``hrx prepare``):
    it cannot be launched; load it with ``NpuDevice.load_artifact``."""

    def __init__(self, artifact: Artifact) -> None:
        self.name = artifact.entry or "program"
        self.target = artifact.target


def _host_array(arg: BufferArg) -> np.ndarray:
    view = arg.buffer.host_view()
    if view is None:
        raise DeviceError("npu-host: a bound buffer has no host memory")
    return view[arg.offset : arg.offset + arg.length]


class HostEntry:
    """A host build of an NPU program -- a C entry point (cffi) or a numpy callable --
    and how it runs: once per occupied column, in parallel, with the column's scratch.
    npu-host runs programs with it; the xdna engine's simulation uses it as the
    reference of a program's stand-in image."""

    def __init__(self, artifact: Artifact) -> None:
        self.name = artifact.entry or "program"
        self.target = artifact.target
        if artifact.target == C_TARGET:
            self._ffi, self._c_fn = load_entry(artifact.code)
            self._py_fn = None
        elif artifact.target == "host" and callable(artifact.code):
            self._c_fn = None
            self._py_fn = artifact.code
        else:
            raise InvalidArgument(f"npu-host loads {C_TARGET!r} or 'host' artifacts, got target {artifact.target!r}")

    def bind(self, arrays: Sequence[np.ndarray], scratch: Sequence[np.ndarray], scratch_bytes: int) -> Callable[[], None]:
        """The command running the program on ``arrays`` (one per used binding; numpy
        programs get them as given, so read-only views for ``read`` slots) with
        ``scratch[c][:scratch_bytes]`` as column ``c``'s tile memory."""
        count = len(scratch)
        if self._c_fn is not None:
            ffi, fn = self._ffi, self._c_fn
            ptrs = ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", a.ctypes.data) for a in arrays])
            lengths = ffi.new("int64_t[]", [a.nbytes for a in arrays])
            n = len(arrays)
            scratch_ptrs = [ffi.cast("uint8_t *", m.ctypes.data) for m in scratch]

            def column(c: int) -> None:
                fn(ptrs, lengths, n, scratch_ptrs[c], scratch_bytes, c, count)

        else:
            py = self._py_fn
            views = list(arrays)
            assert py is not None

            def column(c: int) -> None:
                py(*views, scratch=scratch[c][:scratch_bytes], column=c, columns=count)

        def run() -> None:
            if count == 1:
                column(0)
                return
            futures = [_threads().submit(column, c) for c in range(1, count)]
            try:
                column(0)
            finally:
                for f in futures:
                    f.result()

        return run


class HostProgram(NpuExecutable):
    """One hardware context on an npu-host array."""

    def __init__(
        self, array: HostArray, artifact: Artifact, contract: KernelContract, *, context: int, start: int, columns: int, max_pending: int
    ) -> None:
        self.name = artifact.entry or "program"
        self.target = artifact.target
        self.contract = contract
        self.context = context
        self.start = start
        self.columns = columns
        self.pending = PendingLimit(max_pending, f"NPU program {self.name!r}")
        self._array = array
        self._entry = HostEntry(artifact)

    def prepare(self, buffers: Sequence[BufferArg]) -> Callable[[], None]:
        """Bind one invocation's arguments (at encode time); returns its command."""
        scratch_bytes = self.contract.scratch_bytes
        start, count = self.start, self.columns
        arrays = []
        for b in buffers:
            v = _host_array(b)
            if not b.access & Access.WRITE:
                v = v.view()
                v.flags.writeable = False
            arrays.append(v)
        command = self._entry.bind(arrays, self._array.memory[start : start + count], scratch_bytes)

        def run() -> None:
            try:
                with self._array.occupy(self.context, start, count, scratch_bytes):
                    command()
            finally:
                self.pending.release()

        return run
