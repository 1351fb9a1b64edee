"""Kernel contracts: what an NPU program may be launched with.

A :class:`KernelContract` lists the program's buffer slots in order. Each
:class:`BufferContract` gives the slot's exact length in bytes, the alignment of its
device address and its access mode (read, write, read_write), or marks the slot
unused. Launch buffer lists contain only the used slots, in order. An unused slot
followed by a used one is rejected when the program is loaded: the original
system's native image validator rejects that relocation, so contracts here do too.

The checks run twice, from one implementation: on :class:`~hrx_core.Binding`
objects when an invocation is created (messages name the binding), and on the
engine's ``BufferArg`` list when a launch is encoded (a graph replayed with rebound
inputs is checked again). Both raise before anything is launched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from hrx_core.buffer import Binding, Buffer, View, as_binding, coerce_access
from hrx_core.engine import Access, BufferArg

from .errors import AccessModeError, AlignmentError, BindingLengthError, BindingListError, ContractViolation
from hrx_core.errors import show

_NAMES = {Access.READ: "read", Access.WRITE: "write", Access.READ_WRITE: "read_write"}


def _access(value: Any) -> Access | None:
    return None if value is None else coerce_access(value)


def _positive(name: str) -> Any:
    def check(_: Any, attr: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ContractViolation(f"{name}: expected an int >= 1, got {show(value)}")

    return check


def _power_of_two(_: Any, attr: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
        raise ContractViolation(f"alignment: expected a power of two, got {show(value)}")


@attrs.frozen
class BufferContract:
    """One buffer slot of a program: exact length, address alignment, access mode.

    ``access=None`` marks the slot unused (see :meth:`unused`)."""

    length: int = attrs.field(validator=_positive("length"))
    access: Access | None = attrs.field(default=Access.READ_WRITE, converter=_access)
    alignment: int = attrs.field(default=64, validator=_power_of_two)
    name: str = ""

    @property
    def used(self) -> bool:
        return self.access is not None

    @classmethod
    def read(cls, length: int, *, alignment: int = 64, name: str = "") -> BufferContract:
        return cls(length, Access.READ, alignment, name)

    @classmethod
    def write(cls, length: int, *, alignment: int = 64, name: str = "") -> BufferContract:
        return cls(length, Access.WRITE, alignment, name)

    @classmethod
    def read_write(cls, length: int, *, alignment: int = 64, name: str = "") -> BufferContract:
        return cls(length, Access.READ_WRITE, alignment, name)

    @classmethod
    def unused(cls, *, name: str = "") -> BufferContract:
        """A slot the program does not use (allowed only after every used slot)."""
        return cls(1, None, 1, name)

    def describe(self, index: int) -> str:
        label = f" ({self.name})" if self.name else ""
        return f"binding {index}{label}"


def _buffers(value: Any) -> tuple[BufferContract, ...]:
    if isinstance(value, BufferContract) or not isinstance(value, Sequence):
        raise ContractViolation("buffers: expected a sequence of BufferContract")
    out = tuple(value)
    for i, b in enumerate(out):
        if not isinstance(b, BufferContract):
            raise ContractViolation(f"buffers[{i}]: expected a BufferContract, got {type(b).__name__}")
    return out


def _scratch(_: Any, attr: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ContractViolation(f"scratch_bytes: expected an int >= 0, got {show(value)}")


@attrs.frozen
class KernelContract:
    """The memory contract of one NPU program.

    ``buffers``: the program's buffer slots in order. ``scratch_bytes``: tile-local
    memory each occupied column gives the program; it is re-established (zeroed)
    before every invocation, so nothing leaks between invocations or contexts.
    """

    buffers: tuple[BufferContract, ...] = attrs.field(converter=_buffers)
    scratch_bytes: int = attrs.field(default=0, validator=_scratch)

    @property
    def used(self) -> tuple[BufferContract, ...]:
        """The used slots: exactly what a launch buffer list contains."""
        return tuple(b for b in self.buffers if b.used)

    @property
    def accesses(self) -> tuple[Access, ...]:
        return tuple(b.access for b in self.used)  # type: ignore[misc]

    def check_image(self, device_alignment: int) -> None:
        """Load-time checks: no unused slot before a used one; alignments the device
        can guarantee (allocation bases are aligned to ``device_alignment``)."""
        if not self.used:
            raise BindingListError("contract: a program needs at least one used binding")
        seen_unused = None
        for i, b in enumerate(self.buffers):
            if not b.used:
                seen_unused = i if seen_unused is None else seen_unused
            elif seen_unused is not None:
                raise BindingListError(
                    f"contract: binding {seen_unused} is unused but binding {i} after it is used; "
                    "launch lists hold only used bindings, and an unused binding in the middle is "
                    "rejected by the image validator -- move unused bindings to the end"
                )
        for i, b in enumerate(self.used):
            if b.alignment > device_alignment:
                raise AlignmentError(
                    f"contract: {b.describe(i)} asks for {b.alignment}-byte alignment; "
                    f"the device guarantees {device_alignment}"
                )

    def _check_list(self, count: int, what: str) -> tuple[BufferContract, ...]:
        used = self.used
        if count != len(used):
            raise BindingListError(
                f"{what}: the program takes {len(used)} used bindings, got {count} "
                "(launch lists contain only used bindings)"
            )
        return used

    def check_bindings(self, bindings: Sequence[Any], device: Any) -> tuple[Binding, ...]:
        """Validate a launch list of Buffers, Views or Bindings on ``device``.

        Plain buffers and views take the contract's access; declared bindings must
        declare exactly it. Returns the bindings with their access."""
        if isinstance(bindings, (Buffer, View, Binding)) or not isinstance(bindings, Sequence):
            raise BindingListError("bindings: expected a list of Buffer, View or Binding")
        for i, value in enumerate(bindings):
            if value is None:
                raise BindingListError(
                    f"bindings[{i}]: None -- launch lists contain only used bindings; "
                    "an unused binding in the middle of the list is rejected"
                )
        used = self._check_list(len(bindings), "bindings")
        out = []
        for i, (value, slot) in enumerate(zip(bindings, used)):
            declared = isinstance(value, Binding)
            binding = as_binding(f"bindings[{i}]", value, slot.access)  # type: ignore[arg-type]
            view = binding.view
            if view.buffer.device is not device:
                raise ContractViolation(f"bindings[{i}]: buffer belongs to {view.buffer.device.name}, not {device.name}")
            if declared and binding.access != slot.access:
                raise AccessModeError(
                    f"bindings[{i}]: declared {_NAMES[binding.access]}, the contract's {slot.describe(i)} "
                    f"is {_NAMES[slot.access]}"  # type: ignore[index]
                )
            if view.length != slot.length:
                raise BindingLengthError(f"bindings[{i}]: {view.length} bytes, the contract's {slot.describe(i)} has {slot.length}")
            if view.start % slot.alignment:
                raise AlignmentError(
                    f"bindings[{i}]: starts at byte {view.start} of its allocation, "
                    f"not a multiple of the contract's {slot.alignment}-byte alignment"
                )
            out.append(binding)
        return tuple(out)

    def check_args(self, args: Sequence[Any]) -> tuple[BufferArg, ...]:
        """Encode-time checks on the engine's arguments (buffer ranges, no scalars)."""
        buffers = [a for a in args if isinstance(a, BufferArg)]
        if len(buffers) != len(args):
            raise ContractViolation(f"launch: NPU programs take buffers only, got {len(args) - len(buffers)} scalars")
        used = self._check_list(len(buffers), "launch")
        for i, (arg, slot) in enumerate(zip(buffers, used)):
            if arg.access != slot.access:
                raise AccessModeError(
                    f"launch: {slot.describe(i)} is bound {_NAMES[arg.access]}, "
                    f"the contract says {_NAMES[slot.access]}"  # type: ignore[index]
                )
            if arg.length != slot.length:
                raise BindingLengthError(f"launch: {slot.describe(i)} is {arg.length} bytes, the contract has {slot.length}")
            address = arg.buffer.pointer()
            if address is not None and (address + arg.offset) % slot.alignment:
                raise AlignmentError(
                    f"launch: {slot.describe(i)} at address {address + arg.offset:#x} "
                    f"is not {slot.alignment}-byte aligned"
                )
        return tuple(buffers)


__all__ = ["BufferContract", "KernelContract"]
