"""``NpuProgram.wrap_transaction``: one invocation of a program wrapped with custom
prefix and suffix records, extra buffers and command storage kept alive around it.

The specification's ``XdnaProgram::wrap_transaction`` retains extra buffers and
command storage around the compiler's invocation; custom prefix/suffix records must
use disjoint native resources and drain their DMA traffic. Here:

* a record is an :class:`~hrx_npu.Invocation` of *another* loaded program (its own
  hardware context: a record of the wrapped program itself is rejected), on the same
  device, whose bindings share no byte with the wrapped invocation's bindings
  (``Overlap`` otherwise) -- checked when the transaction is built, before anything
  is submitted;
* :meth:`Transaction.launch` submits prefix records, the invocation and suffix
  records in that order on one NPU stream. A stream's queue runs its submissions one
  after another, each retired (its DMA traffic drained) before the next starts, so a
  suffix record sees everything the invocation wrote; the transaction's completion
  is the last record's;
* ``retain`` buffers and ``command_bytes`` of command storage (NPU memory allocated
  here) are held until :meth:`Transaction.close`; a resident session closes its
  transaction only once the participant is proven done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

from hrx_core.buffer import Binding, Buffer, View, backing_of
from hrx_core.completion import Completion
from hrx_core.errors import InvalidArgument, Overlap, show
from hrx_core.stream import Stream

if TYPE_CHECKING:
    from .device import Invocation, NpuProgram

#: The most command storage one transaction may ask for.
MAX_COMMAND_BYTES = 1 << 30


def _spans(bindings: Sequence[Binding]) -> list[tuple[int, int, int]]:
    out = []
    for b in bindings:
        v = b.view
        out.append((id(backing_of(v.buffer.allocation)), v.start, v.end))
    return out


def _records(name: str, values: Any, program: NpuProgram, taken: list[tuple[int, int, int]]) -> tuple[Invocation, ...]:
    from .device import Invocation

    if isinstance(values, (str, bytes, Invocation)) or not isinstance(values, Sequence):
        raise InvalidArgument(f"{name}: expected a list of Invocations of other programs")
    out = []
    for i, rec in enumerate(values):
        if not isinstance(rec, Invocation):
            raise InvalidArgument(f"{name}[{i}]: expected an hrx_npu Invocation, got {type(rec).__name__}")
        if rec.program.device is not program.device:
            raise InvalidArgument(f"{name}[{i}]: its program is loaded on {rec.program.device.name}, not {program.device.name}")
        rec.program._check_open()
        if rec.program is program or rec.program.context == program.context:
            raise Overlap(f"{name}[{i}]: a record must use its own native resources; it runs in the wrapped program's "
                          f"hardware context ({program.name!r})")
        for alloc, start, end in _spans(rec.bindings):
            for other, ostart, oend in taken:
                if alloc == other and start < oend and ostart < end:
                    raise Overlap(f"{name}[{i}]: binding bytes [{start}, {end}) overlap the wrapped invocation's "
                                  f"bytes [{ostart}, {oend}) of the same allocation")
        out.append(rec)
    return tuple(out)


class Transaction:
    """An invocation with its prefix/suffix records and retained storage (see the module)."""

    def __init__(self, invocation: Invocation, *, prefix: Sequence[Any] = (), suffix: Sequence[Any] = (),
                 retain: Sequence[Buffer | View | Binding] = (), command_bytes: int = 0) -> None:
        program = invocation.program
        spans = _spans(invocation.bindings)
        self.prefix = _records("prefix", prefix, program, spans)
        self.suffix = _records("suffix", suffix, program, spans)
        if isinstance(retain, (Buffer, View, Binding, str, bytes)) or not isinstance(retain, Sequence):
            raise InvalidArgument("retain: expected a list of Buffers, Views or Bindings")
        for i, r in enumerate(retain):
            if not isinstance(r, (Buffer, View, Binding)):
                raise InvalidArgument(f"retain[{i}]: expected a Buffer, View or Binding, got {type(r).__name__}")
        if isinstance(command_bytes, bool) or not isinstance(command_bytes, int) or not 0 <= command_bytes <= MAX_COMMAND_BYTES:
            raise InvalidArgument(f"command_bytes: expected an int in [0, {MAX_COMMAND_BYTES}], got {show(command_bytes)}")
        self.invocation = invocation
        self.program = program
        held = []
        for r in retain:
            buf = r if isinstance(r, Buffer) else (r.view.buffer if isinstance(r, Binding) else r.buffer)
            alloc = buf.allocation
            held.append(Buffer(buf.device, alloc.retain(), buf._base, buf.nbytes))
        self.retained: list[Buffer] = held
        #: NPU memory for the records' command streams, alive until close.
        self.command_storage: Buffer | None = program.device.allocate(command_bytes) if command_bytes else None
        self.closed = False

    def launch(self, stream: Stream | None = None) -> Completion:
        """Submit prefix records, the invocation and suffix records, in order, on one
        stream; returns the last one's completion."""
        if self.closed:
            raise InvalidArgument("transaction: closed")
        stream = self.program.device.default_stream() if stream is None else stream
        if not isinstance(stream, Stream) or stream.device is not self.program.device:
            raise InvalidArgument(f"stream: expected a stream of {self.program.device.name}")
        done = None
        for rec in (*self.prefix, self.invocation, *self.suffix):
            done = rec.launch(stream)
        assert done is not None
        return done

    def close(self) -> None:
        """Release the retained buffers and the command storage."""
        if not self.closed:
            self.closed = True
            for b in self.retained:
                b.close()
            self.retained = []
            if self.command_storage is not None:
                self.command_storage.close()
                self.command_storage = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["MAX_COMMAND_BYTES", "Transaction"]
