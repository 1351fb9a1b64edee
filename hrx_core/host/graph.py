"""Host native graphs: independent branches run concurrently on a thread pool.

A launch is one command on the queue; the queue's worker runs the graph, handing
ready nodes to a pool of threads and releasing dependents as nodes finish. A chain
of nodes runs inline on the worker, so only real branching pays for threads.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..engine import BufferArg, GraphNode, NativeGraph, NativeQueue, patched_args
from ..errors import InvalidArgument
from .queue import HostQueue, command_for, sleep_jitter

_pool: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix="hrx-host-graph")
    return _pool


class HostGraph(NativeGraph):
    def __init__(self, nodes: Sequence[GraphNode], jitter_us: int = 0) -> None:
        self._jitter = jitter_us
        self._nodes = list(nodes)
        self._commands: list[Callable[[], None] | None] = [command_for(n) for n in nodes]
        self._kinds = [n.kind for n in nodes]
        self._deps = [tuple(sorted(set(n.deps))) for n in nodes]
        self._dependents: list[list[int]] = [[] for _ in nodes]
        for i, deps in enumerate(self._deps):
            for d in deps:
                if not 0 <= d < i:
                    raise InvalidArgument(f"graph node {i}: dependency {d} is not an earlier node")
                self._dependents[d].append(i)

    def update(self, index: int, node: GraphNode) -> None:
        if node.kind != self._kinds[index] or tuple(sorted(set(node.deps))) != self._deps[index]:
            raise InvalidArgument(f"graph node {index}: update must keep kind and dependencies")
        self._commands[index] = command_for(node)
        self._nodes[index] = node

    def patch_args(self, patches: Sequence[tuple[int, int, BufferArg]]) -> bool:
        """Point buffer arguments of dispatch nodes at new ranges: each changed node's
        command is made again from its arguments (replays already enqueued keep the
        commands they took). Anything but a buffer argument of a dispatch node: False,
        nothing changed."""
        changed = patched_args(self._nodes, patches)
        if changed is None:
            return False
        nodes = self._nodes
        for index, args in changed.items():
            node = nodes[index]
            node = nodes[index] = GraphNode(node.kind, node.deps, {**node.params, "args": tuple(args)})
            self._commands[index] = command_for(node)
        return True

    def prepare_patches(self, patches: Sequence[tuple[int, int, BufferArg]]) -> Any:
        """The patches themselves, once checked (None where :meth:`patch_args` would
        refuse them): the host engine has nothing to resolve ahead, but offering them
        lets the core's compiled replay rebind host graphs too."""
        patches = tuple(patches)
        return patches if patched_args(self._nodes, patches) is not None else None

    def apply_patches(self, prepared: Any) -> bool:
        return self.patch_args(prepared)

    def launch(self, q: NativeQueue) -> None:
        assert isinstance(q, HostQueue)
        commands = list(self._commands)
        q.enqueue(lambda: self._run(commands))

    def _run(self, commands: list[Callable[[], None] | None]) -> None:
        n = len(commands)
        remaining = [len(d) for d in self._deps]
        ready = [i for i in range(n) if remaining[i] == 0]
        finished: queue.SimpleQueue[tuple[int, BaseException | None]] = queue.SimpleQueue()
        failure: BaseException | None = None
        inflight = 0
        done = 0

        def run_one(i: int) -> None:
            try:
                cmd = commands[i]
                if self._jitter:
                    sleep_jitter(self._jitter)
                if cmd is not None:
                    cmd()
                finished.put((i, None))
            except BaseException as exc:  # reported after the graph drains
                finished.put((i, exc))

        pool = None
        while done < n:
            if ready:
                if len(ready) == 1 and inflight == 0:
                    run_one(ready.pop())  # a chain: stay on this thread
                    inflight += 1
                else:
                    pool = pool or _threads()
                    for i in ready:
                        pool.submit(run_one, i)
                    inflight += len(ready)
                    ready = []
            i, exc = finished.get()
            inflight -= 1
            done += 1
            if exc is not None and failure is None:
                failure = exc
            for d in self._dependents[i]:
                remaining[d] -= 1
                if remaining[d] == 0:
                    ready.append(d)
        if failure is not None:
            raise failure
