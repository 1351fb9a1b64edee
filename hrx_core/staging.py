"""Reusable, bounded staging chunks for host transfers.

Uploads copy host bytes into a chunk of coherent host-visible memory and let the
queue copy it to the destination; the next chunk is filled while the previous one
is in flight. At most ``count`` chunks of at most ``chunk_bytes`` (64 MiB) exist per
stream; a large transfer waits for the oldest chunk before reusing it, so staging
stays bounded whatever the transfer size.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from .completion import Completion
from .errors import show

if TYPE_CHECKING:
    from .budget import MemoryBudget
    from .buffer import Buffer
    from .device import Device

MAX_CHUNK_BYTES = 64 << 20
DEFAULT_CHUNKS = 4
#: Host copies above this size are split across threads (numpy releases the GIL).
PARALLEL_COPY_BYTES = 8 << 20
#: Smallest piece one copy thread takes: glibc switches large memcpys to non-temporal
#: stores above a cache-size threshold, and small pieces would miss that.
MIN_PIECE_BYTES = 16 << 20

_copy_pool: ThreadPoolExecutor | None = None


def _threads(cap: int = 8) -> int:
    """Copy threads: HRX_STAGING_THREADS, else the cores but one, at most ``cap``."""
    env = os.environ.get("HRX_STAGING_THREADS")
    if env:
        try:
            value = int(env)
        except ValueError:
            value = 0
        if not 1 <= value <= 1024:
            from .errors import InvalidArgument

            raise InvalidArgument(f"HRX_STAGING_THREADS: expected an int in 1..1024, got {show(env)}")
        return value
    return max(1, min(cap, (os.cpu_count() or 1) - 1))


#: File reads are kernel copies out of the page cache and scale further than memcpy
#: on the H200's host (8 -> 15 threads: +9%).
FILE_THREADS_CAP = 16


def host_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """memcpy, on several threads when large and the machine has cores to spare."""
    threads = _threads()
    n = dst.nbytes
    if threads <= 1 or n < PARALLEL_COPY_BYTES:
        np.copyto(dst, src)
        return
    step = _step(n, threads)
    futures = [_pool(threads).submit(np.copyto, dst[o : o + step], src[o : o + step]) for o in range(step, n, step)]
    np.copyto(dst[:step], src[:step])
    for f in futures:
        f.result()


def host_copy_async(dst: np.ndarray, src: np.ndarray) -> list[Future[None]]:
    """Start a memcpy on the copy threads; wait on the returned futures.

    Small copies, or machines without cores to spare, copy at once and return [].
    """
    threads = _threads()
    n = dst.nbytes
    if threads <= 1 or n < PARALLEL_COPY_BYTES:
        np.copyto(dst, src)
        return []
    step = _step(n, max(1, min(threads, n // MIN_PIECE_BYTES)))
    pool = _pool(threads)
    return [pool.submit(np.copyto, dst[o : o + step], src[o : o + step]) for o in range(0, n, step)]


#: Smallest piece one thread reads from a file (reads have no non-temporal threshold).
MIN_FILE_PIECE_BYTES = 4 << 20


def pread_into(fd: int, dst: np.ndarray, offset: int) -> None:
    """Read ``dst.nbytes`` bytes of file ``fd`` at ``offset`` into ``dst`` (uint8,
    contiguous); short reads continue, end of file raises EOFError."""
    view = dst.data.cast("B")
    done = 0
    n = len(view)
    while done < n:
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise EOFError(f"file ended at byte {offset + done}, {n - done} bytes short")
        done += got


def file_read_async(dst: np.ndarray, fd: int, offset: int) -> list[Future[None]]:
    """Start reading file bytes into ``dst`` on the copy threads (the kernel copies out
    of the page cache: no page-table population as with a memory mapping)."""
    threads = _threads(FILE_THREADS_CAP)
    n = dst.nbytes
    if threads <= 1 or n < PARALLEL_COPY_BYTES:
        pread_into(fd, dst, offset)
        return []
    step = _step(n, max(1, min(threads, n // MIN_FILE_PIECE_BYTES)))
    pool = _pool(threads)
    return [pool.submit(pread_into, fd, dst[o : o + step], offset + o) for o in range(0, n, step)]


def wait_all(futures: list[Future[None]]) -> None:
    for f in futures:
        f.result()


def _step(n: int, threads: int) -> int:
    step = -(-n // threads)
    return step + (-step % 4096)


def _pool(threads: int) -> ThreadPoolExecutor:
    global _copy_pool
    if _copy_pool is None:
        # sized for the widest user (file reads); memcpy splits into fewer pieces
        workers = max(threads, _threads(), _threads(FILE_THREADS_CAP))
        _copy_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hrx-copy")
    return _copy_pool


class StagingChunk:
    __slots__ = ("buffer", "host", "completion", "leased")

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer
        view = buffer.allocation.native.host_view()
        assert view is not None
        self.host: np.ndarray = view[: buffer.nbytes]
        self.completion: Completion | None = None
        self.leased = False


class StagingRing:
    """Chunks owned by one stream, reused round-robin."""

    def __init__(
        self,
        device: Device,
        *,
        chunk_bytes: int = MAX_CHUNK_BYTES,
        count: int = DEFAULT_CHUNKS,
        budget: MemoryBudget | None = None,
    ) -> None:
        self.device = device
        self.chunk_bytes = min(chunk_bytes, MAX_CHUNK_BYTES)
        self.count = count
        self.budget = budget
        self.chunks: list[StagingChunk] = []
        self._next = 0

    def acquire(self, nbytes: int) -> StagingChunk:
        """A chunk of at least ``min(nbytes, chunk_bytes)`` whose last use has completed.

        Prefers an idle chunk, then grows the ring up to ``count`` chunks, then waits
        for the oldest chunk in flight. Leased chunks (a download not yet drained) are
        never handed out.
        """
        need = min(nbytes, self.chunk_bytes)
        want = min(self.chunk_bytes, max(nbytes, 1 << 16))
        for chunk in self.chunks:
            if not chunk.leased and chunk.buffer.nbytes >= need and (
                chunk.completion is None or chunk.completion.is_complete
            ):
                chunk.completion = None
                return chunk
        if len(self.chunks) < self.count:
            chunk = StagingChunk(self.device.allocate_shared(want, budget=self.budget))
            self.chunks.append(chunk)
            return chunk
        candidates = [c for c in self.chunks if not c.leased]
        chunk = candidates[self._next % len(candidates)]
        self._next += 1
        if chunk.completion is not None:
            chunk.completion.wait()
            chunk.completion = None
        if chunk.buffer.nbytes < need:
            index = self.chunks.index(chunk)
            chunk.buffer.close()
            chunk = StagingChunk(self.device.allocate_shared(want, budget=self.budget))
            self.chunks[index] = chunk
        return chunk

    @property
    def nbytes(self) -> int:
        return sum(c.buffer.nbytes for c in self.chunks)

    def close(self) -> None:
        for chunk in self.chunks:
            if chunk.completion is not None:
                try:
                    chunk.completion.wait()
                except Exception:
                    pass
            chunk.buffer.close()
        self.chunks.clear()
