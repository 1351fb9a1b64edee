"""GPT-2 (decoder-only transformer) for HRX: config, checkpoints, loader, kernels, decoder."""

from __future__ import annotations

from .checkpoint import write_random_checkpoint
from .config import SHAPES, Gpt2Config
from .decoder import DecoderSlot, Generation, Gpt2Decoder, TextGeneration
from .errors import CheckpointError, ConfigError, MissingTensor, TensorShapeError
from .loader import Gpt2Weights, load_weights

__all__ = [
    "SHAPES", "CheckpointError", "ConfigError", "DecoderSlot", "Generation", "Gpt2Config", "Gpt2Decoder",
    "Gpt2Weights", "MissingTensor", "TensorShapeError", "TextGeneration", "load_weights", "write_random_checkpoint",
]
