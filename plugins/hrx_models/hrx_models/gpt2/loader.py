"""Loading a Hugging Face GPT-2 checkpoint (config.json + model.safetensors) onto a device.

The safetensors file is opened through :func:`hrx_core.artifacts.open` (a mapped
:class:`~hrx_core.artifacts.safetensors.FileView`, header fully validated). Every
tensor is checked before any device memory is taken: names with or without a
``transformer.`` prefix, ``attn.bias``/``attn.masked_bias`` mask buffers and a tied
``lm_head.weight`` ignored, every parameter present (:class:`MissingTensor`
otherwise) with the configured shape and a float dtype (:class:`TensorShapeError`).
Then one allocation of the packed layout is charged to ``budget`` and filled tensor
by tensor: BF16 tensors in their final layout upload straight from the file
mapping; F32/F16 tensors are rounded to BF16 (nearest even), and Conv1D weights
(stored [in, out]) are transposed to the [out, in] = [N, K] layout of
``hrx_tensor.linear`` -- one tensor at a time, so host memory stays at one tensor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import numpy as np
from ml_dtypes import bfloat16

from hrx_core import artifacts, progress
from hrx_core.budget import MemoryBudget
from hrx_core.buffer import Buffer, View
from hrx_core.errors import InvalidArgument, Unsupported

from .checkpoint import tensor_shapes
from .config import WEIGHTS_FILE, Gpt2Config
from .errors import CheckpointError, MissingTensor, TensorShapeError
from .layout import Layout

BF16 = np.dtype(bfloat16)
FLOAT_DTYPES = ("F32", "F16", "BF16")
#: Conv1D parameters: stored [in, out], used as [out, in].
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
#: Names real checkpoints carry that the decoder does not need.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
IGNORED_NAMES = ("lm_head.weight",)


def device_shape(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The on-device shape of a parameter (Conv1D weights transposed)."""
    return shape[::-1] if name.endswith(CONV1D) else shape


def weights_layout(config: Gpt2Config) -> Layout:
    """The packed device layout of every parameter (HF names, BF16)."""
    return Layout((name, device_shape(name, shape), BF16) for name, shape in tensor_shapes(config).items())


@attrs.define
class Gpt2Weights:
    """A GPT-2's parameters on one device: one buffer, a view per HF name (no prefix)."""

    config: Gpt2Config
    layout: Layout
    buffer: Buffer
    source: str
    ignored: tuple[str, ...] = ()

    def view(self, name: str) -> View:
        return self.layout.view(self.buffer, name)

    @property
    def nbytes(self) -> int:
        return self.layout.nbytes

    def close(self) -> None:
        self.buffer.close()


def _index(view: Any, path: str) -> tuple[dict[str, str], list[str]]:
    """Map unprefixed parameter names to file names; list the ignored ones."""
    names = list(view.names())
    prefixed = [n for n in names if n.startswith("transformer.")]
    found: dict[str, str] = {}
    ignored: list[str] = []
    for n in names:
        bare = n[len("transformer."):] if prefixed and n.startswith("transformer.") else n
        if bare.endswith(IGNORED_SUFFIXES) or bare in IGNORED_NAMES:
            ignored.append(n)
            continue
        if bare in found:
            raise CheckpointError(f"{path}: tensor {bare!r} appears both with and without the 'transformer.' prefix")
        found[bare] = n
    return found, ignored


def check_tensors(view: Any, config: Gpt2Config, path: str) -> tuple[dict[str, str], list[str]]:
    """Validate names, shapes and dtypes; return (parameter -> file name, ignored names)."""
    found, ignored = _index(view, path)
    expected = tensor_shapes(config)
    missing = [n for n in expected if n not in found]
    if missing:
        shown = ", ".join(repr(n) for n in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise MissingTensor(f"{path}: missing {len(missing)} GPT-2 tensor(s) for {config.n_layer} layers: {shown}")
    for name, shape in expected.items():
        info = view.info(found[name])
        if info.dtype not in FLOAT_DTYPES:
            raise TensorShapeError(f"{path}: tensor {found[name]!r} has dtype {info.dtype}; expected one of {', '.join(FLOAT_DTYPES)}")
        if tuple(info.shape) != shape:
            hint = " (Conv1D weights are stored [in, out])" if name.endswith(CONV1D) else ""
            raise TensorShapeError(
                f"{path}: tensor {found[name]!r} has shape {list(info.shape)}, the config needs {list(shape)}{hint}"
            )
    _check_tied(view, found, ignored, path)
    extra = sorted(set(found) - set(expected))
    return found, ignored + [found[n] for n in extra]


def _check_tied(view: Any, found: dict[str, str], ignored: list[str], path: str) -> None:
    """A checkpoint's ``lm_head.weight`` is ignored only when it is the tied copy of
    ``wte.weight``; this decoder computes logits with wte, so an untied head would be
    silently replaced by it."""
    head = next((n for n in ignored if n.removeprefix("transformer.") in IGNORED_NAMES), None)
    if head is None:
        return
    wte = view.info(found["wte.weight"])
    info = view.info(head)
    same = tuple(info.shape) == tuple(wte.shape) and info.dtype == wte.dtype and \
        bytes(view.raw(head)) == bytes(view.raw(found["wte.weight"]))
    if not same:
        raise Unsupported(
            f"{path}: tensor {head!r} differs from 'wte.weight': this GPT-2 decoder ties the output "
            "projection to the token embeddings and cannot use an untied lm_head"
        )


def _device_bytes(host: np.ndarray, name: str) -> np.ndarray:
    """The BF16 bytes of parameter ``name`` in device layout (zero-copy when possible)."""
    if name.endswith(CONV1D):
        host = host.T
    if host.dtype != BF16:
        host = host.astype(BF16)  # round to nearest even (also copies into C order)
    return np.ascontiguousarray(host).reshape(-1).view(np.uint8)


def load_weights(
    directory: str | os.PathLike[str],
    stream: Any,
    *,
    budget: MemoryBudget | None = None,
    config: Gpt2Config | None = None,
) -> Gpt2Weights:
    """Load ``directory``'s GPT-2 checkpoint onto ``stream``'s device (BF16, packed).

    The allocation is charged to ``budget`` (default: the stream's budget) before it
    is made; ``BudgetExceeded`` leaves nothing allocated. Returns once the weights
    are on the device.
    """
    directory = Path(directory)
    if config is None:
        config = Gpt2Config.load(directory)
    config.check_runnable(str(directory / "config.json"))
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file (a GPT-2 checkpoint directory holds config.json and {WEIGHTS_FILE})")
    view = artifacts.open(path, mode="mapped")  # ArtifactError names the file and the rule broken
    layout = weights_layout(config)
    with view:
        found, ignored = check_tensors(view, config, str(path))
        charge_to = budget if budget is not None else stream.memory_budget
        if charge_to is not None and not isinstance(charge_to, MemoryBudget):
            raise InvalidArgument(f"budget: expected a MemoryBudget or None, got {type(charge_to).__name__}")
        buffer = stream.device.allocate(layout.nbytes, budget=charge_to)
        try:
            with progress.bar(total=layout.nbytes, desc=f"loading {path.name}", unit="B", unit_scale=True) as bar:
                for name in layout.entries:
                    target = layout.view(buffer, name)
                    stream.upload(target, _device_bytes(view.numpy(found[name]), name))
                    bar.update(target.length)
                stream.synchronize()
        except BaseException:
            buffer.close()
            raise
    return Gpt2Weights(config, layout, buffer, str(directory), tuple(ignored))
