"""Text to token ids and back through a checkpoint's own tokenizer files.

The work is done by Hugging Face's ``tokenizers`` library; this module finds the files
and checks them. A checkpoint directory (or hub snapshot) holds either

* ``tokenizer.json`` -- the library's full description (normalizer, pre-tokenizer,
  model, decoder), read as it is; or
* ``vocab.json`` + ``merges.txt`` -- GPT-2's byte-level BPE files, from which the
  library builds a byte-level BPE tokenizer (``ByteLevelBPETokenizer``), as GPT-2's
  own tokenizer does.

``tokenizer.json`` wins where both exist. Unreadable or malformed files raise
:class:`~hrx_core.errors.ArtifactError` naming the file; a directory with neither raises
:class:`MissingTokenizer`; without the ``tokenizers`` package installed,
:class:`~hrx_core.errors.Unsupported` says how to install it.

    tok = Tokenizer.load("ckpt/")
    ids = tok.encode("Hello world")
    assert tok.decode(ids) == "Hello world"
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hrx_core.artifacts.files import fspath, read_regular
from hrx_core.errors import ArtifactError, InvalidArgument, Unsupported, show

#: The tokenizer files a checkpoint may carry, in order of preference.
TOKENIZER_JSON = "tokenizer.json"
BPE_FILES = ("vocab.json", "merges.txt")
CHOICES: tuple[tuple[str, ...], ...] = ((TOKENIZER_JSON,), BPE_FILES)
#: Largest tokenizer file read (GPT-2's tokenizer.json is 1.4 MB; large vocabularies ~20 MB).
MAX_FILE_BYTES = 256 << 20


class MissingTokenizer(ArtifactError):
    """A checkpoint has no tokenizer files (neither tokenizer.json nor vocab.json + merges.txt)."""


def _library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise Unsupported(
            "text prompts need the 'tokenizers' package (Hugging Face): pip install tokenizers "
            "(or pass token ids with --prompt-ids / a list of ints)"
        ) from None
    return tokenizers


def describe_choices() -> str:
    """``"tokenizer.json (or vocab.json + merges.txt)"``: what a checkpoint needs for text."""
    return f"{TOKENIZER_JSON} (or {' + '.join(BPE_FILES)})"


def _read_text(path: Path) -> str:
    raw = read_regular(path, limit=MAX_FILE_BYTES, what=str(path))  # never a FIFO or /dev/zero
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{path}: not UTF-8 ({exc})") from None


class Tokenizer:
    """A checkpoint's tokenizer: :meth:`encode` text to ids, :meth:`decode` ids to text."""

    def __init__(self, backend: Any, source: str) -> None:
        self._backend = backend
        self.source = source

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Tokenizer:
        """The tokenizer of a checkpoint directory (``tokenizer.json``, else GPT-2's
        ``vocab.json`` + ``merges.txt``)."""
        folder = Path(fspath("directory", directory))
        lib = _library()
        path = folder / TOKENIZER_JSON
        if path.exists():
            text = _read_text(path)
            try:
                backend = lib.Tokenizer.from_str(text)
            except Exception as exc:  # the library raises Exception subclasses of its own
                raise ArtifactError(f"{path}: not a tokenizer description the tokenizers library reads: {exc}") from None
            return cls(backend, str(path))
        vocab, merges = (folder / name for name in BPE_FILES)
        if vocab.exists() and merges.exists():
            for p in (vocab, merges):
                _read_text(p)  # a regular UTF-8 file of bounded size before the library opens it
            try:
                backend = lib.Tokenizer(lib.models.BPE.from_file(str(vocab), str(merges)))
            except Exception as exc:
                raise ArtifactError(f"{vocab} + {merges}: not a byte-level BPE vocabulary: {exc}") from None
            backend.pre_tokenizer = lib.pre_tokenizers.ByteLevel(add_prefix_space=False)
            backend.decoder = lib.decoders.ByteLevel()
            return cls(backend, f"{vocab} + {merges.name}")
        raise MissingTokenizer(f"{folder}: no tokenizer: the checkpoint needs {describe_choices()} for text")

    def __repr__(self) -> str:
        return f"<hrx_models.Tokenizer {self.vocab_size} tokens from {self.source}>"

    @property
    def vocab_size(self) -> int:
        """Tokens the tokenizer can produce (added tokens included)."""
        return int(self._backend.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        if not isinstance(text, str):
            raise InvalidArgument(f"text: expected a str, got {type(text).__name__}")
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """The text of token ids (special tokens kept)."""
        try:
            arr = np.asarray(ids)
        except (TypeError, ValueError):
            raise InvalidArgument(f"ids: not a sequence of token ids ({type(ids).__name__})") from None
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InvalidArgument(f"ids: expected a 1-D sequence of integer token ids, got {show(ids)}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.vocab_size):
            bad = int(arr.min()) if int(arr.min()) < 0 else int(arr.max())
            raise InvalidArgument(f"ids: token id {bad} is outside 0..{self.vocab_size - 1} (the tokenizer's vocabulary)")
        return str(self._backend.decode([int(t) for t in arr], skip_special_tokens=False))


__all__ = ["BPE_FILES", "CHOICES", "TOKENIZER_JSON", "MissingTokenizer", "Tokenizer", "describe_choices"]
