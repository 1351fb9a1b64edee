"""The cuda engine's compiled hot path (cffi API mode, built by :mod:`hrx_core.hotpath`).

Two C entry points take the place of several cffi ABI-mode calls each:

* :c:func:`hrx_launch` -- one pre-packed launch record (the ``cuLaunchKernel``
  function pointer, ``CUfunction``, grid, block, shared memory, stream,
  ``kernelParams``, ``extra``) launched through a single pointer argument. The record's
  ``kernelParams`` point at the same per-argument cells as the prepared dispatch's
  packing, so ``set_arg`` reaches both the compiled and the Python launcher.
* :c:func:`hrx_graph_replay` -- a graph's staged argument-cell writes (an array of
  ``(cell pointer, 64-bit value, node)``; each flags its node dirty), then
  ``cuGraphExecKernelNodeSetParams`` for every dirty node (in node order), then
  ``cuGraphLaunch`` (unless ``launch`` is 0). It stops at the first failing call and
  reports its ``CUresult``, the step (:data:`STEP_SET_PARAMS` or :data:`STEP_LAUNCH`)
  and the node; nodes already updated are no longer dirty, so a retry resumes where
  it stopped.
* :c:func:`hrx_dispatch_fast` -- the core's compiled eager dispatch
  (:mod:`hrx_core.fastpath`) launches through it: a context check and one
  ``cuLaunchKernel`` with the argument cells the core packed.
* :c:func:`hrx_graph_stage` -- the core's compiled rebinding replay stages a rebind
  record's prepared patches through it (``CudaGraph.fast_stage``): the words
  ``CudaGraph.prepare_patches`` made, copied into the staged cells where they are
  current (the cells' epoch) and fit, else nothing (the core calls ``apply_patches``).
* :c:func:`hrx_graph_replay_signal` -- the same replay with its launch, then
  ``cuStreamWriteValue64`` of a timeline value on the same stream: a runtime
  resubmission's launch and completion signal in one call. A failing write is
  reported as :data:`STEP_SIGNAL` after a launch that went through.

The driver's functions reach the C code as addresses taken from the ABI-mode
``libcuda`` the engine loaded (``ffi.cast("uintptr_t", lib.cuLaunchKernel)``): the
extension links no CUDA library and builds without CUDA headers. The ``CUDA_*`` types
the C code needs are only passed through as pointers; the signatures of the three
driver functions are declared here as in ``cuda.h``.

Where the extension cannot be built (no C compiler, no Python headers, no cffi,
``HRX_HOT_PATH=0``) the engine keeps its Python paths; :func:`py_graph_replay` is the
Python twin of :c:func:`hrx_graph_replay` and makes exactly the same driver calls.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from hrx_core import hotpath

#: ``hrx_replay_result.step``: nothing failed, a node update failed, the launch failed,
#: the signal after a launch failed.
STEP_NONE, STEP_SET_PARAMS, STEP_LAUNCH, STEP_SIGNAL = 0, 1, 2, 3

CDEF = r"""
typedef struct {
    uintptr_t launch;          /* cuLaunchKernel */
    uintptr_t function;        /* CUfunction */
    unsigned int grid_x, grid_y, grid_z;
    unsigned int block_x, block_y, block_z;
    unsigned int shared_bytes;
    uintptr_t stream;          /* CUstream */
    uintptr_t params;          /* void **kernelParams (cells shared with the Python packing) */
    uintptr_t extra;           /* void **extra */
} hrx_launch_record;

typedef struct {
    uint64_t cell;             /* address of an 8-byte argument cell */
    uint64_t value;            /* its new value (a device address) */
    uint64_t node;             /* the node it feeds: flagged dirty */
} hrx_cell_patch;

typedef struct {
    uintptr_t node;            /* CUgraphNode */
    uintptr_t params;          /* const CUDA_KERNEL_NODE_PARAMS * (kernelParams -> the cells) */
} hrx_node_update;

typedef struct {
    uintptr_t set_params;      /* cuGraphExecKernelNodeSetParams_v2 */
    uintptr_t graph_launch;    /* cuGraphLaunch */
    uintptr_t exec;            /* CUgraphExec */
    const hrx_cell_patch *cells; /* staged cell writes (how many: an argument of each call) */
    unsigned char *dirty;      /* per node: 1 = update before the next launch */
    const hrx_node_update *nodes;
    size_t nnodes;
    int pending;               /* any node dirty (cleared once all are updated) */
    size_t staged;             /* how many cells are staged (the replay calls take them all) */
    size_t cap;                /* how many cells `cells` holds */
    uint64_t cells_epoch;      /* moved whenever argument cells are re-indexed (prepared patches go stale) */
} hrx_graph_record;

typedef struct {
    int code;                  /* the first CUresult that failed, else 0 */
    int step;                  /* 0 none, 1 cuGraphExecKernelNodeSetParams, 2 cuGraphLaunch, 3 cuStreamWriteValue64 */
    long long node;            /* the node whose update failed, else -1 */
} hrx_replay_result;

typedef struct {
    hrx_graph_record **graph;  /* the graph's current record; NULL once it is closed */
    uintptr_t stream;          /* CUstream */
    uintptr_t ctx_get;         /* cuCtxGetCurrent */
    uintptr_t ctx;             /* the device's CUcontext */
    hrx_replay_result result;
} hrx_fast_replay;

typedef struct {
    uintptr_t launch;          /* cuLaunchKernel */
    uintptr_t stream;          /* CUstream */
    uintptr_t ctx_get;         /* cuCtxGetCurrent */
    uintptr_t ctx;             /* the device's CUcontext */
} hrx_fast_dispatch;

int hrx_launch(const hrx_launch_record *record);
int hrx_graph_fast(void *arg, long long *info);
int hrx_graph_stage(void *arg, const void *prepared, size_t nbytes);
int hrx_dispatch_fast(void *arg, uintptr_t function, const unsigned int *dims, void **params);
int hrx_graph_replay(hrx_graph_record *graph, size_t ncells, uintptr_t stream, int launch, hrx_replay_result *result);
int hrx_graph_replay_signal(hrx_graph_record *graph, size_t ncells, uintptr_t stream, uintptr_t write_value,
                            uint64_t address, uint64_t value, hrx_replay_result *result);
"""

SOURCE = r"""
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int hrx_CUresult;
typedef hrx_CUresult (*hrx_launch_fn)(void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                                      unsigned int bx, unsigned int by, unsigned int bz,
                                      unsigned int shared, void *stream, void **params, void **extra);
typedef hrx_CUresult (*hrx_set_params_fn)(void *exec, void *node, const void *params);
typedef hrx_CUresult (*hrx_graph_launch_fn)(void *exec, void *stream);
typedef hrx_CUresult (*hrx_write_value_fn)(void *stream, uint64_t address, uint64_t value, unsigned int flags);

typedef struct {
    uintptr_t launch;
    uintptr_t function;
    unsigned int grid_x, grid_y, grid_z;
    unsigned int block_x, block_y, block_z;
    unsigned int shared_bytes;
    uintptr_t stream;
    uintptr_t params;
    uintptr_t extra;
} hrx_launch_record;

typedef struct {
    uint64_t cell;
    uint64_t value;
    uint64_t node;
} hrx_cell_patch;

typedef struct {
    uintptr_t node;
    uintptr_t params;
} hrx_node_update;

typedef struct {
    uintptr_t set_params;
    uintptr_t graph_launch;
    uintptr_t exec;
    const hrx_cell_patch *cells;
    unsigned char *dirty;
    const hrx_node_update *nodes;
    size_t nnodes;
    int pending;
    size_t staged;
    size_t cap;
    uint64_t cells_epoch;
} hrx_graph_record;

typedef struct {
    int code;
    int step;
    long long node;
} hrx_replay_result;

typedef struct {
    hrx_graph_record **graph;
    uintptr_t stream;
    uintptr_t ctx_get;
    uintptr_t ctx;
    hrx_replay_result result;
} hrx_fast_replay;

typedef hrx_CUresult (*hrx_ctx_get_fn)(void **ctx);

typedef struct {
    uintptr_t launch;
    uintptr_t stream;
    uintptr_t ctx_get;
    uintptr_t ctx;
} hrx_fast_dispatch;

/* The core's compiled eager dispatch (hrx_core.fastpath.Dispatcher) calls this under
   the queue's lock: one cuLaunchKernel of `function` with the core's argument cells,
   or -1 (nothing done) where another context is current on this thread or the driver
   said so (the Python dispatch activates the device's own first). */
int hrx_dispatch_fast(void *arg, uintptr_t function, const unsigned int *dims, void **params)
{
    hrx_fast_dispatch *f = (hrx_fast_dispatch *)arg;
    void *current = 0;
    if (((hrx_ctx_get_fn)f->ctx_get)(&current) != 0 || (uintptr_t)current != f->ctx)
        return -1;
    hrx_CUresult code = ((hrx_launch_fn)f->launch)((void *)function, dims[0], dims[1], dims[2], dims[3], dims[4],
                                                   dims[5], 0, (void *)f->stream, params, 0);
    /* CUDA_ERROR_INVALID_CONTEXT: nothing launched; the Python dispatch retries it
       after making the device's context current (Driver.retry_on_foreign_context) */
    return code == 201 ? -1 : code;
}

int hrx_launch(const hrx_launch_record *r)
{
    hrx_launch_fn fn = (hrx_launch_fn)r->launch;
    return fn((void *)r->function, r->grid_x, r->grid_y, r->grid_z, r->block_x, r->block_y, r->block_z,
              r->shared_bytes, (void *)r->stream, (void **)r->params, (void **)r->extra);
}

int hrx_graph_replay(hrx_graph_record *g, size_t ncells, uintptr_t stream, int launch, hrx_replay_result *out)
{
    size_t i;
    out->code = 0;
    out->step = 0;
    out->node = -1;
    g->staged = 0;
    for (i = 0; i < ncells; i++) {
        const hrx_cell_patch *p = &g->cells[i];
        *(uint64_t *)(uintptr_t)p->cell = p->value;
        if (p->node < g->nnodes) {
            g->dirty[p->node] = 1;
            g->pending = 1;
        }
    }
    if (g->pending) {
        hrx_set_params_fn set = (hrx_set_params_fn)g->set_params;
        for (i = 0; i < g->nnodes; i++) {
            if (!g->dirty[i])
                continue;
            hrx_CUresult code = set((void *)g->exec, (void *)g->nodes[i].node, (const void *)g->nodes[i].params);
            if (code) {
                out->code = code;
                out->step = 1;
                out->node = (long long)i;
                return code;
            }
            g->dirty[i] = 0;
        }
        g->pending = 0;
    }
    if (launch) {
        hrx_CUresult code = ((hrx_graph_launch_fn)g->graph_launch)((void *)g->exec, (void *)stream);
        if (code) {
            out->code = code;
            out->step = 2;
            return code;
        }
    }
    return 0;
}

/* The core's compiled replay (hrx_core.fastpath) calls this under the queue's lock:
   one replay with the staged cells, or -1 (nothing done) where the Python launch has
   something to do first -- the graph closed, another context current on this thread. */
int hrx_graph_fast(void *arg, long long *info)
{
    hrx_fast_replay *f = (hrx_fast_replay *)arg;
    hrx_graph_record *g = *f->graph;
    void *current = 0;
    if (g == 0)
        return -1;
    if (((hrx_ctx_get_fn)f->ctx_get)(&current) != 0 || (uintptr_t)current != f->ctx)
        return -1;
    hrx_CUresult code = hrx_graph_replay(g, g->staged, f->stream, 1, &f->result);
    if (code) {
        info[0] = f->result.step;
        info[1] = f->result.node;
    }
    return code;
}

/* The core's compiled replay (hrx_core.fastpath) stages a rebind's prepared patches
   through this, under the queue's lock: `prepared` holds the 64-bit words
   (cells_epoch, count, then count (cell, value, node) triples) CudaGraph.prepare_patches
   made. 1: appended to the staged cells; 0, nothing staged: the graph closed or was
   re-indexed since (stale), the words are malformed, or there is no room -- the core
   then calls CudaGraph.apply_patches, which makes room or refuses. */
int hrx_graph_stage(void *arg, const void *prepared, size_t nbytes)
{
    hrx_fast_replay *f = (hrx_fast_replay *)arg;
    hrx_graph_record *g = *f->graph;
    const uint64_t *w = (const uint64_t *)prepared;
    if (g == 0 || nbytes < 16 || nbytes % 8 != 0 || w[0] != g->cells_epoch)
        return 0;
    uint64_t count = w[1];
    if (count > (nbytes / 8 - 2) / 3 || nbytes / 8 != 2 + 3 * count || count > g->cap - g->staged)
        return 0;
    memcpy((hrx_cell_patch *)g->cells + g->staged, w + 2, (size_t)count * sizeof(hrx_cell_patch));
    g->staged += (size_t)count;
    return 1;
}

int hrx_graph_replay_signal(hrx_graph_record *g, size_t ncells, uintptr_t stream, uintptr_t write_value,
                            uint64_t address, uint64_t value, hrx_replay_result *out)
{
    hrx_CUresult code = hrx_graph_replay(g, ncells, stream, 1, out);
    if (code)
        return code;
    code = ((hrx_write_value_fn)write_value)((void *)stream, address, value, 0);
    if (code) {
        out->code = code;
        out->step = 3;
    }
    return code;
}
"""

NAME = "cuda_hot"


def module() -> hotpath.HotModule:
    """The compiled extension, or the reason there is none (built on first use)."""
    return hotpath.load(NAME, CDEF, SOURCE)


def status() -> dict[str, Any]:
    """``{"compiled": bool, "reason": str, "path": str | None}`` (builds on first use)."""
    return module().status


class CudaHot:
    """The compiled entry points plus one driver's function addresses."""

    def __init__(self, mod: hotpath.HotModule, driver: Any) -> None:
        self.module = mod
        self.ffi = mod.ffi
        self.lib = mod.lib
        #: ``hrx_launch(record)`` and ``hrx_graph_replay(record, ncells, stream, launch, result)``.
        self.launch = mod.lib.hrx_launch
        self.replay = mod.lib.hrx_graph_replay
        #: ``hrx_graph_replay_signal(record, ncells, stream, write_value, address, value, result)``.
        self.replay_signal = mod.lib.hrx_graph_replay_signal
        dffi, dlib = driver.ffi, driver.lib
        self.launch_kernel = int(dffi.cast("uintptr_t", dlib.cuLaunchKernel))
        self.set_params = int(dffi.cast("uintptr_t", dlib.cuGraphExecKernelNodeSetParams_v2))
        self.graph_launch = int(dffi.cast("uintptr_t", dlib.cuGraphLaunch))
        self.ctx_get = int(dffi.cast("uintptr_t", dlib.cuCtxGetCurrent))
        #: the address of ``hrx_graph_fast`` (the core's compiled replay calls it)
        self.graph_fast = int(self.ffi.cast("uintptr_t", self.ffi.addressof(mod.lib, "hrx_graph_fast")))
        #: the address of ``hrx_graph_stage`` (the core's compiled rebind stages prepared patches through it)
        self.graph_stage = int(self.ffi.cast("uintptr_t", self.ffi.addressof(mod.lib, "hrx_graph_stage")))
        #: the address of ``hrx_dispatch_fast`` (the core's compiled dispatch calls it)
        self.dispatch_fast = int(self.ffi.cast("uintptr_t", self.ffi.addressof(mod.lib, "hrx_dispatch_fast")))
        #: ``cuStreamWriteValue64`` (0 where the driver lacks stream memory operations)
        self.write_value = 0 if driver.write_value64 is None else int(dffi.cast("uintptr_t", driver.write_value64))

    def launch_record(
        self,
        function: int,
        grid: Iterable[int],
        block: Iterable[int],
        stream: int,
        params: int,
        *,
        shared_bytes: int = 0,
        extra: int = 0,
    ) -> Any:
        """A ``hrx_launch_record *`` (addresses as ints; ``params`` 0 for NULL)."""
        r = self.ffi.new("hrx_launch_record *")
        r.launch = self.launch_kernel
        r.function = function
        r.grid_x, r.grid_y, r.grid_z = grid
        r.block_x, r.block_y, r.block_z = block
        r.shared_bytes = shared_bytes
        r.stream = stream
        r.params = params
        r.extra = extra
        return r


_bound: weakref.WeakKeyDictionary[Any, CudaHot] = weakref.WeakKeyDictionary()


def for_driver(driver: Any) -> CudaHot | None:
    """The compiled hot path bound to ``driver``, or None for the Python paths.

    ``HRX_HOT_PATH`` is read on every call (a graph or prepared launch decides when it
    is built or bound); the extension itself is built once per process at most."""
    if not hotpath.enabled():
        return None
    mod = module()
    if not mod.compiled:
        return None
    hot = _bound.get(driver)
    if hot is None or hot.module is not mod:
        hot = _bound[driver] = CudaHot(mod, driver)
    return hot


def py_graph_replay(
    set_params: Any,
    graph_launch: Any,
    exec_: Any,
    cells: Iterable[tuple[Any, int]],
    dirty: dict[int, None],
    nodes: Any,
    stream: Any,
    launch: bool,
) -> tuple[int, int, int]:
    """The Python twin of ``hrx_graph_replay``: ``(code, step, node)``.

    Writes ``cell[0] = value`` for each staged cell, calls ``set_params(exec_, handle,
    params)`` for each dirty node in node order (``nodes[i] == (handle, params)``),
    removing it from ``dirty`` once updated, then ``graph_launch(exec_, stream)``."""
    for cell, value in cells:
        cell[0] = value
    if dirty:
        for index in sorted(dirty):
            handle, params = nodes[index]
            code = set_params(exec_, handle, params)
            if code:
                return int(code), STEP_SET_PARAMS, index
            del dirty[index]
    if launch:
        code = graph_launch(exec_, stream)
        if code:
            return int(code), STEP_LAUNCH, -1
    return 0, STEP_NONE, -1


__all__ = [
    "CDEF",
    "SOURCE",
    "STEP_LAUNCH",
    "STEP_NONE",
    "STEP_SET_PARAMS",
    "CudaHot",
    "for_driver",
    "module",
    "py_graph_replay",
    "status",
]
