"""Building NPU programs for a device, and the programs the examples use.

:func:`artifact_for` compiles the first of a program's sources that the device runs
(``device.info.targets`` order: C through cffi on npu-host, else the numpy callable),
through ``hrx_core.compile`` (cached in memory and, for C, on disk).

:func:`load_matmul8x8` loads a batched 8x8 BF16 matrix multiplication with FP32
outputs: ``C[t] = A[t] @ B[t]`` for ``t < M``, summed in k order so that
:func:`matmul8x8_reference` reproduces it bit for bit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

import hrx_core as hrx
from hrx_core.engine import Artifact
from hrx_core.errors import CompileError, Unsupported

from .contract import BufferContract, KernelContract

if TYPE_CHECKING:
    from .device import NpuDevice, NpuProgram

#: ``HRX_NPU_C=0`` skips C sources (numpy programs only).
ENV_C = "HRX_NPU_C"


def _host_build(entry: str, sources: Mapping[str, Any]) -> Artifact | None:
    """The program's host build (C, else numpy), the simulation's reference of an image."""
    for target in ("npu-host-c", "host"):
        source = sources.get(target)
        if source is None or (target == "npu-host-c" and os.environ.get(ENV_C, "1") == "0"):
            continue
        try:
            return hrx.compile(source, target=target, entry=entry)
        except CompileError:
            continue
    return None


def _xdna_image(entry: str, sources: Mapping[str, Any], simulated: bool) -> Artifact | None:
    """An ``xdna`` artifact: ``sources["xdna"]`` (an Artifact, bytes or a path), else
    ``$HRX_XDNA_IMAGES/<entry>.xdna`` -- images HRX's compiler wrote."""
    from .xdna.artifact import ENV_IMAGES, image_artifact

    source = sources.get("xdna")
    if isinstance(source, Artifact):
        return source
    if source is None:
        folder = os.environ.get(ENV_IMAGES, "")
        path = os.path.join(folder, f"{entry}.xdna") if folder else ""
        if not path or not os.path.isfile(path):
            return None
        source = path
    return image_artifact(source, entry=entry, reference=_host_build(entry, sources) if simulated else None)


def artifact_for(device: NpuDevice, entry: str, sources: Mapping[str, Any]) -> Artifact:
    """Compile the first source in ``sources`` (by target) that ``device`` runs.

    A C build that fails (no compiler) falls back to the next target, if any. For the
    ``xdna`` target the source is a compiled image: ``sources["xdna"]`` or
    ``$HRX_XDNA_IMAGES/<entry>.xdna`` (on the simulation its host build is the
    reference; without an image the simulation loads the host build through a stand-in)."""
    errors = []
    for target in device.info.targets:
        if target == "xdna":
            image = _xdna_image(entry, sources, simulated=bool(getattr(device.native, "simulated", False)))
            if image is not None:
                return image
            continue
        source = sources.get(target)
        if source is None or (target == "npu-host-c" and os.environ.get(ENV_C, "1") == "0"):
            continue
        try:
            return hrx.compile(source, target=target, entry=entry)
        except CompileError as exc:
            errors.append(exc)
    if errors:
        raise errors[-1]
    hint = ""
    if "xdna" in device.info.targets:
        hint = f"; put HRX's compiled {entry}.xdna in $HRX_XDNA_IMAGES (or pass sources['xdna'])"
    raise Unsupported(f"program {entry!r} has sources for {', '.join(sources) or 'no target'}; {device.name} runs {', '.join(device.info.targets)}{hint}")


MATMUL8X8_C = r"""
/* Batched 8x8 BF16 matmul, FP32 out. Buffers: A, B (M*64 bf16), C (M*64 f32).
   Column c of `columns` handles a contiguous share of the M matrices. The widened
   B tile lives in the column's tile memory (scratch). */
HRX_NPU_PROGRAM(hrx_matmul8x8_bf16) {
    const uint16_t *a = (const uint16_t *)buffers[0];
    const uint16_t *b = (const uint16_t *)buffers[1];
    float *c = (float *)buffers[2];
    int64_t m = lengths[2] / 256;
    int64_t per = (m + columns - 1) / columns;
    int64_t lo = (int64_t)column * per, hi = lo + per < m ? lo + per : m;
    float *bt = (float *)scratch;
    float af[64];
    (void)nbuffers; (void)scratch_bytes;
    for (int64_t t = lo; t < hi; ++t) {
        const uint16_t *at = a + t * 64, *btile = b + t * 64;
        for (int i = 0; i < 64; ++i) { af[i] = hrx_bf16_to_f32(at[i]); bt[i] = hrx_bf16_to_f32(btile[i]); }
        float *ct = c + t * 64;
        for (int i = 0; i < 8; ++i) {
            for (int j = 0; j < 8; ++j) {
                float acc = 0.0f;
                for (int k = 0; k < 8; ++k) acc += af[i * 8 + k] * bt[k * 8 + j];
                ct[i * 8 + j] = acc;
            }
        }
    }
}
"""


def matmul8x8_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """FP32 products of BF16 ``[M, 8, 8]`` matrices, summed in k order (exact match)."""
    af = np.asarray(a).view(ml_dtypes.bfloat16).reshape(-1, 8, 8).astype(np.float32)
    bf = np.asarray(b).view(ml_dtypes.bfloat16).reshape(-1, 8, 8).astype(np.float32)
    acc = np.zeros((af.shape[0], 8, 8), np.float32)
    for k in range(8):
        acc += af[:, :, k, None] * bf[:, None, k, :]
    return acc


def matmul8x8_numpy(a: np.ndarray, b: np.ndarray, c: np.ndarray, *, scratch: np.ndarray, column: int, columns: int) -> None:
    """The numpy build of the program (used where no C compiler is available)."""
    m = c.nbytes // 256
    per = -(-m // columns)
    lo, hi = column * per, min(m, (column + 1) * per)
    if lo < hi:
        c.view(np.float32).reshape(-1, 8, 8)[lo:hi] = matmul8x8_reference(a[lo * 128 : hi * 128], b[lo * 128 : hi * 128])


MATMUL8X8_SOURCES = {"npu-host-c": MATMUL8X8_C, "host": matmul8x8_numpy}


def matmul8x8_contract(m: int) -> KernelContract:
    return KernelContract(
        [BufferContract.read(m * 128, name="A"), BufferContract.read(m * 128, name="B"), BufferContract.write(m * 256, name="C")],
        scratch_bytes=256,
    )


def load_matmul8x8(device: NpuDevice, m: int, *, columns: int = 1) -> NpuProgram:
    """Load the batched 8x8 BF16 matmul for ``m`` matrices on ``columns`` columns."""
    art = artifact_for(device, "hrx_matmul8x8_bf16", MATMUL8X8_SOURCES)
    return device.load_artifact(art, columns=columns, contract=matmul8x8_contract(m), name=f"matmul8x8[{m}]")


XOR_COPY_C = r"""
/* dst[i] = src[i] ^ key for every byte; column c handles a contiguous share. */
HRX_NPU_PROGRAM(hrx_xor_copy) {
    const uint8_t *src = buffers[0];
    uint8_t *dst = buffers[1];
    int64_t n = lengths[0], per = (n + columns - 1) / columns;
    per = (per + 63) & ~(int64_t)63;
    int64_t lo = (int64_t)column * per, hi = lo + per < n ? lo + per : n;
    (void)nbuffers; (void)scratch; (void)scratch_bytes;
    for (int64_t i = lo; i < hi; ++i) dst[i] = src[i] ^ 0x5A;
}
"""

XOR_KEY = 0x5A


def xor_copy_numpy(src: np.ndarray, dst: np.ndarray, *, scratch: np.ndarray, column: int, columns: int) -> None:
    n = len(src)
    share = -(-n // columns)                 # ceil(n / columns) ...
    per = (share + 63) // 64 * 64            # ... rounded up to 64 bytes, as the C build does
    lo, hi = column * per, min(n, (column + 1) * per)
    if lo < hi:
        np.bitwise_xor(src[lo:hi], np.uint8(XOR_KEY), out=dst[lo:hi])


def load_xor_copy(device: NpuDevice, nbytes: int, *, columns: int = 1) -> NpuProgram:
    """Load ``dst = src ^ 0x5A`` over ``nbytes`` bytes (the shared-memory examples)."""
    art = artifact_for(device, "hrx_xor_copy", {"npu-host-c": XOR_COPY_C, "host": xor_copy_numpy})
    contract = KernelContract([BufferContract.read(nbytes, name="src"), BufferContract.write(nbytes, name="dst")])
    return device.load_artifact(art, columns=columns, contract=contract, name=f"xor_copy[{nbytes}]")


__all__ = ["MATMUL8X8_C", "XOR_KEY", "artifact_for", "load_matmul8x8", "load_xor_copy", "matmul8x8_contract", "matmul8x8_numpy", "matmul8x8_reference"]
