"""Kernels that move bytes in pinned host memory: copies between two pinned buffers,
and fills of pinned memory inside native graphs.

``cuMemcpyAsync`` between two host pointers is *fully synchronous* with respect to
the host (CUDA's "API synchronization behavior"): the calling thread waits for the
stream to reach the copy. Behind a ``cuStreamWaitValue64`` whose value is signalled
later from the same thread, that is a deadlock, and in every case it breaks the rule
that encoding never blocks. Pinned buffers are device-mapped, so a tiny kernel can
move the bytes through their device addresses instead, in stream order, like any
other command. The kernel is hand-written PTX (no NVRTC needed), JIT-compiled by the
driver once per device: 16-byte vectors when both addresses and the size allow it,
bytes otherwise, in a grid-stride loop.

The fill kernel serves graphs whose driver refuses a memset node on host memory; it
writes byte ``i`` as byte ``i % size`` of the little-endian pattern.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._driver import EXIT

if TYPE_CHECKING:
    from .device import CudaDevice

_INDEX = """
    ld.param.u64        %rd1, [dst];
    ld.param.u64        %rd2, [src];
    ld.param.u64        %rd3, [count];
    cvta.to.global.u64  %rd1, %rd1;
    cvta.to.global.u64  %rd2, %rd2;
    mov.u32             %r1, %ctaid.x;
    mov.u32             %r2, %ntid.x;
    mov.u32             %r3, %tid.x;
    mov.u32             %r4, %nctaid.x;
    mul.wide.u32        %rd4, %r1, %r2;
    cvt.u64.u32         %rd5, %r3;
    add.s64             %rd4, %rd4, %rd5;
    mul.wide.u32        %rd6, %r4, %r2;
"""

PTX_TEMPLATE = (
    """
.version 6.3
.target {target}
.address_size 64

.visible .entry hrx_copy16(.param .u64 dst, .param .u64 src, .param .u64 count)
{{
    .reg .pred  %p<2>;
    .reg .b32   %r<9>;
    .reg .b64   %rd<10>;
"""
    + _INDEX
    + """
COPY16_LOOP:
    setp.ge.u64         %p1, %rd4, %rd3;
    @%p1 bra            COPY16_DONE;
    shl.b64             %rd7, %rd4, 4;
    add.s64             %rd8, %rd2, %rd7;
    add.s64             %rd9, %rd1, %rd7;
    ld.global.v4.u32    {{%r5, %r6, %r7, %r8}}, [%rd8];
    st.global.v4.u32    [%rd9], {{%r5, %r6, %r7, %r8}};
    add.s64             %rd4, %rd4, %rd6;
    bra.uni             COPY16_LOOP;
COPY16_DONE:
    ret;
}}

.visible .entry hrx_fill1(.param .u64 dst, .param .u64 src, .param .u64 count, .param .u64 size)
{{
    .reg .pred  %p<2>;
    .reg .b16   %rs<2>;
    .reg .b32   %r<6>;
    .reg .b64   %rd<12>;
"""
    + _INDEX
    + """
    ld.param.u64        %rd10, [size];
FILL1_LOOP:
    setp.ge.u64         %p1, %rd4, %rd3;
    @%p1 bra            FILL1_DONE;
    rem.u64             %rd7, %rd4, %rd10;
    cvt.u32.u64         %r5, %rd7;
    shl.b32             %r5, %r5, 3;
    ld.param.u64        %rd11, [src];
    shr.b64             %rd8, %rd11, %r5;
    cvt.u16.u64         %rs1, %rd8;
    add.s64             %rd9, %rd1, %rd4;
    st.global.u8        [%rd9], %rs1;
    add.s64             %rd4, %rd4, %rd6;
    bra.uni             FILL1_LOOP;
FILL1_DONE:
    ret;
}}

.visible .entry hrx_copy1(.param .u64 dst, .param .u64 src, .param .u64 count)
{{
    .reg .pred  %p<2>;
    .reg .b16   %rs<2>;
    .reg .b32   %r<5>;
    .reg .b64   %rd<10>;
"""
    + _INDEX
    + """
COPY1_LOOP:
    setp.ge.u64         %p1, %rd4, %rd3;
    @%p1 bra            COPY1_DONE;
    add.s64             %rd8, %rd2, %rd4;
    add.s64             %rd9, %rd1, %rd4;
    ld.global.u8        %rs1, [%rd8];
    st.global.u8        [%rd9], %rs1;
    add.s64             %rd4, %rd4, %rd6;
    bra.uni             COPY1_LOOP;
COPY1_DONE:
    ret;
}}
"""
)

BLOCK = 256


def ptx_for(major: int, minor: int) -> str:
    """The PTX, targeting the device's architecture but at most sm_75 (runs on newer)."""
    arch = min(major * 10 + minor, 75)
    return PTX_TEMPLATE.format(target=f"sm_{arch}")


class MappedKernels:
    """The per-device copy and fill kernels (loaded on first use)."""

    def __init__(self, device: CudaDevice) -> None:
        self.device = device
        self._module: Any = None
        self._copy16: Any = None
        self._copy1: Any = None
        self._fill1: Any = None
        #: Why the kernels could not be loaded (then copies fall back to cuMemcpyAsync).
        self.error: Exception | None = None
        self.max_blocks = 4 * int(device.info.properties.get("multiprocessors", 32))

    def preload(self) -> None:
        """Load now (at device open: loading a module while a stream waits on a value
        that this thread signals later must be avoided). Failures are kept in ``error``."""
        try:
            self._load()
        except Exception as exc:  # noqa: BLE001
            self.error = exc

    @property
    def usable(self) -> bool:
        return self.error is None

    def _load(self) -> None:
        device = self.device
        driver = device.driver
        ffi, lib = driver.ffi, driver.lib
        major, minor = (int(x) for x in str(device.info.properties["compute_capability"]).split("."))
        image = ffi.from_buffer(ptx_for(major, minor).encode() + b"\0")
        module = ffi.new("CUmodule *")
        device._activate()
        driver.check(lib.cuModuleLoadData(module, image), "cuModuleLoadData", "pinned-memory kernels")
        functions = []
        for name in (b"hrx_copy16", b"hrx_copy1", b"hrx_fill1"):
            out = ffi.new("CUfunction *")
            code = lib.cuModuleGetFunction(out, module[0], name)
            if code:
                lib.cuModuleUnload(module[0])
                driver.check(code, "cuModuleGetFunction", name.decode())
            functions.append(out[0])
        self._module = module[0]
        self._copy16, self._copy1, self._fill1 = functions

    def copy_args(self, dst: int, src: int, nbytes: int) -> tuple[Any, tuple[int, int, int], Any, list[Any]]:
        """``(function, grid, kernelParams, storage)`` of a copy of ``nbytes``."""
        if self._module is None:
            self._load()
        if (dst | src | nbytes) % 16 == 0:
            return self._args(self._copy16, nbytes // 16, (dst, src, nbytes // 16))
        return self._args(self._copy1, nbytes, (dst, src, nbytes))

    def fill_args(self, dst: int, nbytes: int, pattern: bytes) -> tuple[Any, tuple[int, int, int], Any, list[Any]]:
        """``(function, grid, kernelParams, storage)`` of a fill of ``nbytes``."""
        if self._module is None:
            self._load()
        return self._args(self._fill1, nbytes, (dst, int.from_bytes(pattern, "little"), nbytes, len(pattern)))

    def _args(
        self, function: Any, count: int, values: tuple[int, ...]
    ) -> tuple[Any, tuple[int, int, int], Any, list[Any]]:
        ffi = self.device.driver.ffi
        blocks = max(1, min((count + BLOCK - 1) // BLOCK, self.max_blocks))
        storage = ffi.new("unsigned long long[]", list(values))
        params = ffi.new("void *[]", [storage + i for i in range(len(values))])
        return function, (blocks, 1, 1), params, [storage, params]

    def close(self) -> None:
        module, self._module = self._module, None
        if module is None or self.device.closed or EXIT.exiting:
            return
        try:
            self.device._activate()
            self.device.driver.lib.cuModuleUnload(module)
        except Exception:  # noqa: BLE001
            pass


__all__ = ["MappedKernels", "ptx_for", "BLOCK"]
