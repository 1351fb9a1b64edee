"""Gpt2Config: the shape of a GPT-2 model, read from and written to Hugging Face config.json."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from hrx_core.artifacts.files import fspath, read_regular
from hrx_core.errors import ArtifactError, Unsupported, strict_init

from .errors import ConfigError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
#: Activations GPT-2 checkpoints name for the tanh approximation of GELU.
GELU_TANH = ("gelu_new", "gelu_pytorch_tanh")
#: Limits of this decoder's kernels (checked by :meth:`Gpt2Config.check_runnable`).
K_MULTIPLE = 8            # hrx_tensor.linear and the row gathers: rows of whole 16-byte vectors
MAX_HEAD_DIM = 256        # attention keeps one head's query in shared memory
HEAD_DIMS = (8, 16, 32, 64, 128, 256)  # attention reads 16-byte vectors; hd / 8 divides its block
MAX_EMBD = 8192           # layer norms keep at most 8 values a thread, 1024 threads
MAX_POSITIONS = 8192      # attention keeps one head's scores in 32 KiB of shared memory
#: Largest config.json read (real ones are a few KiB).
MAX_CONFIG_BYTES = 1 << 20


@strict_init
@attrs.frozen
class Gpt2Config:
    """The GPT-2 hyperparameters (Hugging Face names)."""

    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_positions: int = 1024
    vocab_size: int = 50257
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_inner(self) -> int:
        return 4 * self.n_embd

    def validate(self, where: str = "config") -> Gpt2Config:
        """Raise ConfigError unless this is a well-formed GPT-2 shape; return self."""
        for name in ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where}: {name} = {value!r} is not a positive integer")
        if self.n_embd % self.n_head:
            raise ConfigError(f"{where}: n_embd = {self.n_embd} is not a multiple of n_head = {self.n_head}")
        if not isinstance(self.layer_norm_epsilon, (int, float)) or not 0 < self.layer_norm_epsilon < 1:
            raise ConfigError(f"{where}: layer_norm_epsilon = {self.layer_norm_epsilon!r} is not in (0, 1)")
        if self.activation_function not in GELU_TANH:
            raise ConfigError(
                f"{where}: activation_function = {self.activation_function!r}; this GPT-2 decoder implements "
                f"{' / '.join(GELU_TANH)} (GELU, tanh approximation)"
            )
        return self

    def check_runnable(self, where: str = "config") -> Gpt2Config:
        """Raise Unsupported where the shape exceeds this decoder's kernels; return self."""
        self.validate(where)
        if self.n_embd % K_MULTIPLE:
            raise Unsupported(
                f"{where}: n_embd = {self.n_embd} is not a multiple of {K_MULTIPLE}: the decoder's projections and row "
                f"gathers read rows of whole 16-byte vectors (hrx_tensor.linear needs K % {K_MULTIPLE} == 0)"
            )
        if self.n_embd > MAX_EMBD:
            raise Unsupported(f"{where}: n_embd = {self.n_embd} exceeds {MAX_EMBD} (layer norms run in one block)")
        if self.head_dim not in HEAD_DIMS:
            raise Unsupported(
                f"{where}: head dimension n_embd / n_head = {self.head_dim} is not one of {', '.join(map(str, HEAD_DIMS))} "
                f"(attention reads K/V rows as 16-byte vectors)"
            )
        if self.n_positions > MAX_POSITIONS:
            raise Unsupported(f"{where}: n_positions = {self.n_positions} exceeds {MAX_POSITIONS} (attention scores live in shared memory)")
        if self.vocab_size >= 2**31:
            raise Unsupported(f"{where}: vocab_size = {self.vocab_size} exceeds {2**31 - 1}")
        return self

    # -- Hugging Face config.json --------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, where: str = "config") -> Gpt2Config:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
        kwargs: dict[str, Any] = {}
        for field in attrs.fields(cls):
            if field.name in data:
                kwargs[field.name] = data[field.name]
            elif field.name == "n_positions" and "n_ctx" in data:
                kwargs["n_positions"] = data["n_ctx"]
            elif field.name in ("n_embd", "n_layer", "n_head", "vocab_size"):
                raise ConfigError(f"{where}: missing {field.name!r}")
        if data.get("tie_word_embeddings", True) is not True:
            raise ConfigError(f"{where}: tie_word_embeddings = {data['tie_word_embeddings']!r}; this decoder ties "
                              "the output projection to the token embeddings")
        if data.get("n_inner") not in (None, 4 * kwargs.get("n_embd", 0)):
            raise ConfigError(f"{where}: n_inner = {data['n_inner']!r}; this decoder implements n_inner = 4 * n_embd")
        return cls(**kwargs).validate(where)

    def to_dict(self) -> dict[str, Any]:
        """The config.json of a Hugging Face GPT2LMHeadModel of this shape."""
        return {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "activation_function": self.activation_function,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_inner": None,
            "vocab_size": self.vocab_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "bos_token_id": self.vocab_size - 1,
            "eos_token_id": self.vocab_size - 1,
            "tie_word_embeddings": True,
            "torch_dtype": "float32",
        }

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Gpt2Config:
        """Read ``directory/config.json``."""
        path = Path(fspath("directory", directory)) / CONFIG_FILE
        try:  # a regular file of bounded size: never /dev/zero, a FIFO or a directory
            raw = read_regular(path, limit=MAX_CONFIG_BYTES, what=str(path))
        except ArtifactError as exc:
            raise ConfigError(f"cannot read {exc}") from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 ({exc})") from None
        except RecursionError:
            raise ConfigError(f"{path}: JSON nested too deeply") from None
        except ValueError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from None
        return cls.from_dict(data, str(path))

    @property
    def parameters(self) -> int:
        """Parameter count (tied embeddings counted once)."""
        d, layers = self.n_embd, self.n_layer
        per_layer = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)
        return self.vocab_size * d + self.n_positions * d + layers * per_layer + 2 * d


#: Named shapes for ``hrx model init --shape``.
SHAPES = {
    "tiny": Gpt2Config(n_embd=128, n_layer=2, n_head=4, n_positions=128, vocab_size=512),
    "gpt2": Gpt2Config(),
    "gpt2-medium": Gpt2Config(n_embd=1024, n_layer=24, n_head=16),
    "1b": Gpt2Config(n_embd=2048, n_layer=24, n_head=16, n_positions=1024),
}
