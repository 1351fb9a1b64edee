/* A test double of the CUDA driver entry points the cuda engine's launch and graph
 * paths call (test_cuda_hot.py builds it into a shared library). It records every
 * call with its arguments -- including the values the kernelParams cells hold at the
 * time of the call -- and can be told to fail a given entry point with a code.
 * Signatures follow cuda.h (opaque handles as pointers). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef int CUresult;

enum {
    FAKE_LAUNCH_KERNEL = 1,
    FAKE_SET_PARAMS = 2,
    FAKE_GRAPH_LAUNCH = 3,
    FAKE_ADD_KERNEL_NODE = 4,
    FAKE_ADD_OTHER_NODE = 5,
    FAKE_INSTANTIATE = 6,
    FAKE_ADD_EDGE = 7,
    FAKE_WRITE_VALUE = 8,
    FAKE_KINDS = 9
};

typedef struct {
    void *func;
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    void **kernelParams;
    void **extra;
    void *kern;
    void *ctx;
} kernel_node_params;

typedef struct {
    int kind;
    int code;            /* what the call returned */
    uintptr_t function;  /* CUfunction (launch, node params) */
    uintptr_t exec;      /* CUgraphExec (set params, graph launch) */
    uintptr_t node;      /* CUgraphNode (set params; the new node for add) */
    uintptr_t stream;
    uintptr_t params;    /* kernelParams */
    uintptr_t extra;
    unsigned int grid[3];
    unsigned int block[3];
    unsigned int shared;
    int nvalues;
    uint64_t values[16]; /* the kernelParams cells, read with the configured widths */
    int ndeps;           /* node adds: the plain dependencies (up to 8 kept) */
    uintptr_t deps[8];
    int edge_type;       /* edge adds (node = to, exec = from): CUgraphEdgeData's type and port */
    int from_port;
} fake_call;

typedef struct {
    unsigned char from_port, to_port, type, reserved[5];
} edge_data;

#define FAKE_MAX_CALLS 4096
static fake_call calls[FAKE_MAX_CALLS];
static int ncalls;
static int widths[16];
static int nwidths;
static int fail_code[FAKE_KINDS], fail_after[FAKE_KINDS], fail_times[FAKE_KINDS];
static uintptr_t next_handle = 0x100000;

void fake_reset(void)
{
    ncalls = 0;
    memset(fail_code, 0, sizeof fail_code);
    memset(fail_times, 0, sizeof fail_times);
    memset(fail_after, 0, sizeof fail_after);
}

/* How to read kernelParams[i] (bytes: 1, 2, 4 or 8) for the calls that follow. */
void fake_widths(int n, const int *w)
{
    int i;
    nwidths = n > 16 ? 16 : n;
    for (i = 0; i < nwidths; i++)
        widths[i] = w[i];
}

/* Fail calls of `kind` with `code`, `times` times, after `after` successful ones. */
void fake_fail(int kind, int code, int after, int times)
{
    fail_code[kind] = code;
    fail_after[kind] = after;
    fail_times[kind] = times;
}

int fake_count(void) { return ncalls; }

int fake_get(int i, fake_call *out)
{
    if (i < 0 || i >= ncalls)
        return -1;
    *out = calls[i];
    return 0;
}

static fake_call *record(int kind)
{
    fake_call *c;
    if (ncalls >= FAKE_MAX_CALLS)
        ncalls = 0;
    c = &calls[ncalls++];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    return c;
}

static void read_params(fake_call *c, void **params)
{
    int i;
    c->params = (uintptr_t)params;
    if (!params)
        return;
    for (i = 0; i < nwidths; i++) {
        uint64_t v = 0;
        switch (widths[i]) {
        case 1: v = *(uint8_t *)params[i]; break;
        case 2: v = *(uint16_t *)params[i]; break;
        case 4: v = *(uint32_t *)params[i]; break;
        default: v = *(uint64_t *)params[i]; break;
        }
        c->values[i] = v;
    }
    c->nvalues = nwidths;
}

static CUresult result(fake_call *c)
{
    int k = c->kind;
    if (fail_times[k] > 0) {
        if (fail_after[k] > 0) {
            fail_after[k]--;
        } else {
            fail_times[k]--;
            c->code = fail_code[k];
        }
    }
    return c->code;
}

static void node_params(fake_call *c, const kernel_node_params *p)
{
    c->function = (uintptr_t)p->func;
    c->grid[0] = p->gridDimX; c->grid[1] = p->gridDimY; c->grid[2] = p->gridDimZ;
    c->block[0] = p->blockDimX; c->block[1] = p->blockDimY; c->block[2] = p->blockDimZ;
    c->shared = p->sharedMemBytes;
    c->extra = (uintptr_t)p->extra;
    read_params(c, p->kernelParams);
}

CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz,
                        unsigned int shared, void *stream, void **params, void **extra)
{
    fake_call *c = record(FAKE_LAUNCH_KERNEL);
    c->function = (uintptr_t)f;
    c->grid[0] = gx; c->grid[1] = gy; c->grid[2] = gz;
    c->block[0] = bx; c->block[1] = by; c->block[2] = bz;
    c->shared = shared;
    c->stream = (uintptr_t)stream;
    c->extra = (uintptr_t)extra;
    read_params(c, params);
    return result(c);
}

CUresult cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const kernel_node_params *p)
{
    fake_call *c = record(FAKE_SET_PARAMS);
    c->exec = (uintptr_t)exec;
    c->node = (uintptr_t)node;
    node_params(c, p);
    return result(c);
}

CUresult cuGraphLaunch(void *exec, void *stream)
{
    fake_call *c = record(FAKE_GRAPH_LAUNCH);
    c->exec = (uintptr_t)exec;
    c->stream = (uintptr_t)stream;
    return result(c);
}

/* A signal: node = the address written, values[0] = the value. */
CUresult cuStreamWriteValue64_v2(void *stream, uint64_t address, uint64_t value, unsigned int flags)
{
    fake_call *c = record(FAKE_WRITE_VALUE);
    c->stream = (uintptr_t)stream;
    c->node = (uintptr_t)address;
    c->values[0] = value;
    c->nvalues = 1;
    c->shared = flags;
    return result(c);
}

/* -- what building a graph, a queue and error names need ------------------------------- */

CUresult cuGraphCreate(void **graph, unsigned int flags)
{
    (void)flags;
    *graph = (void *)(next_handle++);
    return 0;
}

CUresult cuGraphAddKernelNode_v2(void **out, void *graph, void *const *deps, size_t ndeps,
                                 const kernel_node_params *p)
{
    fake_call *c = record(FAKE_ADD_KERNEL_NODE);
    size_t i;
    (void)graph;
    c->ndeps = (int)ndeps;
    for (i = 0; i < ndeps && i < 8; i++)
        c->deps[i] = (uintptr_t)deps[i];
    node_params(c, p);
    *out = (void *)(next_handle++);
    c->node = (uintptr_t)*out;
    return result(c);
}

/* One recorded call per edge. */
CUresult cuGraphAddDependencies_v2(void *graph, void *const *from, void *const *to, const edge_data *edges, size_t n)
{
    size_t i;
    CUresult code = 0;
    (void)graph;
    for (i = 0; i < n; i++) {
        fake_call *c = record(FAKE_ADD_EDGE);
        c->exec = (uintptr_t)from[i];
        c->node = (uintptr_t)to[i];
        c->edge_type = edges ? edges[i].type : 0;
        c->from_port = edges ? edges[i].from_port : 0;
        code = result(c);
        if (code)
            return code;
    }
    return code;
}

CUresult cuGraphAddEmptyNode(void **out, void *graph, void *const *deps, size_t ndeps)
{
    fake_call *c = record(FAKE_ADD_OTHER_NODE);
    (void)graph; (void)deps; (void)ndeps;
    *out = (void *)(next_handle++);
    c->node = (uintptr_t)*out;
    return result(c);
}

CUresult cuGraphAddMemsetNode(void **out, void *graph, void *const *deps, size_t ndeps, const void *p, void *ctx)
{
    (void)p; (void)ctx;
    return cuGraphAddEmptyNode(out, graph, deps, ndeps);
}

CUresult cuGraphAddMemcpyNode(void **out, void *graph, void *const *deps, size_t ndeps, const void *p, void *ctx)
{
    (void)p; (void)ctx;
    return cuGraphAddEmptyNode(out, graph, deps, ndeps);
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags)
{
    fake_call *c = record(FAKE_INSTANTIATE);
    (void)graph; (void)flags;
    *exec = (void *)(next_handle++);
    c->exec = (uintptr_t)*exec;
    return result(c);
}

CUresult cuGraphExecMemsetNodeSetParams(void *exec, void *node, const void *p, void *ctx)
{
    (void)exec; (void)node; (void)p; (void)ctx;
    return 0;
}

CUresult cuGraphExecMemcpyNodeSetParams(void *exec, void *node, const void *p, void *ctx)
{
    (void)exec; (void)node; (void)p; (void)ctx;
    return 0;
}

CUresult cuGraphExecDestroy(void *exec) { (void)exec; return 0; }
CUresult cuGraphDestroy(void *graph) { (void)graph; return 0; }
static __thread void *current_ctx;
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return 0; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current_ctx; return 0; }
CUresult cuStreamCreate(void **stream, unsigned int flags) { (void)flags; *stream = (void *)(next_handle++); return 0; }
CUresult cuStreamSynchronize(void *stream) { (void)stream; return 0; }
CUresult cuStreamDestroy_v2(void *stream) { (void)stream; return 0; }
CUresult cuModuleUnload(void *module) { (void)module; return 0; }
CUresult cuDriverGetVersion(int *version) { *version = 12080; return 0; }

CUresult cuGetErrorName(CUresult code, const char **out)
{
    switch (code) {
    case 1: *out = "CUDA_ERROR_INVALID_VALUE"; break;
    case 201: *out = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case 400: *out = "CUDA_ERROR_INVALID_HANDLE"; break;
    case 700: *out = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case 801: *out = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: return 1;
    }
    return 0;
}

CUresult cuGetErrorString(CUresult code, const char **out)
{
    (void)code;
    *out = "reported by the test double";
    return 0;
}
