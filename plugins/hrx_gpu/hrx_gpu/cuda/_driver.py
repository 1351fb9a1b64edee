"""cffi ABI-mode binding of the CUDA driver API (``libcuda.so.1``).

Only the functions the engine uses are declared. Nothing is loaded at import: the
cdef is parsed and the library opened on the first call of :func:`load`, so that
``import hrx_gpu`` works on machines without a GPU or a driver.

Symbol names are the exported ones, not the ``cuda.h`` macros: ``cuMemAlloc`` is
``cuMemAlloc_v2``, ``cuGraphAddKernelNode`` is ``cuGraphAddKernelNode_v2`` and so on.
Structs are declared field for field as in ``cuda.h`` (CUDA 12/13), because ABI mode
trusts the declaration for layout.

The current context is per thread. :class:`Driver` hands out the primary context of
a device; :func:`make_current` sets it on the calling thread once and caches that in
a ``threading.local`` so that hot paths pay an attribute read, not a driver call.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

from ._cffi import LazyFFI
from .errors import CUDA_ERROR_INVALID_CONTEXT, DriverUnavailable, make_error

CDEF = r"""
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
typedef struct CUarray_st *CUarray;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef void (*CUhostFn)(void *userData);

typedef enum CUmemorytype_enum {
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_ARRAY = 3,
    CU_MEMORYTYPE_UNIFIED = 4
} CUmemorytype;

typedef struct CUDA_MEMCPY3D_st {
    size_t srcXInBytes;
    size_t srcY;
    size_t srcZ;
    size_t srcLOD;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    CUarray srcArray;
    void *reserved0;
    size_t srcPitch;
    size_t srcHeight;
    size_t dstXInBytes;
    size_t dstY;
    size_t dstZ;
    size_t dstLOD;
    CUmemorytype dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    CUarray dstArray;
    void *reserved1;
    size_t dstPitch;
    size_t dstHeight;
    size_t WidthInBytes;
    size_t Height;
    size_t Depth;
} CUDA_MEMCPY3D;

typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
    CUfunction func;
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    CUkernel kern;
    CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;

typedef struct CUDA_MEMSET_NODE_PARAMS_st {
    CUdeviceptr dst;
    size_t pitch;
    unsigned int value;
    unsigned int elementSize;
    size_t width;
    size_t height;
} CUDA_MEMSET_NODE_PARAMS;

CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);

CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev);

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSynchronize(void);

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);
CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags);
CUresult cuMemHostUnregister(void *p);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream);
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, uint64_t value, unsigned int flags);
CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, uint64_t value, unsigned int flags);
CUresult cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, uint64_t value, unsigned int flags);
CUresult cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, uint64_t value, unsigned int flags);
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);

CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuLaunchKernel(CUfunction f,
                        unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream,
                        void **kernelParams, void **extra);

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult cuGraphDestroy(CUgraph hGraph);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                 const CUgraphNode *dependencies, size_t numDependencies,
                                 const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMCPY3D *copyParams, CUcontext ctx);
CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                              const CUgraphNode *dependencies, size_t numDependencies,
                              const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx);
CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                             const CUgraphNode *dependencies, size_t numDependencies);
typedef struct CUgraphEdgeData_st {
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
} CUgraphEdgeData;
CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
                                   const CUgraphEdgeData *edgeData, size_t numDependencies);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                           const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMCPY3D *copyParams, CUcontext ctx);
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                        const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx);
"""

# -- constants (cuda.h) -------------------------------------------------------------
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DISABLE_TIMING = 0x2
CU_MEMHOSTALLOC_PORTABLE = 0x01
CU_MEMHOSTALLOC_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
CU_MEMORYTYPE_UNIFIED = 4
#: CUgraphEdgeData of a programmatic edge, out of the kernel node's programmatic port:
#: the dependent may launch once every block of the predecessor has called
#: griddepcontrol.launch_dependents or exited (CUDA 12.3+)
GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC = 1
GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC = 1
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_STREAM_LEGACY = 0x1
CU_STREAM_PER_THREAD = 0x2

ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_BLOCK_DIM_X = 2
ATTR_MAX_BLOCK_DIM_Y = 3
ATTR_MAX_BLOCK_DIM_Z = 4
ATTR_MAX_GRID_DIM_X = 5
ATTR_MAX_GRID_DIM_Y = 6
ATTR_MAX_GRID_DIM_Z = 7
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_CAN_MAP_HOST_MEMORY = 19
ATTR_MEMORY_CLOCK_RATE = 36  # kHz, the peak memory clock
ATTR_GLOBAL_MEMORY_BUS_WIDTH = 37  # bits
ATTR_L2_CACHE_SIZE = 38
ATTR_ASYNC_ENGINE_COUNT = 40
ATTR_UNIFIED_ADDRESSING = 41
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
#: Reads 0 on the H200 although the v2 stream memory operations work: never gate on it.
ATTR_CAN_USE_STREAM_MEM_OPS_V1 = 92

_FFI = LazyFFI(CDEF)


def get_ffi() -> Any:
    """The cffi FFI with the driver declarations (parsed once, on first use)."""
    return _FFI.get()


class _Current(threading.local):
    """The context this module last made current on each thread."""

    ctx: Any = None


CURRENT = _Current()


class _Exit:
    """Set once the interpreter exits: finalizers then skip driver calls."""

    exiting = False


EXIT = _Exit()


def _on_exit() -> None:
    EXIT.exiting = True


class Driver:
    """The loaded driver library plus checked helpers.

    ``lib`` exposes the raw functions (they return ``CUresult``); :meth:`check`
    turns a result into a typed error.
    """

    def __init__(self, ffi: Any, lib: Any, path: str) -> None:
        self.ffi = ffi
        self.lib = lib
        self.path = path
        self.NULL = ffi.NULL
        # Versioned stream memory operations: the _v2 names exist since CUDA 11.7 and
        # need no device attribute; the unversioned ones are the older API.
        self.wait_value64 = _first(lib, "cuStreamWaitValue64_v2", "cuStreamWaitValue64")
        self.write_value64 = _first(lib, "cuStreamWriteValue64_v2", "cuStreamWriteValue64")
        version = ffi.new("int *")
        self.check(lib.cuDriverGetVersion(version), "cuDriverGetVersion")
        #: CUDA API version of the driver, e.g. 13000.
        self.version = int(version[0])

    # -- errors -------------------------------------------------------------------

    def error_name(self, code: int) -> tuple[str, str]:
        ffi, lib = self.ffi, self.lib
        out = ffi.new("const char **")
        name = f"CUDA_ERROR_{code}"
        description = "unknown error"
        try:
            if lib.cuGetErrorName(code, out) == 0 and out[0] != ffi.NULL:
                name = ffi.string(out[0]).decode(errors="replace")
            if lib.cuGetErrorString(code, out) == 0 and out[0] != ffi.NULL:
                description = ffi.string(out[0]).decode(errors="replace")
        except Exception:  # noqa: BLE001 - naming an error must never fail
            pass
        return name, description

    def error(self, code: int, call: str, context: str = "") -> Exception:
        name, description = self.error_name(code)
        return make_error(code, name, description, call, context)

    def check(self, code: int, call: str, context: str = "") -> None:
        if code:
            raise self.error(code, call, context)

    # -- device facts (no context needed) -----------------------------------------

    def device_count(self) -> int:
        count = self.ffi.new("int *")
        self.check(self.lib.cuDeviceGetCount(count), "cuDeviceGetCount")
        return int(count[0])

    def device(self, index: int) -> int:
        dev = self.ffi.new("CUdevice *")
        self.check(self.lib.cuDeviceGet(dev, index), "cuDeviceGet", f"device {index}")
        return int(dev[0])

    def attribute(self, dev: int, attribute: int) -> int:
        value = self.ffi.new("int *")
        self.check(
            self.lib.cuDeviceGetAttribute(value, attribute, dev), "cuDeviceGetAttribute", f"attribute {attribute}"
        )
        return int(value[0])

    def device_name(self, dev: int) -> str:
        buf = self.ffi.new("char[256]")
        self.check(self.lib.cuDeviceGetName(buf, 256, dev), "cuDeviceGetName")
        return self.ffi.string(buf).decode(errors="replace")

    def total_memory(self, dev: int) -> int:
        out = self.ffi.new("size_t *")
        self.check(self.lib.cuDeviceTotalMem_v2(out, dev), "cuDeviceTotalMem")
        return int(out[0])

    def pci_bus_id(self, dev: int) -> str:
        buf = self.ffi.new("char[64]")
        self.check(self.lib.cuDeviceGetPCIBusId(buf, 64, dev), "cuDeviceGetPCIBusId")
        return self.ffi.string(buf).decode(errors="replace")

    def compute_capability(self, dev: int) -> tuple[int, int]:
        return (
            self.attribute(dev, ATTR_COMPUTE_CAPABILITY_MAJOR),
            self.attribute(dev, ATTR_COMPUTE_CAPABILITY_MINOR),
        )

    # -- contexts -----------------------------------------------------------------

    def make_current(self, ctx: Any) -> None:
        """Make ``ctx`` current on this thread (cached per thread)."""
        if CURRENT.ctx is not ctx:
            self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            CURRENT.ctx = ctx

    def force_current(self, ctx: Any) -> None:
        """Set ``ctx`` current even if the cache says it is (another library moved it)."""
        CURRENT.ctx = None
        self.make_current(ctx)

    def retry_on_foreign_context(self, code: int, ctx: Any, fn: Any, *args: Any) -> int:
        """Retry a call once if it failed because another library changed the context."""
        if code == CUDA_ERROR_INVALID_CONTEXT:
            self.force_current(ctx)
            return int(fn(*args))
        return code


def _first_sentence(exc: BaseException) -> str:
    # cffi appends a long note about ctypes.util.find_library; keep the loader's words.
    return str(exc).split(".  Additionally")[0]


def _first(lib: Any, *names: str) -> Any:
    for name in names:
        try:
            return getattr(lib, name)
        except (AttributeError, NotImplementedError):
            continue
    return None


_load_lock = threading.Lock()
_driver: Driver | None = None
_load_error: str | None = None


def library_name() -> str:
    """The driver library to open (``HRX_LIBCUDA`` overrides ``libcuda.so.1``)."""
    return os.environ.get("HRX_LIBCUDA") or "libcuda.so.1"


def load() -> Driver:
    """Open and initialize the driver once; raise DriverUnavailable with the reason."""
    global _driver, _load_error
    driver = _driver
    if driver is not None:
        return driver
    with _load_lock:
        if _driver is not None:
            return _driver
        if _load_error is not None:
            raise DriverUnavailable(_load_error)
        name = library_name()
        try:
            ffi = get_ffi()
        except Exception as exc:  # noqa: BLE001 - cffi missing or broken
            _load_error = f"cffi unusable: {exc}"
            raise DriverUnavailable(_load_error) from exc
        try:
            lib = ffi.dlopen(name)
        except OSError as exc:
            _load_error = f"{name} not found: {_first_sentence(exc)}"
            raise DriverUnavailable(_load_error) from exc
        try:
            code = lib.cuInit(0)
        except AttributeError as exc:
            _load_error = f"{name} has no cuInit: {exc}"
            raise DriverUnavailable(_load_error) from exc
        if code:
            probe = Driver.__new__(Driver)
            probe.ffi, probe.lib = ffi, lib
            cuda_name, description = probe.error_name(code)
            _load_error = f"cuInit failed: {cuda_name} ({code}): {description}"
            raise DriverUnavailable(_load_error)
        try:
            driver = Driver(ffi, lib, name)
        except Exception as exc:  # noqa: BLE001
            _load_error = f"{name}: {exc}"
            raise DriverUnavailable(_load_error) from exc
        atexit.register(_on_exit)
        _driver = driver
        return driver


def reset_for_tests() -> None:
    """Forget the loaded driver and any load failure (tests switch HRX_LIBCUDA)."""
    global _driver, _load_error
    with _load_lock:
        _driver = None
        _load_error = None
        CURRENT.ctx = None


__all__ = ["CDEF", "Driver", "get_ffi", "load", "library_name", "CURRENT", "EXIT"]
