"""Where a checkpoint comes from: a local directory or a Hugging Face Hub repository.

:func:`resolve_checkpoint` turns what a user typed (``--model``) into a directory holding
``config.json``, ``model.safetensors`` and, when text is wanted, the tokenizer files. An
existing directory is used as it is. Anything else that reads as a repo id (``gpt2``,
``org/name``) is resolved through :class:`hrx_core.artifacts.hf.Resolver` into the hub
cache -- cached files first, downloads only when the network is there -- and the
snapshot directory is returned. Offline (``HF_HUB_OFFLINE`` or ``offline=True``) or
without network, a missing file fails at once with :class:`~hrx_core.artifacts.hf.MissingFiles`
listing everything missing and how to fetch it.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from hrx_core.artifacts.files import fspath
from hrx_core.errors import ArtifactError, InvalidArgument, show

from .gpt2.config import CONFIG_FILE, WEIGHTS_FILE
from .gpt2.errors import ConfigError
from .tokenizer import BPE_FILES, CHOICES, TOKENIZER_JSON, describe_choices

#: What a repo id looks like ("name" or "org/name"); anything else is a path.
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
CHECKPOINT_FILES = (CONFIG_FILE, WEIGHTS_FILE)
log = logging.getLogger("hrx.models")


def is_repo_id(model: str) -> bool:
    """Whether ``model`` reads as a hub repo id rather than a path (``./x`` and ``/x`` are paths)."""
    return bool(_REPO_ID.fullmatch(model)) and not model.endswith((".", "-"))


def resolve_checkpoint(
    model: str | os.PathLike[str],
    *,
    tokenizer: bool | None = False,
    revision: str | None = None,
    offline: bool | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> Path:
    """The directory of checkpoint ``model``: a local directory, or a hub repo id resolved
    into the hub cache (``revision``, ``offline``, ``cache_dir`` and ``progress`` go to
    :class:`~hrx_core.artifacts.hf.Resolver`). The tokenizer files (``tokenizer.json``,
    else ``vocab.json`` + ``merges.txt``) are required with ``tokenizer=True``, fetched
    where the repository and the network (or cache) have them with ``None``, and left
    alone with ``False``.
    """
    text = fspath("model", model)
    if tokenizer is not None and not isinstance(tokenizer, bool):
        raise InvalidArgument(f"tokenizer: expected a bool or None, got {show(tokenizer)}")
    if os.path.isdir(text):
        if revision is not None:
            raise InvalidArgument(f"revision: {revision!r} applies to hub repo ids, and {text!r} is a local directory")
        return Path(text)
    if not is_repo_id(text):
        raise ConfigError(f"model: {text!r} is not a directory (a checkpoint directory holds {' and '.join(CHECKPOINT_FILES)}), "
                          "nor a Hugging Face repo id such as 'gpt2' or 'org/name'")
    from hrx_core.artifacts.hf import MissingFiles, Resolver

    resolver = Resolver(text, revision=revision, offline=offline, cache_dir=cache_dir, progress=progress)
    wanted = list(CHECKPOINT_FILES)
    if tokenizer is not False:  # the first tokenizer form fully cached, else tokenizer.json
        wanted += next((list(c) for c in CHOICES if not resolver.missing(list(c))), [TOKENIZER_JSON])
    tokenizer_files = {TOKENIZER_JSON, *BPE_FILES}
    try:
        paths = resolver.resolve(wanted)
    except MissingFiles as exc:
        if tokenizer is None and set(exc.missing) <= tokenizer_files:
            paths = resolver.resolve(list(CHECKPOINT_FILES))  # cached: the tokenizer is optional
        else:
            missing = [describe_choices() if tokenizer is not False and n == TOKENIZER_JSON else n for n in exc.missing]
            raise MissingFiles(
                f"{text!r} is not a local directory, and {exc.reason}: the hub cache {str(resolver.cache_dir)!r} "
                f"lacks {', '.join(missing)} of that repo (revision {resolver.commit or resolver.revision!r}); {exc.hint}",
                exc.missing,
                reason=exc.reason,
                hint=exc.hint,
            ) from None
    except ArtifactError as exc:
        if tokenizer is False or TOKENIZER_JSON not in wanted or not _entry_not_found(exc):
            raise
        try:  # the repository has no tokenizer.json: GPT-2's vocab.json + merges.txt instead
            paths = resolver.resolve([*CHECKPOINT_FILES, *BPE_FILES])
        except ArtifactError as again:
            if tokenizer is not None or not _entry_not_found(again):
                raise
            paths = resolver.resolve(list(CHECKPOINT_FILES))  # none at all: optional
    log.info("model %r: %s from the hub cache (%s)", text, ", ".join(paths), paths[CONFIG_FILE].parent)
    return paths[CONFIG_FILE].parent


def _entry_not_found(exc: BaseException) -> bool:
    """Whether the hub answered that a file does not exist in the repository."""
    cause = exc.__cause__
    try:
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError
    except ImportError:  # pragma: no cover - an older huggingface_hub
        return False
    return isinstance(cause, EntryNotFoundError) and not isinstance(cause, LocalEntryNotFoundError)


__all__ = ["CHECKPOINT_FILES", "is_repo_id", "resolve_checkpoint"]
