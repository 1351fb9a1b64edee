"""Typed errors of GPT-2 checkpoints: all are hrx ArtifactErrors naming the file."""

from __future__ import annotations

from hrx_core.errors import ArtifactError


class CheckpointError(ArtifactError):
    """A GPT-2 checkpoint directory is unusable (the message names the file and rule)."""


class ConfigError(CheckpointError):
    """config.json is missing, not JSON, or describes no valid GPT-2 shape."""


class MissingTensor(CheckpointError):
    """model.safetensors lacks a tensor the architecture needs."""


class TensorShapeError(CheckpointError):
    """A tensor has the wrong shape (or a non-float dtype) for the configured shape."""
