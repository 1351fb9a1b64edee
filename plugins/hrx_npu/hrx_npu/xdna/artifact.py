"""``.xdna`` artifacts: compiled images as hrx Artifacts (target ``xdna``).

    art = hrx_npu.xdna.image_artifact("copy_i32.xdna", entry="copy_i32")
    prog = npu.load_artifact(art, columns=1, contract=...)

The image is read and checked when the artifact is made (a malformed file fails
here, naming the file, the part of the image and the rule). On the simulated NPU a
program runs through a host *reference* (its npu-host C or numpy build): pass it as
``reference=``; on hardware it is not used.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import attrs

from hrx_core.engine import Artifact
from hrx_core.errors import ArtifactError, InvalidArgument

from .image import read_image

TARGET = "xdna"
#: Directory of compiled images ``<entry>.xdna`` that :func:`hrx_npu.artifact_for` uses.
ENV_IMAGES = "HRX_XDNA_IMAGES"


@attrs.frozen
class XdnaCode:
    """The payload of an ``xdna`` artifact."""

    image: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    name: str
    #: The program's host build (target npu-host-c or host) the simulation runs.
    reference: Artifact | None = None


def image_artifact(image: bytes | str | os.PathLike[str], *, entry: str = "", reference: Artifact | None = None) -> Artifact:
    """An ``xdna`` Artifact of a compiled image (bytes or a file path)."""
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot read the .xdna image: {exc}") from None
        name = str(path)
    elif isinstance(image, (bytes, bytearray, memoryview)):
        data, name = bytes(image), "<xdna image bytes>"
    else:
        raise InvalidArgument(f"image: expected bytes or a path of an .xdna file, got {type(image).__name__}")
    if not isinstance(entry, str):
        raise InvalidArgument(f"entry: expected a str, got {type(entry).__name__}")
    if reference is not None and (not isinstance(reference, Artifact) or reference.target not in ("npu-host-c", "host")):
        raise InvalidArgument("reference: expected an npu-host-c or host Artifact (the program's host build)")
    parsed = read_image(data, name)
    parsed.entry(entry or None)  # the entry must exist
    digest = hashlib.sha256(data + entry.encode() + (reference.key.encode() if reference is not None else b"")).hexdigest()
    return Artifact(target=TARGET, entry=entry, code=XdnaCode(data, name, reference), key=digest)


def contract_of(artifact: Artifact) -> Any:
    """The ``KernelContract`` an ``xdna`` artifact's entry states: per binding, its
    minimum length, its access and the stricter of its minimum alignment and its
    relocations' (a program may be given a stricter contract, never a looser one)."""
    from ..contract import BufferContract, KernelContract
    from . import format as F

    if not isinstance(artifact, Artifact) or artifact.target != TARGET:
        raise InvalidArgument("artifact: expected an xdna Artifact (hrx_npu.xdna.image_artifact)")
    data, name, _ = image_of(artifact)
    image = read_image(data, name)
    entry = image.entry(artifact.entry or None)
    access = {F.BINDING_READ: "read", F.BINDING_WRITE: "write", F.BINDING_READ | F.BINDING_WRITE: "read_write"}
    slots = []
    for i, record in enumerate(image.entry_bindings(entry)):
        if record.kind != F.BindingKind.BUFFER:
            raise ArtifactError(f"{name}: BINDINGS: binding {record.ordinal} is a scalar; the NPU launch ABI binds buffers only")
        align = max([record.minimum_alignment] + [r.alignment for r in image.entry_relocations(entry) if r.binding - entry.first_binding == i])
        slots.append(BufferContract(record.minimum_length, access[record.access], align))
    return KernelContract(slots)


def image_of(artifact: Artifact) -> tuple[bytes, str, Any]:
    """(image bytes, file name, reference) of an ``xdna`` artifact."""
    code = artifact.code
    if isinstance(code, XdnaCode):
        return code.image, code.name, code.reference
    if isinstance(code, (bytes, bytearray)):
        return bytes(code), f"<xdna artifact {artifact.key[:12]}>", None
    raise ArtifactError(f"xdna artifact {artifact.entry!r}: code is {type(code).__name__}, not an .xdna image")


__all__ = ["ENV_IMAGES", "TARGET", "XdnaCode", "contract_of", "image_artifact", "image_of"]
