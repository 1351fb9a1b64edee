"""KernelBatch: the kernels one model session loaded, with session-scoped ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidArgument, show
from ..kernel import Kernel

if TYPE_CHECKING:
    from ..device import Device


class KernelBatch:
    """Kernels loaded for one device. Ids count from 0 in each batch (each session),
    names are unique in a batch; lookups take either."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._kernels: list[Kernel] = []
        self._ids: dict[str, int] = {}

    def add(self, kernel: Kernel) -> int:
        """Load ``kernel`` (compile and load it for the device now); return its id.
        Adding the same kernel again returns its id."""
        if not isinstance(kernel, Kernel):
            raise InvalidArgument(f"kernel: expected an hrx Kernel, got {type(kernel).__name__}")
        known = self._ids.get(kernel.name)
        if known is not None:
            if self._kernels[known] is not kernel:
                raise InvalidArgument(f"kernel: another kernel named {kernel.name!r} is already loaded (id {known})")
            return known
        kernel.executable(self.device)
        self._kernels.append(kernel)
        self._ids[kernel.name] = len(self._kernels) - 1
        return len(self._kernels) - 1

    def get(self, key: int | str) -> Kernel:
        """The kernel with id or name ``key``."""
        if isinstance(key, str):
            index = self._ids.get(key)
            if index is None:
                raise InvalidArgument(f"kernel: no kernel named {key!r} (loaded: {', '.join(self._ids) or 'none'})")
            return self._kernels[index]
        if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < len(self._kernels):
            raise InvalidArgument(f"kernel: expected an id in [0, {len(self._kernels)}) or a name, got {show(key)}")
        return self._kernels[key]

    def names(self) -> tuple[str, ...]:
        return tuple(k.name for k in self._kernels)

    def copy(self) -> KernelBatch:
        """A batch sharing these kernels (and their loaded executables) and ids."""
        other = KernelBatch(self.device)
        other._kernels = list(self._kernels)
        other._ids = dict(self._ids)
        return other

    def __len__(self) -> int:
        return len(self._kernels)

    def __contains__(self, key: object) -> bool:
        return key in self._ids if isinstance(key, str) else isinstance(key, int) and 0 <= key < len(self._kernels)
