"""Code objects and kernel arguments of the amdgpu engine.

A ``gfx1151`` artifact is an AMDGPU code object (code object v5). Loading reads it with
:class:`hrx_amdf.codeobject.CodeObject`, places its load image (relocations applied)
in executable memory, and derives per kernel what every dispatch needs once: the
program address and COMPUTE_PGM_RSRC1/2/3 words (RSRC2 with the LDS allocation the
descriptor's group segment needs), the user-SGPR slot of the kernarg pointer, and the
kernarg layout from the code object's metadata -- explicit arguments in HRX's order
(buffers, then scalars) and the hidden arguments a code object v5 kernel reads (block
counts, group sizes, remainders, grid dimensions).

On the simulated Strix Halo the load is registered with the simulation together with
the kernel's host implementation (``Artifact.reference``), which it runs in place of
the ISA; nothing of that happens on libamdf.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hrx_amdf.codeobject import CodeObject
from hrx_core.engine import Artifact, BufferArg, Executable, KernelArg, PreparedDispatch
from hrx_core.errors import CompileError, InvalidArgument, Unsupported

from .encode import pm4

if TYPE_CHECKING:
    from .device import AmdgpuDevice
    from .queue import AmdgpuQueue

#: Kernarg blocks are placed at this alignment (the AQL packet needs 16).
KERNARG_ALIGN = 64


class KernelLayout:
    """Everything a dispatch of one kernel needs, derived once from its code object."""

    def __init__(self, code: CodeObject, name: str, base: int, apertures: tuple[int, int]) -> None:
        kernel = code.kernel(name)
        self.name = name
        self.kernel = kernel
        kd = kernel.descriptor
        self.descriptor_address = kernel.descriptor_address(base)
        self.entry_address = kernel.entry_address(base)
        if self.entry_address % 256:
            raise CompileError(f"{name}: entry {self.entry_address:#x} is not 256-byte aligned (COMPUTE_PGM_LO counts 256 bytes)")
        self.group_segment = kd.group_segment_fixed_size
        self.private_segment = kd.private_segment_fixed_size
        if self.private_segment or kernel.uses_dynamic_stack:
            raise Unsupported(f"kernel {name!r} needs {self.private_segment} bytes of scratch per lane; the amdgpu engine runs scratch-free kernels")
        self.wave32 = kernel.wavefront_size == 32
        self.max_block = kernel.max_flat_workgroup_size
        self.kernarg_size = max(kernel.kernarg_segment_size, 0)
        unsupported = {s.name for s in kernel.user_sgprs} - {"kernarg_segment_ptr"}
        if unsupported:
            raise Unsupported(f"kernel {name!r} enables user SGPRs {sorted(unsupported)}; HRX's dispatch fills only the kernarg pointer")
        found = kernel.user_sgpr("kernarg_segment_ptr")
        self.kernarg_sgpr = found[0] if found is not None else None
        self.user_sgpr_count = kd.user_sgpr_count
        lds_units = -(-self.group_segment // pm4.LDS_GRANULE)
        rsrc2 = (kd.compute_pgm_rsrc2 & ~pm4.LDS_SIZE_MASK) | (lds_units << pm4.LDS_SIZE_SHIFT)
        entry = self.entry_address >> 8
        self.program_words = (
            pm4.set_sh_reg(pm4.COMPUTE_PGM_LO, [entry & 0xFFFFFFFF, entry >> 32])
            + pm4.set_sh_reg(pm4.COMPUTE_PGM_RSRC1, [kd.compute_pgm_rsrc1, rsrc2])
            + pm4.set_sh_reg(pm4.COMPUTE_PGM_RSRC3, [kd.compute_pgm_rsrc3])
        )
        explicit = [a for a in kernel.args if not a.value_kind.startswith("hidden_")]
        self.pointers = [(a.offset, a.size) for a in explicit if a.value_kind == "global_buffer"]
        self.values = [(a.offset, a.size) for a in explicit if a.value_kind == "by_value"]
        if len(self.pointers) + len(self.values) != len(explicit) or explicit[: len(self.pointers)] != [
            a for a in explicit if a.value_kind == "global_buffer"
        ]:
            raise Unsupported(f"kernel {name!r}: HRX kernels take global pointers first, then values; got {[a.value_kind for a in explicit]}")
        self.hidden: dict[str, tuple[int, int]] = {a.value_kind: (a.offset, a.size) for a in kernel.args if a.value_kind.startswith("hidden_")}
        self.apertures = {"hidden_shared_base": apertures[0], "hidden_private_base": apertures[1]}

    def check_args(self, args: Sequence[KernelArg]) -> None:
        buffers = sum(1 for a in args if isinstance(a, BufferArg))
        if buffers != len(self.pointers) or len(args) - buffers != len(self.values):
            raise InvalidArgument(
                f"kernel {self.name!r} takes {len(self.pointers)} buffers and {len(self.values)} scalars, got {buffers} and {len(args) - buffers}"
            )

    def pack(self, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> tuple[bytearray, list[tuple[int, int]]]:
        """(kernarg bytes, [(pointer, byte length) per buffer]) of one dispatch."""
        self.check_args(args)
        raw = bytearray(self.kernarg_size)
        extents: list[tuple[int, int]] = []
        pointer_index = value_index = 0
        for arg in args:
            if isinstance(arg, BufferArg):
                offset, size = self.pointers[pointer_index]
                address = arg.buffer.address + arg.offset  # type: ignore[attr-defined]
                raw[offset : offset + 8] = address.to_bytes(8, "little")
                extents.append((address, arg.length))
                pointer_index += 1
            else:
                offset, size = self.values[value_index]
                data = np.asarray(arg).tobytes()
                if len(data) != size:
                    raise InvalidArgument(f"kernel {self.name!r}: scalar {value_index} is {len(data)} bytes, the kernel takes {size}")
                raw[offset : offset + size] = data
                value_index += 1
        self.pack_hidden(raw, grid, block)
        return raw, extents

    def pack_hidden(self, raw: bytearray, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
        dims = rank(grid, block)
        values = {
            "hidden_block_count_x": grid[0], "hidden_block_count_y": grid[1], "hidden_block_count_z": grid[2],
            "hidden_group_size_x": block[0], "hidden_group_size_y": block[1], "hidden_group_size_z": block[2],
            "hidden_remainder_x": 0, "hidden_remainder_y": 0, "hidden_remainder_z": 0,
            "hidden_grid_dims": dims, **self.apertures,
        }  # fmt: skip
        for kind, (offset, size) in self.hidden.items():
            raw[offset : offset + size] = (values.get(kind, 0) & ((1 << (8 * size)) - 1)).to_bytes(size, "little")

    def set_pointer(self, raw: bytearray, extents: list[tuple[int, int]], index: int, arg: BufferArg) -> None:
        offset, _ = self.pointers[index]
        address = arg.buffer.address + arg.offset  # type: ignore[attr-defined]
        raw[offset : offset + 8] = address.to_bytes(8, "little")
        extents[index] = (address, arg.length)

    def pm4_words(self, grid: tuple[int, int, int], block: tuple[int, int, int]) -> tuple[list[int], int | None]:
        """PM4 words of one dispatch, and the index of the kernarg-address low dword
        in them (the caller patches the address), or None without kernargs."""
        words = list(self.program_words)
        words += pm4.set_sh_reg(pm4.COMPUTE_START_X, [0, 0, 0, block[0], block[1], block[2]])
        fixup = None
        if self.kernarg_sgpr is not None:
            user = [0] * self.user_sgpr_count
            words += pm4.set_sh_reg(pm4.COMPUTE_USER_DATA_0, user)
            fixup = len(words) - self.user_sgpr_count + self.kernarg_sgpr
        words += pm4.dispatch_direct(grid[0] * block[0], grid[1] * block[1], grid[2] * block[2], wave32=self.wave32)
        return words, fixup


def rank(grid: tuple[int, int, int], block: tuple[int, int, int]) -> int:
    if grid[2] > 1 or block[2] > 1:
        return 3
    if grid[1] > 1 or block[1] > 1:
        return 2
    return 1


class AmdgpuExecutable(Executable):
    """A code object loaded into executable memory, and its entry kernel's layout."""

    target = "gfx1151"

    def __init__(self, device: AmdgpuDevice, artifact: Artifact) -> None:
        if artifact.target != "gfx1151" or not isinstance(artifact.code, (bytes, bytearray)):
            raise InvalidArgument(f"the amdgpu engine loads gfx1151 code objects, got target {artifact.target!r}")
        self.device = device
        code = CodeObject(bytes(artifact.code))
        if code.target != device.info.properties["target"]:
            raise CompileError(f"code object for {code.target}, the device is {device.info.properties['target']}")
        self.code = code
        self.name = artifact.entry
        size = -(-(code.image_size + 256) // 4096) * 4096  # image plus the instruction prefetch tail
        self.memory = device._create_memory(size, coherent=True)
        self.base = self.memory.address()
        mapping = self.memory.map()
        try:
            image = code.load_image(self.base)
            mapping.array[: len(image)] = np.frombuffer(image, dtype=np.uint8)
        finally:
            mapping.destroy()
        self.layout = KernelLayout(code, artifact.entry, self.base, device.apertures)
        device._register_code(self, bytes(artifact.code), artifact)
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.device._release_executable(self)


class AmdgpuPreparedDispatch(PreparedDispatch):
    """A dispatch packed once: its kernarg block and register words are kept, each
    launch copies the block into the submission's own memory (so a later
    :meth:`set_arg` never changes bytes a queued launch will read)."""

    def __init__(self, executable: AmdgpuExecutable, grid: tuple[int, int, int], block: tuple[int, int, int], args: Sequence[KernelArg]) -> None:
        super().__init__(executable, grid, block, args)
        self.layout = executable.layout
        self.kernargs, self.extents = self.layout.pack(grid, block, args)
        self.words, self.fixup = self.layout.pm4_words(grid, block)

    def launch(self, queue: AmdgpuQueue) -> None:  # type: ignore[override]
        queue.dispatch_packed(self.layout, self.grid, self.block, bytes(self.kernargs), list(self.extents), self.words, self.fixup)

    def bind(self, queue: AmdgpuQueue) -> Callable[[], None]:  # type: ignore[override]
        return functools.partial(self.launch, queue)

    def set_arg(self, index: int, arg: BufferArg) -> None:
        buffers = [i for i, a in enumerate(self.args) if isinstance(a, BufferArg)]
        position = buffers.index(index) if index in buffers else None
        if position is None:
            raise InvalidArgument(f"argument {index} of {self.layout.name!r} is not a buffer")
        self.layout.set_pointer(self.kernargs, self.extents, position, arg)
        self._replace_arg(index, arg)

    def set_scalar(self, index: int, value: Any) -> None:
        """Write scalar argument ``index`` into the kept kernarg block (each launch
        copies the block into its submission's memory, so queued launches keep theirs)."""
        self._check_scalar_index(index)
        position = index - len(self.layout.pointers)  # (buffers come first)
        offset, size = self.layout.values[position]
        data = np.asarray(value).tobytes()
        if len(data) != size:
            raise InvalidArgument(f"kernel {self.layout.name!r}: scalar {position} is {len(data)} bytes, the kernel takes {size}")
        super().set_scalar(index, value)
        self.kernargs[offset : offset + size] = data


__all__ = ["AmdgpuExecutable", "AmdgpuPreparedDispatch", "KernelLayout", "rank", "KERNARG_ALIGN"]
