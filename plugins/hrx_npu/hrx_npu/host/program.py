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
        if artifact.target == C_TARGET:
            self._ffi, self._c_fn = load_entry(artifact.code)
            self._py_fn = None
            self._scratch_ptrs = [self._ffi.cast("uint8_t *", m.ctypes.data) for m in array.memory]
        elif artifact.target == "host" and callable(artifact.code):
            self._c_fn = None
            self._py_fn = artifact.code
        else:
            raise InvalidArgument(f"npu-host loads {C_TARGET!r} or 'host' artifacts, got target {artifact.target!r}")

    def prepare(self, buffers: Sequence[BufferArg]) -> Callable[[], None]:
        """Bind one invocation's arguments (at encode time); returns its command."""
        scratch_bytes = self.contract.scratch_bytes
        start, count = self.start, self.columns
        if self._c_fn is not None:
            ffi, fn = self._ffi, self._c_fn
            ptrs = ffi.new("uint8_t *[]", [ffi.cast("uint8_t *", _host_array(b).ctypes.data) for b in buffers])
            lengths = ffi.new("int64_t[]", [b.length for b in buffers])
            n = len(buffers)
            scratch = self._scratch_ptrs

            def column(c: int) -> None:
                fn(ptrs, lengths, n, scratch[start + c], scratch_bytes, c, count)

            column_fn = column
        else:
            views = []
            for b in buffers:
                v = _host_array(b)
                if not b.access & Access.WRITE:
                    v = v.view()
                    v.flags.writeable = False
                views.append(v)
            py = self._py_fn
            memory = self._array.memory
            assert py is not None

            def column(c: int) -> None:
                py(*views, scratch=memory[start + c][:scratch_bytes], column=c, columns=count)

            column_fn = column

        def run() -> None:
            try:
                with self._array.occupy(self.context, start, count, scratch_bytes):
                    if count == 1:
                        column_fn(0)
                    else:
                        futures = [_threads().submit(column_fn, c) for c in range(1, count)]
                        try:
                            column_fn(0)
                        finally:
                            for f in futures:
                                f.result()
            finally:
                self.pending.release()

        return run
