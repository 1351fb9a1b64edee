"""hrx_core.artifacts.hf.Resolver against a local hub server on 127.0.0.1.

The server implements what huggingface_hub's ``hf_hub_download`` calls:
``HEAD``/``GET /{repo_id}/resolve/{revision}/{filename}`` answering with ``X-Repo-Commit``,
``ETag`` (git blob sha1 for regular files), ``X-Linked-Etag``/``X-Linked-Size`` (the SHA-256
and size of LFS files) and ``Content-Length``. Every request is recorded so tests can assert
that cached and offline resolution makes none. The cache is written by huggingface_hub itself.
A guard fails any socket connection to anything but the loopback address.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest

hub = pytest.importorskip("huggingface_hub")
hf_constants = pytest.importorskip("huggingface_hub.constants")
hf_tqdm = pytest.importorskip("huggingface_hub.utils").tqdm

from hrx_core.artifacts.hf import MissingFiles, Resolver
from hrx_core.errors import ArtifactError, InvalidArgument

REPO = "hrx-test/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
FILES = {
    "config.json": (b'{"hidden_size": 8}\n', False),
    "weights.bin": (bytes(range(256)) * 64, True),  # LFS
    "sub/tokenizer.txt": (b"a b c\n", False),
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


class _Hub:
    def __init__(self) -> None:
        self.files = {name: data for name, (data, _) in FILES.items()}
        self.lfs = {name for name, (_, lfs) in FILES.items() if lfs}
        self.refs = {"main": COMMIT, "v1.0": COMMIT, COMMIT: COMMIT}
        self.tamper: set[str] = set()  # files served with bytes that do not match their hash
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()


def _handler(state: _Hub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, status: int, headers: dict[str, str], body: bytes, with_body: bool) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def _serve(self, with_body: bool) -> None:
            with state.lock:
                state.requests.append((self.command, self.path))
            path = unquote(self.path.split("?", 1)[0])
            prefix = f"/{REPO}/resolve/"
            if not path.startswith(prefix):
                self._send(404, {"X-Error-Code": "RepoNotFound", "X-Error-Message": "no repo"}, b"{}", with_body)
                return
            revision, _, name = path[len(prefix) :].partition("/")
            commit = state.refs.get(revision)
            if commit is None:
                self._send(404, {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "no rev"}, b"{}", with_body)
                return
            data = state.files.get(name)
            if data is None:
                headers = {"X-Error-Code": "EntryNotFound", "X-Error-Message": "no file", "X-Repo-Commit": commit}
                self._send(404, headers, b"{}", with_body)
                return
            headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            if name in state.lfs:
                headers["ETag"] = f'"{_git_sha1(b"lfs pointer " + name.encode())}"'
                headers["X-Linked-Etag"] = f'"{_sha256(data)}"'
                headers["X-Linked-Size"] = str(len(data))
            else:
                headers["ETag"] = f'"{_git_sha1(data)}"'
            body = bytes(b ^ 0xFF for b in data) if name in state.tamper else data
            self._send(200, headers, body, with_body)

        def do_HEAD(self) -> None:
            self._serve(False)

        def do_GET(self) -> None:
            self._serve(True)

    return Handler


@pytest.fixture
def server(monkeypatch, tmp_path):
    # Network guard: only loopback connections.
    real_connect = socket.socket.connect

    def guarded_connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"test tried to reach {address!r}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)

    env = {
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HOME": str(tmp_path / "hf_home"),
        "HF_HUB_CACHE": str(tmp_path / "default_cache"),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_ENDPOINT",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(k, raising=False)
    # huggingface_hub reads its settings at import time: mirror them on the constants.
    c = hf_constants
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(c, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "default_cache"))

    state = _Hub()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    hub.close_session()  # fresh client with this environment
    try:
        yield state
    finally:
        hub.close_session()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hub_cache"


def _resolver(server, cache, **kw) -> Resolver:
    kw.setdefault("endpoint", server.url)
    kw.setdefault("token", False)
    kw.setdefault("progress", False)
    return Resolver(REPO, cache_dir=cache, **kw)


def _repo_dir(cache: Path) -> Path:
    return cache / ("models--" + REPO.replace("/", "--"))


def _populate(server, cache, names=tuple(FILES)) -> dict[str, Path]:
    paths = _resolver(server, cache).resolve(list(names))
    server.reset()
    return paths


def test_import_is_lazy():
    code = (
        "import sys, hrx_core, hrx_core.artifacts, hrx_core.artifacts.hf\n"
        "assert 'huggingface_hub' not in sys.modules, 'eager import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


def test_download_then_cached_lookup(server, cache):
    r = _resolver(server, cache)
    assert r.commit is None and r.revision == "main"
    paths = r.resolve(list(FILES))
    assert list(paths) == list(FILES)
    assert server.requests, "first resolve must download"
    assert {m for m, _ in server.requests} == {"HEAD", "GET"}
    assert r.commit == COMMIT
    snap = _repo_dir(cache) / "snapshots" / COMMIT
    for name, (data, lfs) in FILES.items():
        assert paths[name] == snap / name
        assert paths[name].read_bytes() == data
        blob = Path(os.path.realpath(paths[name]))
        assert blob.parent.name == "blobs"
        assert blob.name == (_sha256(data) if lfs else _git_sha1(data))
    assert (_repo_dir(cache) / "refs" / "main").read_text() == COMMIT

    # the cache is the hub's own layout: huggingface_hub reads it back
    info = hub.scan_cache_dir(cache)
    (repo,) = [x for x in info.repos if x.repo_id == REPO]
    assert {f.file_name for rev in repo.revisions for f in rev.files} == {"config.json", "weights.bin", "tokenizer.txt"}
    assert hub.try_to_load_from_cache(REPO, "weights.bin", cache_dir=cache) == str(paths["weights.bin"])

    server.reset()
    assert r.resolve(list(FILES)) == paths
    assert r.resolve("weights.bin", sha256={"weights.bin": _sha256(FILES["weights.bin"][0])}) == {
        "weights.bin": paths["weights.bin"]
    }
    assert server.requests == []

    # a fresh resolver at the commit hash is served from the cache without a request
    r2 = _resolver(server, cache, revision=COMMIT)
    assert r2.resolve(list(FILES)) == paths
    assert server.requests == []
    assert r2.missing(list(FILES) + ["nope.txt"]) == ["nope.txt"]


def test_branch_resolves_to_one_commit_per_resolver(server, cache):
    r = _resolver(server, cache)
    r.resolve("config.json")
    server.refs["main"] = OTHER_COMMIT  # branch moves after the first request
    server.reset()
    paths = r.resolve(["config.json", "weights.bin"])
    assert all(COMMIT in str(p) for p in paths.values())
    assert [p for _, p in server.requests if "config.json" in p] == []
    assert all(f"/resolve/{COMMIT}/" in p for _, p in server.requests)


def test_offline_complete_cache_makes_no_request(server, cache, monkeypatch):
    paths = _populate(server, cache)
    r = _resolver(server, cache, offline=True)
    assert r.offline
    assert r.resolve(list(FILES)) == paths
    assert r.resolve("weights.bin", sha256={"weights.bin": _sha256(FILES["weights.bin"][0])})
    assert server.requests == []

    # HF_HUB_OFFLINE in the environment (offline=None) behaves the same
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = _resolver(server, cache)
    assert r.offline
    assert r.resolve(list(FILES)) == paths
    assert server.requests == []


def test_offline_missing_files_are_listed(server, cache):
    _populate(server, cache, ["config.json"])
    r = _resolver(server, cache, offline=True)
    with pytest.raises(MissingFiles) as exc:
        r.resolve(["config.json", "weights.bin", "sub/tokenizer.txt"])
    assert isinstance(exc.value, ArtifactError)
    assert exc.value.missing == ("weights.bin", "sub/tokenizer.txt")
    msg = str(exc.value)
    assert "weights.bin, sub/tokenizer.txt" in msg and "2 of 3" in msg
    assert "config.json" not in msg.split(":")[-1]

    # nothing cached at all
    with pytest.raises(MissingFiles) as exc:
        _resolver(server, cache / "empty", offline=True).resolve(["config.json"])
    assert exc.value.missing == ("config.json",)
    assert server.requests == []


@pytest.mark.parametrize("revision", [None, "main", "v1.0", "0123456", COMMIT.upper()])
def test_pin_refuses_moving_revision(server, cache, revision):
    with pytest.raises(ArtifactError, match="refusing moving revision") as exc:
        _resolver(server, cache, revision=revision, pin=True)
    if revision in (None, "main"):
        assert "refusing moving revision 'main'" in str(exc.value)
    assert server.requests == []


def test_pin_accepts_commit_hash(server, cache):
    r = _resolver(server, cache, revision=COMMIT, pin=True)
    assert r.pinned and r.commit == COMMIT
    paths = r.resolve(list(FILES))
    assert all(f"/resolve/{COMMIT}/" in p for _, p in server.requests)
    assert paths["config.json"] == _repo_dir(cache) / "snapshots" / COMMIT / "config.json"
    server.reset()
    assert _resolver(server, cache, revision=COMMIT, pin=True).resolve(list(FILES)) == paths
    assert server.requests == []

    # unknown commit: hub error surfaces as ArtifactError
    with pytest.raises(ArtifactError, match="cannot resolve"):
        _resolver(server, cache, revision=OTHER_COMMIT, pin=True).resolve("config.json")


def _assert_evicted(cache: Path, name: str, blob_name: str) -> None:
    assert not (_repo_dir(cache) / "blobs" / blob_name).exists()
    pointer = _repo_dir(cache) / "snapshots" / COMMIT / name
    assert not pointer.exists() and not pointer.is_symlink()
    assert hub.try_to_load_from_cache(REPO, name, cache_dir=cache) is None


def test_sha256_mismatch_expected_removes_download(server, cache):
    data = FILES["config.json"][0]
    r = _resolver(server, cache)
    with pytest.raises(ArtifactError, match="SHA-256 mismatch for 'config.json'"):
        r.resolve(["config.json"], sha256={"config.json": "0" * 64})
    _assert_evicted(cache, "config.json", _git_sha1(data))
    # with the right hash it downloads again and succeeds
    server.reset()
    paths = r.resolve(["config.json"], sha256={"config.json": _sha256(data)})
    assert paths["config.json"].read_bytes() == data
    assert ("GET", f"/{REPO}/resolve/{COMMIT}/config.json") in server.requests


def test_sha256_mismatch_against_hub_lfs_hash(server, cache):
    data = FILES["weights.bin"][0]
    server.tamper.add("weights.bin")
    r = _resolver(server, cache)
    with pytest.raises(ArtifactError, match="hub LFS") as exc:
        r.resolve(["config.json", "weights.bin"])
    assert _sha256(data) in str(exc.value)
    _assert_evicted(cache, "weights.bin", _sha256(data))
    assert r.missing(["config.json", "weights.bin"]) == ["weights.bin"]
    server.tamper.clear()
    assert r.resolve("weights.bin")["weights.bin"].read_bytes() == data


def test_corrupted_cached_file_detected(server, cache):
    paths = _populate(server, cache)
    data = FILES["weights.bin"][0]
    blob = _repo_dir(cache) / "blobs" / _sha256(data)
    blob.write_bytes(bytes(b ^ 1 for b in data))  # same size, different bytes
    r = _resolver(server, cache, revision=COMMIT, offline=True)
    with pytest.raises(ArtifactError, match="SHA-256 mismatch for 'weights.bin'"):
        r.resolve(list(FILES))
    assert server.requests == []
    _assert_evicted(cache, "weights.bin", _sha256(data))
    with pytest.raises(MissingFiles):
        r.resolve("weights.bin")
    # online again: re-downloaded and verified
    r = _resolver(server, cache)
    assert r.resolve(list(FILES)) == paths
    assert paths["weights.bin"].read_bytes() == data

    # a regular (non-LFS) file is checked against the caller's hash
    cfg = FILES["config.json"][0]
    Path(os.path.realpath(paths["config.json"])).write_bytes(b"{}" + cfg[2:])
    with pytest.raises(ArtifactError, match="expected"):
        r.resolve("config.json", sha256={"config.json": _sha256(cfg)})
    _assert_evicted(cache, "config.json", _git_sha1(cfg))


def test_same_resolver_rehashes_changed_file(server, cache):
    r = _resolver(server, cache)
    paths = r.resolve("weights.bin")
    blob = Path(os.path.realpath(paths["weights.bin"]))
    blob.write_bytes(b"short")
    with pytest.raises(ArtifactError, match="mismatch"):
        r.resolve("weights.bin")
    assert not blob.exists()


def test_progress_bars(server, cache, monkeypatch):
    created = []
    base = hf_tqdm

    def spy_init(self, *args, **kwargs):
        created.append(kwargs.get("disable"))
        base_init(self, *args, **kwargs)

    base_init = base.__init__
    monkeypatch.setattr(base, "__init__", spy_init)
    _resolver(server, cache, progress=False).resolve("config.json")
    assert created == [True]
    created.clear()
    _resolver(server, cache / "other", progress=True).resolve("config.json")
    assert len(created) == 1  # huggingface_hub's own bar (its env settings decide visibility)


def test_remote_errors_are_artifact_errors(server, cache):
    with pytest.raises(ArtifactError, match="nope.txt"):
        _resolver(server, cache).resolve("nope.txt")
    with pytest.raises(ArtifactError, match="no-such-branch"):
        _resolver(server, cache, revision="no-such-branch").resolve("config.json")


def test_invalid_arguments(server, cache):
    for bad in ("", "a/b/c", "/abs", 3):
        with pytest.raises(InvalidArgument):
            Resolver(bad)
    r = _resolver(server, cache)
    for bad in ([], ["../x"], ["/etc/passwd"], ["a//b"], [1], b"x"):
        with pytest.raises(InvalidArgument):
            r.resolve(bad)
    with pytest.raises(InvalidArgument, match="64 hex"):
        r.resolve("config.json", sha256={"config.json": "abc"})
    with pytest.raises(InvalidArgument, match="not one of"):
        r.resolve("config.json", sha256={"weights.bin": "0" * 64})
    assert server.requests == []


def test_no_network_serves_the_cache_and_fails_fast(server, cache, caplog):
    """An unreachable hub (nobody listens at the endpoint) is found with one connection
    attempt: cached files of a branch are served, missing ones listed at once -- not after
    huggingface_hub's retries (about 23 s)."""
    import time

    _populate(server, cache, ["config.json"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    r = _resolver(server, cache, endpoint=dead)
    assert not r.offline
    t0 = time.monotonic()
    with caplog.at_level("WARNING", logger="hrx.artifacts"):
        paths = r.resolve(["config.json"])
    assert paths["config.json"].read_bytes() == FILES["config.json"][0]
    assert "no network (cannot reach 127.0.0.1:" in caplog.text and "from the cache" in caplog.text
    with pytest.raises(MissingFiles) as exc:
        r.resolve(["config.json", "weights.bin"])
    assert time.monotonic() - t0 < 2.0
    assert exc.value.missing == ("weights.bin",) and exc.value.reason.startswith("no network")
    assert f"hf download {REPO} weights.bin" in str(exc.value) and "\n" not in str(exc.value)
    assert server.requests == []
    with pytest.raises(InvalidArgument, match="probe_timeout"):
        _resolver(server, cache, probe_timeout=0)


def test_a_hub_probe_that_hangs_is_bounded(monkeypatch):
    """A name lookup or connect that never answers counts as unreachable after the timeout."""
    import time

    from hrx_core.artifacts import hf

    release = threading.Event()

    def hang(address, timeout=None):
        release.wait(10)
        raise OSError("released")

    monkeypatch.setattr(hf.socket, "create_connection", hang)
    t0 = time.monotonic()
    try:
        why = hf.unreachable("https://hub.invalid", timeout=0.2)
    finally:
        release.set()
    assert time.monotonic() - t0 < 1.0
    assert why == "cannot reach https://hub.invalid: no connection within 0.2 s"
    assert hf.unreachable("http://127.0.0.1:99999") is not None  # a bad port is a reason, not a crash
