"""Resolve model files from a Hugging Face Hub repository into the standard hub cache.

:class:`Resolver` is a thin, strict layer over ``huggingface_hub`` (imported lazily, so
``import hrx_core`` does not need it). The cache is the hub's own layout
(``models--org--name/{blobs,refs,snapshots}``) written and read by ``huggingface_hub``
itself (``hf_hub_download``, ``try_to_load_from_cache``); what this module adds:

* **Pinning.** ``pin=True`` requires a 40-hex commit hash; a branch or tag name (including
  the default ``main``) is refused with :class:`~hrx_core.errors.ArtifactError`.
* **Cache first, one commit per resolver.** A commit-hash revision whose files are cached is
  served without any HTTP request. A branch or tag is resolved to a commit by the first
  online request (``Resolver.commit``); every later file of this resolver, in this and
  later ``resolve`` calls, is taken from that same commit, so one resolver always yields a
  consistent snapshot and a repeated ``resolve`` makes no request.
* **Offline.** With ``offline=True`` (or ``HF_HUB_OFFLINE`` set and ``offline=None``) nothing
  touches the network; files missing from the cache raise :class:`MissingFiles` (an
  ``ArtifactError``) whose message and ``missing`` attribute list exactly the missing files,
  with the command that fetches them.
* **No network, fast.** Before its first request a ``resolve`` checks, with one TCP
  connection bounded by ``probe_timeout`` (to the endpoint, or to the proxy the
  environment names for it), that the hub can be reached; where it cannot, the call
  behaves as offline (cached files are served, missing ones raise :class:`MissingFiles`
  naming the reason) instead of spending ``huggingface_hub``'s retries (about 23 s).
* **Verification.** Every returned file is checked against the SHA-256 given in
  ``resolve(..., sha256={name: hex})`` and against the hub's LFS SHA-256 (the ETag that
  names an LFS blob in the cache), both right after a download and when served from the
  cache. On a mismatch the blob and every snapshot entry pointing at it are removed, so the
  next resolve downloads a fresh copy, and ``ArtifactError`` is raised. A file verified
  once is not re-hashed by the same resolver while its inode, size and mtime are unchanged.
* **Progress.** Downloads show ``huggingface_hub``'s tqdm bars (which honour
  ``HF_HUB_DISABLE_PROGRESS_BARS``); ``progress=False`` turns them off.

Errors from ``huggingface_hub`` (HTTP errors, missing repo, revision or file) are raised as
``ArtifactError`` with the original exception as ``__cause__``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ArtifactError, HRXError, InvalidArgument, require, show
from .files import open_regular, pread_exact

__all__ = ["MissingFiles", "Resolver"]

_COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_REPO_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
_DEFAULT_REVISION = "main"
_HASH_CHUNK = 8 << 20
_TRUE = {"1", "ON", "YES", "TRUE"}
#: Seconds the reachability check of the hub may take (see the module docstring).
PROBE_TIMEOUT = 1.5

log = logging.getLogger("hrx.artifacts")


class MissingFiles(ArtifactError):
    """Offline resolution found files missing from the cache; ``missing`` names them,
    ``reason`` says why the network was not used (``"offline"``, ``"no network (...)"``)
    and ``hint`` how to fetch them."""

    def __init__(self, message: str, missing: Iterable[str], *, reason: str = "offline", hint: str = "") -> None:
        super().__init__(message)
        self.missing: tuple[str, ...] = tuple(missing)
        self.reason = reason
        self.hint = hint


def _hub() -> Any:
    hub = require("huggingface_hub", "hrx_core.artifacts.hf", "hf")
    require("huggingface_hub.constants", "hrx_core.artifacts.hf", "hf")
    require("huggingface_hub.utils", "hrx_core.artifacts.hf", "hf")
    return hub


def _env_offline() -> bool:
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in _TRUE:
            return True
    return False


def _sha256_file(path: Path) -> str:
    """SHA-256 of a regular file (a FIFO or device in the cache is refused, not read)."""
    digest = hashlib.sha256()
    fd, st = open_regular(path)
    try:
        offset = 0
        while offset < st.st_size:
            chunk = pread_exact(fd, min(_HASH_CHUNK, st.st_size - offset), offset, str(path))
            digest.update(chunk)
            offset += len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def unreachable(url: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why ``url``'s host (or the proxy the environment names for it) cannot be reached
    by one TCP connection within ``timeout`` seconds; None when it can. The name lookup
    counts against ``timeout`` too (it runs on a helper thread that is not waited for
    longer)."""
    result: list[str | None] = []

    def probe() -> None:
        result.append(_connect(url, timeout))

    worker = threading.Thread(target=probe, name="hrx-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    return result[0] if result else f"cannot reach {url}: no connection within {timeout:g} s"


def _connect(url: str, timeout: float) -> str | None:
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        proxies = urllib.request.getproxies()
        proxy = proxies.get(parts.scheme) or proxies.get("all")
        via = ""
        if proxy and not urllib.request.proxy_bypass(host):
            p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            host, port, via = p.hostname or "", p.port or (443 if p.scheme == "https" else 80), " (the proxy)"
    except ValueError as exc:  # a malformed port in the URL or a proxy variable
        return f"cannot reach {url}: {exc}"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except (OSError, UnicodeError, ValueError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return f"cannot reach {host}:{port}{via}: {detail}"


def _check_filename(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"filenames: each entry must be a str, got {type(name).__name__}")
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise InvalidArgument(
            f"filenames: {name!r} is not a relative path inside the repository "
            "(use '/' separators, no empty, '.' or '..' components)"
        )
    return name


class Resolver:
    """Resolve files of one hub repository to local paths in the hub cache.

    Args:
        repo_id: ``"org/name"`` (or ``"name"``) of a model repository.
        revision: branch, tag or 40-hex commit hash; ``None`` means ``"main"``.
        pin: require ``revision`` to be a commit hash (a moving revision is refused).
        cache_dir: hub cache directory; ``None`` uses huggingface_hub's default
            (``HF_HUB_CACHE`` / ``HF_HOME``).
        offline: ``True`` never touches the network; ``None`` follows ``HF_HUB_OFFLINE``.
        endpoint: hub endpoint URL; ``None`` uses huggingface_hub's (``HF_ENDPOINT``).
        token: passed to huggingface_hub (``None``: its default lookup; ``False``: none).
        progress: show download progress bars.
        probe_timeout: seconds the reachability check before a download may take.
    """

    def __init__(
        self,
        repo_id: str,
        *,
        revision: str | None = None,
        pin: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        offline: bool | None = None,
        endpoint: str | None = None,
        token: str | bool | None = None,
        progress: bool = True,
        probe_timeout: float = PROBE_TIMEOUT,
    ) -> None:
        if not isinstance(repo_id, str) or not _REPO_ID_RE.fullmatch(repo_id):
            raise InvalidArgument(f"repo_id: expected 'org/name' or 'name', got {show(repo_id)}")
        if revision is not None and (not isinstance(revision, str) or not revision.strip()):
            raise InvalidArgument(f"revision: expected a non-empty str or None, got {show(revision)}")
        if not isinstance(pin, bool):
            raise InvalidArgument(f"pin: expected a bool, got {type(pin).__name__}")
        if not isinstance(progress, bool):
            raise InvalidArgument(f"progress: expected a bool, got {type(progress).__name__}")
        if isinstance(probe_timeout, bool) or not isinstance(probe_timeout, (int, float)) or not 0 < probe_timeout <= 60:
            raise InvalidArgument(f"probe_timeout: expected seconds in (0, 60], got {show(probe_timeout)}")
        if offline is not None and not isinstance(offline, bool):
            raise InvalidArgument(f"offline: expected a bool or None, got {show(offline)}")
        if endpoint is not None and (not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://"))):
            raise InvalidArgument(f"endpoint: expected an http(s) URL, got {show(endpoint)}")
        if token is not None and not isinstance(token, (str, bool)):
            raise InvalidArgument(f"token: expected a str, bool or None, got {type(token).__name__}")
        rev = revision if revision is not None else _DEFAULT_REVISION
        if pin and not _COMMIT_RE.fullmatch(rev):
            raise ArtifactError(
                f"refusing moving revision {rev!r} of {repo_id!r}: pin=True needs a full "
                "40-hex commit hash, not a branch, tag or abbreviated hash"
            )
        self._repo_id = repo_id
        self._revision = rev
        self._pin = bool(pin)
        self._cache_dir = None if cache_dir is None else Path(cache_dir).expanduser()
        self._offline = offline
        self._endpoint = None if endpoint is None else endpoint.rstrip("/")
        self._token = token
        self._progress = bool(progress)
        self._probe_timeout = float(probe_timeout)
        self._commit: str | None = rev if _COMMIT_RE.fullmatch(rev) else None
        self._lock = threading.Lock()
        # realpath -> ((dev, ino, size, mtime_ns), sha256 hex)
        self._verified: dict[str, tuple[tuple[int, int, int, int], str]] = {}

    # -- properties ------------------------------------------------------------------

    @property
    def repo_id(self) -> str:
        return self._repo_id

    @property
    def revision(self) -> str:
        """The revision asked for (``"main"`` when none was given)."""
        return self._revision

    @property
    def commit(self) -> str | None:
        """The commit this resolver serves: the pinned hash, or the one a branch resolved to."""
        return self._commit

    @property
    def pinned(self) -> bool:
        return self._pin

    @property
    def offline(self) -> bool:
        """Whether this resolver currently refuses the network."""
        if self._offline is not None:
            return self._offline
        if _env_offline():
            return True
        constants = getattr(_hub(), "constants", None)
        return bool(getattr(constants, "HF_HUB_OFFLINE", False))

    @property
    def cache_dir(self) -> Path:
        if self._cache_dir is not None:
            return self._cache_dir
        return Path(_hub().constants.HF_HUB_CACHE)

    def __repr__(self) -> str:
        return (
            f"Resolver({self._repo_id!r}, revision={self._revision!r}, commit={self._commit!r}, "
            f"pin={self._pin}, cache_dir={str(self.cache_dir)!r})"
        )

    # -- public API ------------------------------------------------------------------

    def missing(self, filenames: str | Iterable[str]) -> list[str]:
        """The files of ``filenames`` that are not in the cache (no network, no hashing)."""
        hub = _hub()
        return [n for n in self._names(filenames) if self._cached(hub, n) is None]

    def resolve(
        self,
        filenames: str | Iterable[str],
        *,
        sha256: Mapping[str, str] | None = None,
    ) -> dict[str, Path]:
        """Local paths (snapshot entries in the hub cache) of ``filenames``, in order.

        Downloads what is missing unless offline; verifies every file (see module doc).
        """
        names = self._names(filenames)
        expected = self._expected(names, sha256)
        hub = _hub()
        out: dict[str, Path] = {}
        why_offline = "offline" if self.offline else self._unreachable(hub, names)
        if why_offline:
            missing = []
            for name in names:
                path = self._cached(hub, name)
                if path is None:
                    missing.append(name)
                else:
                    out[name] = path
            if missing:
                hint = self._hint(missing)
                raise MissingFiles(
                    f"{why_offline}: {len(missing)} of {len(names)} file(s) of {self._repo_id!r} at "
                    f"revision {self._commit or self._revision!r} are missing from the cache "
                    f"{str(self.cache_dir)!r}: {', '.join(missing)}; {hint}",
                    missing,
                    reason=why_offline,
                    hint=hint,
                )
            if why_offline != "offline":
                log.warning("%s; serving %s of %r from the cache", why_offline, ", ".join(names), self._repo_id)
        else:
            for name in names:
                out[name] = self._fetch(hub, name)
        for name, path in out.items():
            self._verify(hub, name, path, expected.get(name))
        return out

    # -- internals -------------------------------------------------------------------

    def _unreachable(self, hub: Any, names: list[str]) -> str | None:
        """Why the hub cannot be reached, checked only where ``names`` need a request."""
        with self._lock:
            commit = self._commit
        if commit is not None and all(self._cached(hub, n) is not None for n in names):
            return None  # served from the cache without a request
        endpoint = self._endpoint or str(getattr(hub.constants, "ENDPOINT", "https://huggingface.co"))
        reason = unreachable(endpoint, self._probe_timeout)
        return None if reason is None else f"no network ({reason})"

    def _hint(self, missing: list[str]) -> str:
        """How to get ``missing`` files, as one clause."""
        rev = self._commit or self._revision
        revision = "" if rev == _DEFAULT_REVISION else f" --revision {rev}"
        return (
            f"get them with 'hf download {self._repo_id} {' '.join(missing)}{revision}' where there is network "
            f"(HF_HUB_OFFLINE unset; then copy HF_HOME here), or use a local checkpoint directory"
        )

    @staticmethod
    def _names(filenames: str | Iterable[str]) -> list[str]:
        if isinstance(filenames, str):
            filenames = [filenames]
        elif isinstance(filenames, (bytes, bytearray)) or not isinstance(filenames, Iterable):
            raise InvalidArgument(f"filenames: expected a str or an iterable of str, got {type(filenames).__name__}")
        names = list(dict.fromkeys(_check_filename(n) for n in filenames))
        if not names:
            raise InvalidArgument("filenames: expected at least one file name, got none")
        return names

    @staticmethod
    def _expected(names: list[str], sha256: Mapping[str, str] | None) -> dict[str, str]:
        if sha256 is None:
            return {}
        if not isinstance(sha256, Mapping):
            raise InvalidArgument(f"sha256: expected a mapping of file name to hex digest, got {type(sha256).__name__}")
        out = {}
        for name, digest in sha256.items():
            if name not in names:
                raise InvalidArgument(f"sha256: {name!r} is not one of the files being resolved {names}")
            if not isinstance(digest, str) or not _SHA256_RE.fullmatch(digest.strip().lower()):
                raise InvalidArgument(f"sha256[{name!r}]: expected 64 hex digits, got {show(digest)}")
            out[name] = digest.strip().lower()
        return out

    def _hub_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"repo_type": "model"}
        if self._cache_dir is not None:
            kw["cache_dir"] = str(self._cache_dir)
        return kw

    def _cached(self, hub: Any, name: str) -> Path | None:
        """The snapshot entry of ``name`` in the cache, found by huggingface_hub (no network)."""
        with self._lock:
            revision = self._commit or self._revision
        found = hub.try_to_load_from_cache(self._repo_id, name, revision=revision, **self._hub_kwargs())
        if isinstance(found, str) and os.path.isfile(found):
            return Path(found)
        return None

    def _tqdm_class(self, hub: Any) -> Any:
        if self._progress:
            return None  # huggingface_hub's own bars (honour HF_HUB_DISABLE_PROGRESS_BARS)
        base = hub.utils.tqdm

        class _SilentTqdm(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

        return _SilentTqdm

    def _fetch(self, hub: Any, name: str) -> Path:
        with self._lock:
            commit = self._commit
        if commit is not None:
            cached = self._cached(hub, name)
            if cached is not None:
                return cached
        revision = commit or self._revision
        try:
            found = hub.hf_hub_download(
                self._repo_id,
                name,
                revision=revision,
                endpoint=self._endpoint,
                token=self._token,
                tqdm_class=self._tqdm_class(hub),
                **self._hub_kwargs(),
            )
        except HRXError:
            raise
        except Exception as exc:
            raise ArtifactError(
                f"cannot resolve {name!r} of {self._repo_id!r} at revision {revision!r}: {type(exc).__name__}: {exc}"
            ) from exc
        path = Path(found)
        if commit is None:
            # pointer path: <repo folder>/snapshots/<commit>/<name>; pin the branch to that commit
            depth = len(name.split("/"))
            snapshot = path.parents[depth - 1]
            if snapshot.parent.name == "snapshots" and _COMMIT_RE.fullmatch(snapshot.name):
                with self._lock:
                    if self._commit is None:
                        self._commit = snapshot.name
        return path

    def _verify(self, hub: Any, name: str, path: Path, expected: str | None) -> None:
        real = Path(os.path.realpath(path))
        checks: list[tuple[str, str]] = []
        if expected is not None:
            checks.append(("expected", expected))
        if path.is_symlink() and _SHA256_RE.fullmatch(real.name) and real.name != expected:
            # an LFS blob is named by the hub's ETag, which is the file's SHA-256
            checks.append(("hub LFS", real.name))
        if not checks:
            return
        try:
            st = os.stat(real)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                memo = self._verified.get(str(real))
            if memo is not None and memo[0] == key:
                actual = memo[1]
            else:
                actual = _sha256_file(real)
        except OSError as exc:
            raise ArtifactError(f"cannot read {name!r} at {str(path)!r} for verification: {exc}") from exc
        for source, want in checks:
            if actual != want:
                with self._lock:
                    self._verified.pop(str(real), None)
                removed = self._evict(path, real)
                raise ArtifactError(
                    f"SHA-256 mismatch for {name!r} of {self._repo_id!r}: {source} {want}, "
                    f"file has {actual}; removed {removed} cache entr{'y' if removed == 1 else 'ies'} "
                    f"({str(real)!r})"
                )
        with self._lock:
            self._verified[str(real)] = (key, actual)

    @staticmethod
    def _evict(pointer: Path, blob: Path) -> int:
        """Remove a bad blob and every snapshot entry pointing at it (or the pointer file)."""
        removed = 0
        victims = [pointer]
        pointer_is_link = pointer.is_symlink()
        # <repo folder>/blobs/<etag>: find other snapshot symlinks to the same blob
        if blob.parent.name == "blobs":
            snapshots = blob.parent.parent / "snapshots"
            if snapshots.is_dir():
                for root, _dirs, files in os.walk(snapshots):
                    for f in files:
                        p = Path(root, f)
                        if p != pointer and p.is_symlink() and os.path.basename(os.readlink(p)) == blob.name:
                            victims.append(p)
        if pointer_is_link:
            victims.append(blob)
        for victim in victims:
            try:
                os.unlink(victim)
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ArtifactError(f"cannot remove bad cache entry {str(victim)!r}: {exc}") from exc
        return removed
