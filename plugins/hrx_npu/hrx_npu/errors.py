"""Typed errors of the NPU programming model.

Every contract violation is raised before anything is launched (a rejected call
changes nothing) and is an :class:`~hrx_core.errors.InvalidArgument`, so code that
catches HRX's validation errors catches these too.
"""

from __future__ import annotations

from hrx_core.errors import InvalidArgument


class ContractViolation(InvalidArgument):
    """A launch or a load does not satisfy the program's :class:`KernelContract`."""


class BindingLengthError(ContractViolation):
    """A binding's length differs from the length its contract declares."""


class AlignmentError(ContractViolation):
    """A binding's device address is not aligned as its contract requires."""


class AccessModeError(ContractViolation):
    """A binding's declared access differs from its contract's access mode."""


class ColumnError(ContractViolation):
    """A program asks for more array columns than the device has (or fewer than 1)."""


class BindingListError(ContractViolation):
    """The launch buffer list is malformed: wrong count, an unused binding in it, or
    an unused binding in the middle of the contract (the original's image validator
    rejects that relocation)."""


__all__ = [
    "AccessModeError",
    "AlignmentError",
    "BindingLengthError",
    "BindingListError",
    "ColumnError",
    "ContractViolation",
]
