"""Qualifying an image entry for a device, a column count and a ``KernelContract``.

Everything here runs before any device memory is touched. The image must be for
this target (AIE2P, the device's rows), for exactly the requested context size (the
original's image qualification requires an exact match), and its entry must agree
with the contract slot by slot:

* the launch list has exactly the entry's bindings (the contract's *used* slots);
* every relocation patches a binding below that count;
* every binding of the entry is patched by at least one relocation -- a binding the
  CONTROL program never addresses would be an unused binding in the launch list;
* each binding is a buffer whose access equals the slot's, whose minimum length the
  slot's length meets and whose minimum alignment (and every relocation's required
  alignment and addend) the slot's alignment guarantees;
* the lowered instruction stream fits the device's instruction limits.
"""

from __future__ import annotations

import attrs

from hrx_core.engine import Access
from ..contract import KernelContract
from ..errors import AccessModeError, AlignmentError, BindingLengthError, BindingListError, ColumnError
from . import format as F
from .image import BindingRecord, Entry, XdnaImage, XdnaImageError
from .transaction import Instructions, lower_entry

_ACCESS = {F.BINDING_READ: Access.READ, F.BINDING_WRITE: Access.WRITE, F.BINDING_READ | F.BINDING_WRITE: Access.READ_WRITE}
_NAMES = {Access.READ: "read", Access.WRITE: "write", Access.READ_WRITE: "read_write"}


@attrs.frozen
class DeviceLimits:
    """What qualification needs to know about the device."""

    rows: int
    columns: int
    instruction_max_bytes: int
    instruction_granularity: int


@attrs.frozen
class Qualified:
    image: XdnaImage
    entry: Entry
    bindings: tuple[BindingRecord, ...]
    instructions: Instructions


def qualify(image: XdnaImage, entry_name: str | None, contract: KernelContract, columns: int, device: DeviceLimits) -> Qualified:
    """Check ``image``'s entry against the device and ``contract``; returns the entry's
    instruction template. Raises XdnaImageError, ColumnError or a ContractViolation."""
    name = image.name
    note = image.note
    if note.target_generation != F.TARGET_GENERATION_AIE2P or image.flags != F.ELF_FLAGS_AIE2P:
        raise XdnaImageError(name, "LOOM ABI note", f"target generation {note.target_generation}: this device is AIE2P ({F.TARGET_GENERATION_AIE2P})")
    if note.rows != device.rows:
        raise XdnaImageError(name, "LOOM ABI note", f"the image addresses {note.rows} rows; the device's contexts have {device.rows}")
    if note.columns != columns:
        raise ColumnError(f"columns: {name} was built for a {note.columns}-column context; it loads on exactly {note.columns} columns, asked for {columns}")
    entry = image.entry(entry_name)
    label = f"entry {entry.ordinal} ({entry.name!r})" if entry.name else f"entry {entry.ordinal}"
    bindings = image.entry_bindings(entry)
    used = contract.used
    if len(bindings) != len(used):
        raise BindingListError(f"contract: {name} {label} takes {len(bindings)} bindings; the contract has {len(used)} used bindings "
                               "(launch lists contain only used bindings)")
    relocations = image.entry_relocations(entry)
    patched = set()
    for r in relocations:
        index = r.binding - entry.first_binding
        if not 0 <= index < len(used):
            raise BindingListError(f"contract: {name} {label}: relocation {r.ordinal} patches binding {index}, beyond the contract's {len(used)} used bindings")
        patched.add(index)
        slot = used[index]
        if r.alignment > slot.alignment or r.addend % r.alignment:
            raise AlignmentError(f"contract: {name} {label}: relocation {r.ordinal} needs {r.alignment}-byte aligned values "
                                 f"(addend {r.addend}); {slot.describe(index)} guarantees {slot.alignment}")
        if not 0 <= r.addend < slot.length:
            raise BindingLengthError(f"contract: {name} {label}: relocation {r.ordinal} addresses byte {r.addend} of {slot.describe(index)}, "
                                     f"outside its {slot.length} bytes")
    for i, (record, slot) in enumerate(zip(bindings, used)):
        if record.kind != F.BindingKind.BUFFER:
            raise XdnaImageError(name, "BINDINGS", f"binding {record.ordinal} is a scalar; the NPU launch ABI binds buffers only")
        if i not in patched:
            raise BindingListError(f"contract: {name} {label}: binding {i} is never patched into the CONTROL program; "
                                   "a launch list carries only bindings the program uses")
        access = _ACCESS[record.access]
        if access != slot.access:
            raise AccessModeError(f"contract: {name} {label}: binding {i} is {_NAMES[access]}, {slot.describe(i)} says {_NAMES[slot.access]}")  # type: ignore[index]
        if slot.length < record.minimum_length:
            raise BindingLengthError(f"contract: {slot.describe(i)} has {slot.length} bytes; {name} {label} needs at least {record.minimum_length}")
        if slot.alignment < record.minimum_alignment:
            raise AlignmentError(f"contract: {slot.describe(i)} guarantees {slot.alignment}-byte alignment; {name} {label} needs {record.minimum_alignment}")
    instructions = lower_entry(image, entry)
    size = len(instructions.template)
    if size > device.instruction_max_bytes or size % device.instruction_granularity:
        raise XdnaImageError(name, f"CONTROL program header {entry.control}",
                             f"the lowered instruction stream has {size} bytes; the device takes at most {device.instruction_max_bytes} "
                             f"in {device.instruction_granularity}-byte units")
    return Qualified(image, entry, bindings, instructions)


__all__ = ["DeviceLimits", "Qualified", "qualify"]
