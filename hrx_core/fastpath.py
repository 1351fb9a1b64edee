"""The core's compiled replay path: a CPython extension built on first use.

``Graph.launch()`` with the recording stream and the default bindings -- the common
replay -- spends most of its time in bookkeeping, not in the driver: the graph's
state checks, the launch record's epoch, the queue's lock, the commit of the
operation (its value, the automatic signal) and the completion. :class:`Replayer`
(compiled here) does exactly that bookkeeping in C, in one call from Python, and
launches through the engine: a C entry point where the engine's native graph offers
one (:meth:`hrx_core.engine.NativeGraph.fast_launch`, the cuda engine's
``cuGraphLaunch`` through its hot path), else the plan's Python ``encode``.

A replayer never decides anything the Python path would decide differently: wherever
it meets a condition the Python path handles with more than an attribute read -- a
stale launch record, an unloaded kernel, a closed queue, the queue's lock held by
another thread, a changed plan or native graph, rebound inputs, staged argument
patches, another CUDA context current on the thread -- it does nothing and answers
None, and the caller runs the Python path. Failures of the native call go to the
engine's own handler under the queue's lock, as in the Python path.

Once the extension is built, :func:`bind_entry` makes ``Graph.launch`` and
``Runtime.submit`` compiled entries (``FastEntry``): method descriptors standing for
the Python methods whose common calls reach the replayer or the runtime's
``Submitter`` without a Python frame; every other call runs the Python method. A
rebinding replay stages the engine's prepared patches through its C staging entry
where it offers one (:meth:`hrx_core.engine.NativeGraph.fast_stage`).

Built by :func:`hrx_core.hotpath.load_extension` (the same cache, compiler and
``HRX_HOT_PATH=0`` switch as the engines' cffi hot paths); where it cannot be built,
the Python path runs, with the same results. ``hrx doctor`` reports which.
"""

from __future__ import annotations

from typing import Any

from . import hotpath

NAME = "core_replay"

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <float.h>
#include <limits.h>
#include <string.h>
#include <pythread.h>
#include <time.h>
#if defined(__linux__)
#include <errno.h>
#include <semaphore.h>
#endif

/* An engine's C replay entry: 0 launched; -1 nothing done, take the Python path;
   a positive code: the native failure, with info[0] = step and info[1] = node. */
typedef int (*hrx_fast_fn)(void *arg, long long *info);

/* An engine's C staging of prepared patches (NativeGraph.fast_stage): 1 staged; 0
   nothing done, the core calls the native graph's apply_patches. */
typedef int (*hrx_stage_fn)(void *arg, const void *prepared, size_t nbytes);

static PyObject *s_bound, *s_items, *s_apply_patches, *s_rebound_attr, *s_rebind_memo, *s_refs, *s_holds, *s_restore;
static PyObject *s_plan, *s_rebound, *s_closed, *s_epoch, *s_value,
    *s_unative, *s_needs_submit, *s_submit, *s_pending_value, *s_unsignaled_ops,
    *s_flush_locked, *s_last_launch, *s_values, *s_ulast, *s_done, *s_last,
    *s_release_retired, *s_launches, *s_graph_launches, *s_acquire, *s_release;

/* A counter the compiled paths add to without making Python ints: hrx_core keeps a
   count as a Python int plus a Tally (Graph.launches, DeviceStats.graph_launches are
   properties adding the two), so a compiled replay counts with one increment. */
typedef struct {
    PyObject_HEAD
    long long value;
} Tally;

static PyMemberDef Tally_members[] = {
    {"value", T_LONGLONG, offsetof(Tally, value), 0, "what the compiled paths counted"},
    {NULL}
};

static PyTypeObject TallyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hrx_core.fastpath.Tally",
    .tp_basicsize = sizeof(Tally),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A counter the compiled paths increment (see Graph.launches).",
    .tp_new = PyType_GenericNew,
    .tp_members = Tally_members,
};

#define RCACHE 4  /* rebind records a replayer keeps at hand (mappings alternated between) */

typedef struct {
    PyObject_HEAD
    /* object fields, `plan` to `native` (see visit_fields) */
    PyObject *plan;          /* the graph's plan this replayer was made for (identity) */
    PyObject *native_graph;  /* the graph's native graph then (identity; None if none) */
    PyObject *record;        /* its LaunchRecord */
    PyObject *epoch;         /* hrx_core.buffer.EPOCH */
    PyObject *slot;          /* the recording stream's QueueSlot */
    PyObject *lock;          /* slot.lock */
    PyObject *stream;        /* the recording Stream */
    PyObject *stats;         /* device.stats */
    PyObject *launch_py;     /* encode(native_queue), used when there is no C entry */
    PyObject *on_failure;    /* on_failure(code, step, node): the engine's failure handling */
    PyObject *keep;          /* what keeps the C entry's argument alive */
    PyObject *acquire, *release;  /* slot.lock's bound methods */
    PyObject *graph_tally;   /* the graph's launch Tally, or NULL (graph.launches += 1) */
    PyObject *stats_tally;   /* the device's graph-launch Tally, or NULL (stats.graph_launches += 1) */
    PyObject *stage_log;     /* the native graph's patch log (NativeGraph.fast_stage), or NULL */
    PyObject *stage_keep;    /* what keeps the stage entry's argument alive */
    PyObject *native;        /* slot._native (made once per queue) */
    int needs_submit;        /* native.needs_submit */
    hrx_fast_fn fn;
    void *arg;
    PyObject *rc_names[RCACHE];   /* the replayer's cache of rebind records: the mapping's names */
    PyObject *rc_record[RCACHE];  /* and its _RebindRecord */
    int rc_next;
    hrx_stage_fn stage_fn;   /* stages a prepared patch object's bytes: 1, or 0 (nothing staged) */
    void *stage_arg;
    Py_ssize_t stage_limit;  /* the log's length from which apply_patches (Python) folds it */
    int owned;
    long auto_flush;
    Py_ssize_t hits, misses;
} Replayer;

/* Attribute access without the generic lookup where it can be skipped: an attribute
   that the object's class declares in __slots__ (a member descriptor of an object
   field, found first in the MRO, on a class with the generic getattr/setattr) is read
   and written at its offset, as the descriptor itself would. The offset is remembered
   per (class, name) with the class's version tag, which CPython changes whenever the
   class or a base is modified, so a stale entry is never used. Everything else -- and
   an unset slot, which raises -- takes PyObject_GetAttr / PyObject_SetAttr. The names
   passed are the module's interned strings (they live as long as the module). */
typedef struct {
    PyTypeObject *type;  /* (not a reference: a new class never reuses a version tag) */
    PyObject *name;
    unsigned int version;
    Py_ssize_t offset;   /* -1: not a plain slot */
} slot_entry;

#define SLOT_WAYS 4
#define SLOT_BUCKETS 512  /* (a power of two) */
static slot_entry slot_cache[SLOT_BUCKETS * SLOT_WAYS];

static Py_ssize_t slot_fill(PyTypeObject *type, PyObject *name, slot_entry *e);

static inline Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name)
{
#ifdef Py_GIL_DISABLED
    (void)type;
    (void)name;
    return -1;  /* (the cache is not thread-safe without the GIL) */
#else
    /* SLOT_WAYS entries a bucket, the bucket from both addresses mixed by multiplication
       (heap objects share their low bits: summing shifted addresses put a hot path's
       keys into few buckets, and three of them evicted each other on every call) */
    uint64_t h = (uint64_t)(uintptr_t)type * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)name * 0xC2B2AE3D27D4EB4Full;
    slot_entry *e = &slot_cache[SLOT_WAYS * (size_t)((h >> 32) & (SLOT_BUCKETS - 1))];
    /* (a modified class's tag is 0 until looked up again, then new; stored tags are not 0) */
    for (int k = 0; k < SLOT_WAYS; k++)
        if (e[k].type == type && e[k].name == name && e[k].version == type->tp_version_tag)
            return e[k].offset;
    return slot_fill(type, name, e);
#endif
}

/* Whether a class's version tag is valid (remembered answers are checked against it;
   a change to the class or its bases invalidates it, and a later lookup gives it a new
   one). CPython 3.13 no longer sets Py_TPFLAGS_VALID_VERSION_TAG: a tag is valid where it
   is not 0 (before 3.13 the flag says so as well). */
#if PY_VERSION_HEX >= 0x030D0000
#define TAG_VALID(type) ((type)->tp_version_tag != 0)
#else
#define TAG_VALID(type) ((type)->tp_version_tag != 0 && PyType_HasFeature((type), Py_TPFLAGS_VALID_VERSION_TAG))
#endif

/* slot_offset's miss: look the name up, remember the answer where the class has a tag
   (in e[0], the bucket's other entries moving down one, its last one going) */
static Py_ssize_t slot_fills;  /* (lookups slot_offset missed: the module's slot_fills()) */

static Py_ssize_t slot_fill(PyTypeObject *type, PyObject *name, slot_entry *e)
{
    Py_ssize_t offset = -1;
    slot_fills++;
    if (type->tp_getattro == PyObject_GenericGetAttr && type->tp_setattro == PyObject_GenericSetAttr) {
        PyObject *d = _PyType_Lookup(type, name);  /* borrowed; gives the class a version tag */
        if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
                offset = m->offset;
        }
    }
    if (!TAG_VALID(type))
        return offset;  /* (no tag to check later: not remembered) */
    memmove(e + 1, e, (SLOT_WAYS - 1) * sizeof *e);  /* (the bucket's oldest entry goes) */
    e->type = type;
    e->name = name;
    e->version = type->tp_version_tag;
    e->offset = offset;
    return offset;
}

/* A call site's own entry in front of slot_cache: the (class, name, version tag, offset)
   of the last lookup made there, checked in a few loads where slot_offset hashes. Every
   use of get_attr, set_attr and the helpers built on them is a macro giving its site a
   static slot_site (a GCC/clang statement expression; other compilers: no site). A site
   checks the name as well as the class, so a helper called with several names is only
   slower, never wrong. */
typedef struct {
    PyTypeObject *type;  /* (not a reference, as in slot_cache) */
    PyObject *name;
    unsigned int version;
    Py_ssize_t offset;
} slot_site;

#if defined(__GNUC__) && !defined(Py_GIL_DISABLED)
#define SITE() ({ static slot_site site_; &site_; })
#else
#define SITE() ((slot_site *)NULL)
#endif

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#define INLINE inline __attribute__((always_inline))
#else
#define NOINLINE
#define INLINE inline
#endif

/* slot_offset_at's miss (out of line: the hit is what callers inline) */
static NOINLINE Py_ssize_t slot_site_fill(PyTypeObject *type, PyObject *name, slot_site *site)
{
    Py_ssize_t offset = slot_offset(type, name);
    if (site != NULL && TAG_VALID(type)) {
        site->type = type;
        site->name = name;
        site->version = type->tp_version_tag;
        site->offset = offset;
    }
    return offset;
}

static inline Py_ssize_t slot_offset_at(PyTypeObject *type, PyObject *name, slot_site *site)
{
    if (site != NULL && site->type == type && site->name == name && site->version == type->tp_version_tag)
        return site->offset;
    return slot_site_fill(type, name, site);
}

/* PyObject_GetAttr(obj, name) (a new reference) */
static INLINE PyObject *get_attr_at(PyObject *obj, PyObject *name, slot_site *site)
{
    Py_ssize_t offset = slot_offset_at(Py_TYPE(obj), name, site);
    if (offset >= 0) {
        PyObject *v = *(PyObject **)((char *)obj + offset);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, name);
}

#define get_attr(obj, name) get_attr_at((obj), (name), SITE())

/* PyObject_SetAttr(obj, name, value) */
static INLINE int set_attr_at(PyObject *obj, PyObject *name, PyObject *value, slot_site *site)
{
    Py_ssize_t offset = value == NULL ? -1 : slot_offset_at(Py_TYPE(obj), name, site);
    if (offset >= 0) {
        PyObject **field = (PyObject **)((char *)obj + offset);
        PyObject *old = *field;
        *field = Py_NewRef(value);
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(obj, name, value);
}

#define set_attr(obj, name, value) set_attr_at((obj), (name), (value), SITE())

/* set_attr, skipped where the slot holds `value` already (a kept object filled in again) */
static INLINE int set_new_at(PyObject *obj, PyObject *name, PyObject *value, slot_site *site)
{
    Py_ssize_t offset = slot_offset_at(Py_TYPE(obj), name, site);
    if (offset > 0 && *(PyObject **)((char *)obj + offset) == value)
        return 0;
    return set_attr_at(obj, name, value, site);
}

#define set_new(obj, name, value) set_new_at((obj), (name), (value), SITE())

static INLINE int attr_is_at(PyObject *obj, PyObject *name, PyObject *expected, slot_site *site)
{
    PyObject *v = get_attr_at(obj, name, site);
    if (v == NULL)
        return -1;
    int same = v == expected;
    Py_DECREF(v);
    return same;
}

#define attr_is(obj, name, expected) attr_is_at((obj), (name), (expected), SITE())

static INLINE int attr_true_at(PyObject *obj, PyObject *name, slot_site *site)
{
    PyObject *v = get_attr_at(obj, name, site);
    if (v == NULL)
        return -1;
    int t = v == Py_True ? 1 : (v == Py_False || v == Py_None ? 0 : PyObject_IsTrue(v));
    Py_DECREF(v);
    return t;
}
#define attr_true(obj, name) attr_true_at((obj), (name), SITE())

/* A struct's object fields from `first` to `last` (declared one after another, all
   PyObject *): traversed and cleared as one block. */
static int visit_fields(PyObject **first, PyObject **last, visitproc visit, void *arg)
{
    for (PyObject **p = first; p <= last; p++)
        Py_VISIT(*p);
    return 0;
}

static void clear_fields(PyObject **first, PyObject **last)
{
    for (PyObject **p = first; p <= last; p++)
        Py_CLEAR(*p);
}

static PyObject *miss(Replayer *self)
{
    self->misses++;
    Py_RETURN_NONE;
}

/* obj.name() with its result dropped: 0, or -1 with an exception */
static int call_method0(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* bound(arg) / bound() for a bound builtin method (a deque's append, popleft): its C
   function called directly where its flags are plain METH_O / METH_NOARGS (what the
   call would do), else the call */
static inline PyObject *call_o(PyObject *bound, PyObject *arg)
{
    if (PyCFunction_Check(bound)) {
        PyMethodDef *def = ((PyCFunctionObject *)bound)->m_ml;
        if (def->ml_flags == METH_O)
            return def->ml_meth(PyCFunction_GET_SELF(bound), arg);
    }
    return PyObject_CallOneArg(bound, arg);
}

static inline PyObject *call_0(PyObject *bound)
{
    if (PyCFunction_Check(bound)) {
        PyMethodDef *def = ((PyCFunctionObject *)bound)->m_ml;
        if (def->ml_flags == METH_NOARGS)
            return def->ml_meth(PyCFunction_GET_SELF(bound), NULL);
    }
    return PyObject_CallNoArgs(bound);
}

/* threading's locks without a method call. CPython 3.11 and 3.12 lay out _thread.lock
   and _thread.RLock as mirrored here; hrx_module_create checks that layout on locks it
   makes (acquired and released through their methods, read through the mirror) and
   uses it only where every check passed. The direct paths do what the locks' own
   non-blocking acquire and release do, with the GIL held throughout; anything else --
   a contended lock, a release by a thread that does not own it, another Python, an
   unknown lock type -- calls the lock's method. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000 && !defined(Py_GIL_DISABLED)
#define HRX_DIRECT_LOCKS 1
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock_lock;
    PyObject *in_weakreflist;
    char locked;
} lock_layout;
typedef struct {
    PyObject_HEAD
    PyThread_type_lock rlock_lock;
    unsigned long rlock_owner;
    unsigned long rlock_count;
    PyObject *in_weakreflist;
} rlock_layout;
#endif
static PyTypeObject *lock_type, *rlock_type;  /* set where the layout checked out */
static PyMethodDef *lock_acquire_def, *lock_release_def, *rlock_acquire_def, *rlock_release_def;
#if defined(HRX_DIRECT_LOCKS) && defined(__linux__)
#define HRX_SEM_LOCKS 1
#endif
/* PyThread locks are POSIX semaphores here and sem_trywait checked out on them
   (check_sem_locks): a non-blocking acquire calls it directly, where
   PyThread_acquire_lock_timed would read the monotonic clock first, timeout or not */
static int sem_locks;

/* a non-blocking acquire of a PyThread lock: 1 acquired, 0 held */
static inline int raw_try(PyThread_type_lock lk)
{
#ifdef HRX_SEM_LOCKS
    if (sem_locks) {
        while (sem_trywait((sem_t *)lk) != 0)
            if (errno != EINTR)
                return 0;
        return 1;
    }
#endif
    return PyThread_acquire_lock_timed(lk, 0, 0) == PY_LOCK_ACQUIRED;
}

/* the lock whose bound `acquire` (release = 0) or `release` (release = 1) method `fn`
   is, where its type is one of the checked ones; else NULL */
static inline PyObject *direct_lock(PyObject *fn, int release)
{
#ifdef HRX_DIRECT_LOCKS
    if (lock_type == NULL || !PyCFunction_Check(fn))
        return NULL;
    PyMethodDef *def = ((PyCFunctionObject *)fn)->m_ml;
    PyObject *self = PyCFunction_GET_SELF(fn);
    if (self == NULL)
        return NULL;
    if (Py_TYPE(self) == rlock_type)
        return def == (release ? rlock_release_def : rlock_acquire_def) ? self : NULL;
    if (Py_TYPE(self) == lock_type)
        return def == (release ? lock_release_def : lock_acquire_def) ? self : NULL;
    return NULL;
#else
    (void)fn;
    (void)release;
    return NULL;
#endif
}

/* the PyMethodDef of obj's bound method `name` (a builtin method), else NULL */
static PyMethodDef *method_def(PyObject *obj, const char *name)
{
    PyObject *m = PyObject_GetAttrString(obj, name);
    PyMethodDef *def = m != NULL && PyCFunction_Check(m) ? ((PyCFunctionObject *)m)->m_ml : NULL;
    Py_XDECREF(m);
    PyErr_Clear();
    return def;
}

/* a non-blocking acquire of a checked lock: 1 acquired, 0 held (elsewhere for an RLock) */
static int lock_try(PyObject *lock)
{
#ifdef HRX_DIRECT_LOCKS
    if (Py_TYPE(lock) == rlock_type) {
        rlock_layout *r = (rlock_layout *)lock;
        unsigned long me = PyThread_get_thread_ident();
        if (r->rlock_count > 0 && r->rlock_owner == me) {
            if (r->rlock_count == ULONG_MAX)
                return 0;  /* (the method raises OverflowError: let it) */
            r->rlock_count++;
            return 1;
        }
        if (!raw_try(r->rlock_lock))
            return 0;
        r->rlock_owner = me;
        r->rlock_count = 1;
        return 1;
    }
    lock_layout *l = (lock_layout *)lock;
    if (!raw_try(l->lock_lock))
        return 0;
    l->locked = 1;
    return 1;
#else
    (void)lock;
    return 0;
#endif
}

/* release a checked lock held by this thread: 1 released, 0 not held here (nothing done) */
static int lock_release(PyObject *lock)
{
#ifdef HRX_DIRECT_LOCKS
    if (Py_TYPE(lock) == rlock_type) {
        rlock_layout *r = (rlock_layout *)lock;
        if (r->rlock_count == 0 || r->rlock_owner != PyThread_get_thread_ident())
            return 0;
        if (--r->rlock_count == 0) {
            r->rlock_owner = 0;
            PyThread_release_lock(r->rlock_lock);
        }
        return 1;
    }
    lock_layout *l = (lock_layout *)lock;
    if (!l->locked)
        return 0;
    l->locked = 0;
    PyThread_release_lock(l->lock_lock);
    return 1;
#else
    (void)lock;
    return 0;
#endif
}

#ifdef HRX_SEM_LOCKS
/* Whether PyThread locks are POSIX semaphores that sem_trywait takes: where
   sys.thread_info.lock says "semaphore", checked on a fresh lock both ways (taken here,
   refused by the method; taken by the method, refused here). 1 yes, 0 no */
static int check_sem_locks(PyObject *thread)
{
    PyObject *info = PySys_GetObject("thread_info");  /* borrowed */
    PyObject *kind = info == NULL ? NULL : PyObject_GetAttrString(info, "lock");
    int ok = kind != NULL && PyUnicode_Check(kind) && PyUnicode_CompareWithASCIIString(kind, "semaphore") == 0;
    Py_XDECREF(kind);
    PyObject *l = ok ? PyObject_CallMethod(thread, "allocate_lock", NULL) : NULL, *x;
    if (l != NULL && Py_TYPE(l) == lock_type) {
        sem_t *sem = (sem_t *)((lock_layout *)l)->lock_lock;
        ok = sem_trywait(sem) == 0;
        x = ok ? PyObject_CallMethod(l, "acquire", "i", 0) : NULL;
        ok = x == Py_False && sem_trywait(sem) != 0 && errno == EAGAIN;
        Py_XDECREF(x);
        if (ok)
            ok = sem_post(sem) == 0;
        x = ok ? PyObject_CallMethod(l, "acquire", "i", 0) : NULL;
        ok = x == Py_True && sem_trywait(sem) != 0 && errno == EAGAIN;
        Py_XDECREF(x);
        x = ok ? PyObject_CallMethod(l, "release", NULL) : NULL;
        ok = x != NULL && sem_trywait(sem) == 0 && sem_post(sem) == 0;
        Py_XDECREF(x);
    } else {
        ok = 0;
    }
    PyErr_Clear();  /* (a failed check is a verdict) */
    Py_XDECREF(l);
    return ok;
}
#endif

/* Check the mirrored layouts on fresh locks (see above); on success enable the direct
   paths. Never fails: a mismatch leaves the method calls. 0, or -1 with an exception. */
static int check_lock_layouts(void)
{
#ifdef HRX_DIRECT_LOCKS
    PyObject *thread = PyImport_ImportModule("_thread");
    if (thread == NULL)
        return -1;
    PyObject *lt = PyObject_GetAttrString(thread, "LockType"), *rt = PyObject_GetAttrString(thread, "RLock");
    PyObject *l = NULL, *r = NULL;
    int ok = lt != NULL && rt != NULL && PyType_Check(lt) && PyType_Check(rt)
             && ((PyTypeObject *)lt)->tp_basicsize == (Py_ssize_t)sizeof(lock_layout)
             && ((PyTypeObject *)rt)->tp_basicsize == (Py_ssize_t)sizeof(rlock_layout);
    if (ok) {
        l = PyObject_CallMethod(thread, "allocate_lock", NULL);
        r = PyObject_CallNoArgs(rt);
        ok = l != NULL && r != NULL && Py_TYPE(l) == (PyTypeObject *)lt && Py_TYPE(r) == (PyTypeObject *)rt;
    }
    if (ok) {
        lock_layout *ll = (lock_layout *)l;
        rlock_layout *rl = (rlock_layout *)r;
        unsigned long me = PyThread_get_thread_ident();
        ok = ll->locked == 0 && rl->rlock_count == 0;
        PyObject *x = ok ? PyObject_CallMethod(l, "acquire", NULL) : NULL;
        ok = x == Py_True && ll->locked == 1;
        Py_XDECREF(x);
        x = ok ? PyObject_CallMethod(r, "acquire", NULL) : NULL;
        ok = x == Py_True && rl->rlock_count == 1 && rl->rlock_owner == me;
        Py_XDECREF(x);
        x = ok ? PyObject_CallMethod(r, "acquire", NULL) : NULL;
        ok = x == Py_True && rl->rlock_count == 2 && rl->rlock_owner == me;
        Py_XDECREF(x);
        for (int i = 0; ok && i < 2; i++) {
            x = PyObject_CallMethod(r, "release", NULL);
            ok = x != NULL && rl->rlock_count == (unsigned long)(1 - i);
            Py_XDECREF(x);
        }
        x = ok ? PyObject_CallMethod(l, "release", NULL) : NULL;
        ok = x != NULL && ll->locked == 0;
        Py_XDECREF(x);
        /* and the other way round: acquired here, seen and released by the methods */
        if (ok) {
            lock_acquire_def = method_def(l, "acquire");
            lock_release_def = method_def(l, "release");
            rlock_acquire_def = method_def(r, "acquire");
            rlock_release_def = method_def(r, "release");
            ok = lock_acquire_def && lock_release_def && rlock_acquire_def && rlock_release_def;
        }
        if (ok) {
            lock_type = (PyTypeObject *)lt;
            rlock_type = (PyTypeObject *)rt;
            ok = lock_try(l) == 1 && lock_try(r) == 1 && lock_try(r) == 1;
            x = ok ? PyObject_CallMethod(r, "_is_owned", NULL) : NULL;
            ok = x == Py_True;
            Py_XDECREF(x);
            x = ok ? PyObject_CallMethod(r, "release", NULL) : NULL;
            ok = x != NULL && lock_release(r) == 1 && rl->rlock_count == 0;
            Py_XDECREF(x);
            x = ok ? PyObject_CallMethod(l, "locked", NULL) : NULL;
            ok = x == Py_True && lock_release(l) == 1;
            Py_XDECREF(x);
            x = ok ? PyObject_CallMethod(l, "acquire", "i", 0) : NULL;  /* free again for the methods */
            ok = x == Py_True;
            Py_XDECREF(x);
            x = ok ? PyObject_CallMethod(l, "release", NULL) : NULL;
            ok = x != NULL;
            Py_XDECREF(x);
        }
    }
    PyErr_Clear();  /* (a failed check is a verdict, not an error) */
    Py_XDECREF(l);
    Py_XDECREF(r);
#ifdef HRX_SEM_LOCKS
    if (ok)
        sem_locks = check_sem_locks(thread);
#endif
    Py_DECREF(thread);
    if (ok)
        return 0;  /* (lock_type and rlock_type keep the references) */
    lock_type = rlock_type = NULL;
    Py_XDECREF(lt);
    Py_XDECREF(rt);
#endif
    return 0;
}

/* fn(False) answered True: 1; False: 0; an exception: -1 */
static int try_acquire(PyObject *acquire)
{
    PyObject *lock = direct_lock(acquire, 0);
    if (lock != NULL)
        return lock_try(lock);
    PyObject *no = Py_False;
    PyObject *got = PyObject_Vectorcall(acquire, &no, 1, NULL);
    if (got == NULL)
        return -1;
    int r = got == Py_True;
    Py_DECREF(got);
    return r;
}

/* a blocking fn(): 0, or -1 with an exception (uncontended: the direct path) */
static int acquire_blocking(PyObject *acquire)
{
    PyObject *lock = direct_lock(acquire, 0);
    if (lock != NULL && lock_try(lock) == 1)
        return 0;
    PyObject *r = PyObject_Vectorcall(acquire, NULL, 0, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* release a lock keeping the exception that is set, if any: -1 when the release raised
   and nothing else was set */
static int release_keeping(PyObject *release)
{
    PyObject *lock = direct_lock(release, 1);
    if (lock != NULL && lock_release(lock) == 1)
        return 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_Vectorcall(release, NULL, 0, NULL);
    int rc = 0;
    if (r == NULL) {
        if (et != NULL)
            PyErr_Clear();
        else
            rc = -1;
    }
    Py_XDECREF(r);
    if (et != NULL)
        PyErr_Restore(et, ev, tb);
    return rc;
}

/* Enter a critical section guarded by the _thread.lock whose bound `acquire` this is,
   for a section that cannot release the GIL (it runs no Python code, makes no object
   the cyclic collector tracks, frees nothing whose finalizer could run code): where
   the lock is free, holding the GIL excludes the other threads as taking the lock
   would -- none is inside (the lock is free: a thread that took the lock's semaphore
   without the GIL sets `locked` only after it gets the GIL, when this section is
   over) and none can enter before the section ends. 1: entered without the lock
   (leave_section releases nothing), 0: the lock was taken, -1 error. */
static inline int enter_section(PyObject *acquire)
{
#ifdef HRX_DIRECT_LOCKS
    PyObject *lock = direct_lock(acquire, 0);
    if (lock != NULL && Py_TYPE(lock) == lock_type && !((lock_layout *)lock)->locked)
        return 1;
#endif
    return acquire_blocking(acquire) < 0 ? -1 : 0;
}

/* leave what enter_section answered `entered` for (keeping a set exception) */
static inline int leave_section(int entered, PyObject *release)
{
    return entered == 1 ? 0 : release_keeping(release);
}

/* mapping[key] = value, skipped where a dict holds that very value already */
static int set_item(PyObject *mapping, PyObject *key, PyObject *value)
{
    if (PyDict_CheckExact(mapping)) {
        if (PyDict_GET_SIZE(mapping) == 1) {
            /* (the common one-queue case: its one entry read without hashing) */
            Py_ssize_t pos = 0;
            PyObject *k, *v;
            if (PyDict_Next(mapping, &pos, &k, &v) && k == key)
                return v == value ? 0 : PyDict_SetItem(mapping, key, value);
        }
        PyObject *now = PyDict_GetItemWithError(mapping, key);  /* borrowed */
        if (now == value)
            return 0;
        if (now == NULL && PyErr_Occurred())
            return -1;
        return PyDict_SetItem(mapping, key, value);
    }
    return PyObject_SetItem(mapping, key, value);
}

/* An exact int of one digit or none (|v| < 2**30 on 64-bit builds: what counters, epochs
   and timeline values usually are) read without PyLong_AsLong's checks: 1 with *out
   set, 0 for any other object (the caller's general path takes it) */
static inline int compact_long(PyObject *v, long long *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)v))
        return 0;
    *out = (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
    return 1;
#else
    Py_ssize_t size = Py_SIZE(v);
    if (size < -1 || size > 1)
        return 0;
    *out = (long long)size * (long long)((PyLongObject *)v)->ob_digit[0];
    return 1;
#endif
}

/* attribute += delta on a Python int attribute (*out: its value before): one slot
   lookup for the read and the write where it is a slot */
static int add_to_at(PyObject *obj, PyObject *name, long delta, long *out, slot_site *site)
{
    Py_ssize_t offset = slot_offset_at(Py_TYPE(obj), name, site);
    PyObject **field = offset >= 0 ? (PyObject **)((char *)obj + offset) : NULL;
    PyObject *v = field != NULL && *field != NULL ? Py_NewRef(*field) : PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    long long c;
    long n = compact_long(v, &c) ? (long)c : PyLong_AsLong(v);
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    PyObject *w = PyLong_FromLong(n + delta);
    if (w == NULL)
        return -1;
    if (out != NULL)
        *out = n;
    if (field != NULL && *field != NULL) {  /* (still set: __index__ of an int subclass may run code) */
        PyObject *old = *field;
        *field = w;  /* the reference moves here */
        Py_DECREF(old);
        return 0;
    }
    int rc = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    return rc;
}
#define add_to(obj, name, delta, out) add_to_at((obj), (name), (delta), (out), SITE())

static PyObject *small_zero;  /* PyLong_FromLong(0), set with the module */
static PyObject *small_one;  /* PyLong_FromLong(1) */

/* hrx_core.completion.Completion, imported on first use */
static PyObject *completion_type = NULL;
static PyObject *s_slot_attr;  /* (interned with the others, in hrx_module_create) */
static PyObject *s_last_end, *s_append, *s_popleft, *s_clear, *s_extend, *s_extendleft;

/* PyObject_RichCompareBool(a, b, op) for the runtime's counters, values and epochs:
   exact ints that fit a long long compared as C integers (the same answer, without the
   rich comparison's dispatch), anything else by PyObject_RichCompareBool */
static inline int int_compare(PyObject *a, PyObject *b, int op)
{
    if (a == b && op == Py_EQ)  /* (as PyObject_RichCompareBool: one object equals itself) */
        return 1;
    long long cx, cy;
    if (compact_long(a, &cx) && compact_long(b, &cy)) {
        switch (op) {
        case Py_EQ: return cx == cy;
        case Py_GE: return cx >= cy;
        case Py_GT: return cx > cy;
        default: break;
        }
    }
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int oa, ob;
        long long x = PyLong_AsLongLongAndOverflow(a, &oa), y = PyLong_AsLongLongAndOverflow(b, &ob);
        if (oa == 0 && ob == 0) {  /* (an exact int converts or overflows: never an error) */
            switch (op) {
            case Py_EQ: return x == y;
            case Py_GE: return x >= y;
            case Py_GT: return x > y;
            default: break;
            }
        }
    }
    return PyObject_RichCompareBool(a, b, op);
}

/* whether `c` is a Completion that nothing references but the one holder asking (a
   spare Event's completion field) and no weak reference points at: refilled in place,
   nobody can tell it from a new one */
static inline int completion_spare(PyObject *c)
{
    if (c == NULL || completion_type == NULL || (PyObject *)Py_TYPE(c) != completion_type || Py_REFCNT(c) != 1)
        return 0;
    Py_ssize_t off = Py_TYPE(c)->tp_weaklistoffset;
    return off == 0 || *(PyObject **)((char *)c + off) == NULL;
}

/* Stream._done(value) without a Python frame where nothing unusual happens: the value
   noted in the stream's list (unless it is its last), a new Completion(slot, value)
   made the stream's latest. A list due for pruning, or a latest completion at or past
   `value` (another thread moved on), goes to the Python method. `reuse`: NULL, or a
   settled Completion that nothing but a spare Event holds (completion_spare), filled in
   instead of allocating one. New reference or NULL. */
static PyObject *stream_done(PyObject *stream, PyObject *slot, PyObject *value, PyObject *reuse)
{
    if (completion_type == NULL) {
        PyObject *m = PyImport_ImportModule("hrx_core.completion");
        if (m == NULL)
            return NULL;
        completion_type = PyObject_GetAttrString(m, "Completion");
        Py_DECREF(m);
        if (completion_type == NULL)
            return NULL;
        if (!PyType_Check(completion_type)) {
            Py_CLEAR(completion_type);
            PyErr_SetString(PyExc_TypeError, "hrx_core.completion.Completion: expected a class");
            return NULL;
        }
    }
    PyObject *values = get_attr(stream, s_values), *last = NULL, *completion = NULL;
    if (values == NULL)
        return NULL;
    int slow = !PyList_CheckExact(values) || PyList_GET_SIZE(values) >= 4096;
    if (!slow) {
        last = get_attr(stream, s_ulast);
        if (last == NULL)
            goto done;
        if (last != Py_None) {
            PyObject *lv = get_attr(last, s_value);
            if (lv == NULL)
                goto done;
            slow = int_compare(lv, value, Py_GE);
            Py_DECREF(lv);
            if (slow < 0)
                goto done;
        }
    }
    if (slow) {
        completion = PyObject_CallMethodOneArg(stream, s_done, value);
        goto done;
    }
    {
        Py_ssize_t n = PyList_GET_SIZE(values);
        int same = n == 0 ? 0 : int_compare(PyList_GET_ITEM(values, n - 1), value, Py_EQ);
        if (same < 0 || (!same && PyList_Append(values, value) < 0))
            goto done;
    }
    {
        PyTypeObject *type = (PyTypeObject *)completion_type;
        PyObject *c = completion_spare(reuse) ? Py_NewRef(reuse) : type->tp_alloc(type, 0);
        if (c == NULL)
            goto done;
        if (set_attr(c, s_slot_attr, slot) < 0 || set_attr(c, s_value, value) < 0
            || set_attr(stream, s_ulast, c) < 0) {
            Py_DECREF(c);
            goto done;
        }
        completion = c;
    }
done:
    Py_XDECREF(values);
    Py_XDECREF(last);
    return completion;
}

/* 1 when the graph's launch record was validated at the current EPOCH, 0 if not, -1 error */
static int record_current(Replayer *self)
{
    PyObject *mine = get_attr(self->record, s_epoch);
    if (mine == NULL)
        return -1;
    PyObject *now = get_attr(self->epoch, s_value);
    if (now == NULL) {
        Py_DECREF(mine);
        return -1;
    }
    int r = int_compare(mine, now, Py_EQ);
    Py_DECREF(mine);
    Py_DECREF(now);
    return r;
}

static PyObject *launch_locked(Replayer *self, PyObject *graph, PyObject *rebind, PyObject *reuse);
static PyObject *replay(Replayer *self, PyObject *graph);
static PyObject *replay_into(Replayer *self, PyObject *graph, PyObject *reuse);
static PyObject *replay_rebound(Replayer *self, PyObject *graph, PyObject *inputs);
static PyObject *replay_restored(Replayer *self, PyObject *graph);

/* replayer(graph) -> Completion, or None: nothing was done, run the Python path */
static PyObject *Replayer_call(Replayer *self, PyObject *args, PyObject *kwargs)
{
    PyObject *graph;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "a replayer takes the graph only");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "replayer", 1, 1, &graph))
        return NULL;
    return replay(self, graph);
}

/* the replay of Replayer_call and of the compiled Graph.launch (FastEntry) */
static PyObject *replay(Replayer *self, PyObject *graph)
{
    return replay_into(self, graph, NULL);
}

/* replay(), with a spare Completion to fill in where the launch needs a new one (NULL:
   none; see stream_done) */
static PyObject *replay_into(Replayer *self, PyObject *graph, PyObject *reuse)
{
    int r;
    /* (the graph drops its replayer with its plan and when it closes; a new native
       graph comes with a new plan) */
    if ((r = attr_is(graph, s_plan, self->plan)) != 1)
        return r < 0 ? NULL : miss(self);
    if ((r = attr_is(graph, s_rebound, Py_False)) < 0)
        return NULL;
    if (r == 0)  /* a rebinding replay left other memory bound: bind the defaults again */
        return replay_restored(self, graph);
    if ((r = record_current(self)) != 1)
        return r < 0 ? NULL : miss(self);
    /* (an unloaded kernel moved the epoch, and the graph's record check refuses it:
       a current record means every kernel is loaded) */
    return launch_locked(self, graph, NULL, reuse);
}

/* A plain replay of a rebound graph: its restore record (Graph._remember_restore, made
   by the Python path's first such replay) applied as a rebind record is, where it is
   current (EPOCH stands), then the launch; else None (the Python path). */
static PyObject *replay_restored(Replayer *self, PyObject *graph)
{
    PyObject *restore = get_attr(graph, s_restore);
    if (restore == NULL)
        return NULL;
    if (restore == Py_None) {
        Py_DECREF(restore);
        return miss(self);
    }
    PyObject *mine = get_attr(restore, s_epoch);
    PyObject *now = mine == NULL ? NULL : get_attr(self->epoch, s_value);
    int r = now == NULL ? -1 : int_compare(mine, now, Py_EQ);
    Py_XDECREF(mine);
    Py_XDECREF(now);
    if (r == 1)
        r = record_current(self);
    PyObject *result = r == 1 ? launch_locked(self, graph, restore, NULL) : (r < 0 ? NULL : miss(self));
    Py_DECREF(restore);
    return result;
}

/* Apply a rebind record's inputs (under the queue's lock), as Graph._apply_record
   does: 1 applied, 0 the Python path must do it (some may be staged already: it
   starts from what the graph's bindings say now), -1 an exception. */
static int apply_rebind(Replayer *self, PyObject *graph, PyObject *rebind)
{
    PyObject *bound = get_attr(graph, s_bound);
    if (bound == NULL)
        return -1;
    PyObject *items = get_attr(rebind, s_items);
    if (items == NULL) {
        Py_DECREF(bound);
        return -1;
    }
    int rc = 1;
    if (!PyDict_Check(bound) || !PyTuple_Check(items)) {
        rc = 0;
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 4) {
            rc = 0;
            goto done;
        }
        PyObject *name = PyTuple_GET_ITEM(item, 0), *key = PyTuple_GET_ITEM(item, 1);
        PyObject *prepared = PyTuple_GET_ITEM(item, 3);
        PyObject *now = PyDict_GetItemWithError(bound, name);  /* borrowed */
        if (now == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        int same = PyObject_RichCompareBool(now, key, Py_EQ);
        if (same < 0) {
            rc = -1;
            goto done;
        }
        if (same)
            continue;
        if (prepared == Py_None) {  /* the engine patches these through patch_args: Python */
            rc = 0;
            goto done;
        }
        int staged = 0;
        if (self->stage_fn != NULL && PyList_CheckExact(self->stage_log)
            && PyList_GET_SIZE(self->stage_log) < self->stage_limit && PyObject_CheckBuffer(prepared)) {
            /* the engine stages it in C; its patch log gets the prepared object */
            Py_buffer view;
            if (PyObject_GetBuffer(prepared, &view, PyBUF_SIMPLE) < 0) {
                rc = -1;
                goto done;
            }
            staged = self->stage_fn(self->stage_arg, view.buf, (size_t)view.len);
            PyBuffer_Release(&view);
            if (staged == 1 && PyList_Append(self->stage_log, prepared) < 0) {
                rc = -1;  /* (staged, not logged: the graph's nodes would miss it -- raise) */
                goto done;
            }
        }
        if (staged == 1) {
            if (PyDict_SetItem(bound, name, key) < 0) {
                rc = -1;
                goto done;
            }
            continue;
        }
        PyObject *ok = PyObject_CallMethodOneArg(self->native_graph, s_apply_patches, prepared);
        if (ok == NULL) {
            rc = -1;
            goto done;
        }
        int applied = PyObject_IsTrue(ok);
        Py_DECREF(ok);
        if (applied <= 0) {
            rc = applied < 0 ? -1 : 0;
            goto done;
        }
        if (PyDict_SetItem(bound, name, key) < 0) {
            rc = -1;
            goto done;
        }
    }
    {
        PyObject *rebound = get_attr(rebind, s_rebound_attr);
        if (rebound == NULL || set_attr(graph, s_rebound, rebound) < 0)
            rc = -1;
        Py_XDECREF(rebound);
    }
done:
    Py_DECREF(bound);
    Py_DECREF(items);
    return rc;
}

/* replayer.rebind(graph, inputs) -> Completion, or None: a replay with ``inputs`` (a
   dict replayed before, whose rebind record is current) as Graph.launch(inputs=...)
   makes it; None where the Python path must run (nothing launched). */
static PyObject *Replayer_rebind(Replayer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "rebind(graph, inputs)");
        return NULL;
    }
    return replay_rebound(self, args[0], args[1]);
}

/* the rebinding replay of Replayer.rebind and of the compiled Graph.launch (FastEntry) */
/* 1 when each of the n weak references in `refs` (a tuple) refers to the value of
   `inputs` at its position, else 0 */
static int refs_match(PyObject *refs, PyObject *inputs, Py_ssize_t n)
{
    if (!PyTuple_Check(refs) || PyTuple_GET_SIZE(refs) != n)
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *name, *value;
    while (PyDict_Next(inputs, &pos, &name, &value)) {
        if (i >= n)
            return 0;
        PyObject *ref = PyTuple_GET_ITEM(refs, i++);
        if (!PyWeakref_CheckRef(ref))
            return 0;
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *obj = NULL;
        if (PyWeakref_GetRef(ref, &obj) < 0)
            PyErr_Clear();
        Py_XDECREF(obj);  /* (only its identity is compared) */
#else
        PyObject *obj = PyWeakref_GET_OBJECT(ref);
#endif
        if (obj != value)
            return 0;
    }
    return i == n;
}

/* A rebind record from the replayer's own cache of the mappings it replayed last: one
   whose names are the mapping's, in its order, and whose values are the mapping's (by
   identity). A new reference, or NULL (none; no exception). */
static PyObject *rcache_find(Replayer *self, PyObject *inputs, Py_ssize_t n)
{
    for (int k = 0; k < RCACHE; k++) {
        PyObject *names = self->rc_names[k], *record = self->rc_record[k];
        if (record == NULL || PyTuple_GET_SIZE(names) != n)
            continue;
        Py_ssize_t pos = 0, i = 0;
        PyObject *name, *value;
        int same = 1;
        while (same && PyDict_Next(inputs, &pos, &name, &value)) {
            PyObject *mine = PyTuple_GET_ITEM(names, i++);
            same = name == mine || (PyUnicode_CheckExact(name) && PyUnicode_CheckExact(mine)
                                    && PyUnicode_Compare(name, mine) == 0);
        }
        if (!same)
            continue;
        PyObject *refs = get_attr(record, s_refs);
        if (refs == NULL) {
            PyErr_Clear();
            continue;
        }
        same = refs_match(refs, inputs, n);
        Py_DECREF(refs);
        if (same)
            return Py_NewRef(record);
    }
    return NULL;
}

static void rcache_put(Replayer *self, PyObject *names, PyObject *record)
{
    int k = self->rc_next;
    self->rc_next = (k + 1) % RCACHE;
    Py_XSETREF(self->rc_names[k], Py_NewRef(names));
    Py_XSETREF(self->rc_record[k], Py_NewRef(record));
}

/* the rebinding replay of Replayer.rebind and of the compiled Graph.launch (FastEntry) */
static PyObject *replay_rebound(Replayer *self, PyObject *graph, PyObject *inputs)
{
    if (!PyDict_CheckExact(inputs) || PyDict_GET_SIZE(inputs) == 0)
        return miss(self);
    int r;
    if ((r = attr_is(graph, s_plan, self->plan)) != 1)
        return r < 0 ? NULL : miss(self);
    Py_ssize_t n = PyDict_GET_SIZE(inputs);
    /* the mapping's rebind record: the replayer's cache, else the graph's memo (keyed by
       the names, then id() of the values) */
    PyObject *rebind = rcache_find(self, inputs, n);
    if (rebind == NULL) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *key = PyTuple_New(2 * n), *name, *value;
        if (key == NULL)
            return NULL;
        while (PyDict_Next(inputs, &pos, &name, &value)) {
            if (i >= n)
                break;
            PyObject *id = PyLong_FromVoidPtr(value);
            if (id == NULL) {
                Py_DECREF(key);
                return NULL;
            }
            Py_INCREF(name);
            PyTuple_SET_ITEM(key, i, name);
            PyTuple_SET_ITEM(key, n + i, id);
            i++;
        }
        PyObject *memo = get_attr(graph, s_rebind_memo);
        if (memo == NULL) {
            Py_DECREF(key);
            return NULL;
        }
        rebind = PyDict_Check(memo) ? PyDict_GetItemWithError(memo, key) : NULL;
        Py_XINCREF(rebind);
        Py_DECREF(memo);
        PyObject *refs = rebind == NULL ? NULL : get_attr(rebind, s_refs);
        int same = refs != NULL && refs_match(refs, inputs, n);  /* each value is the object it was made from */
        Py_XDECREF(refs);
        PyObject *names = same ? PyTuple_GetSlice(key, 0, n) : NULL;
        Py_DECREF(key);
        if (names != NULL) {
            rcache_put(self, names, rebind);
            Py_DECREF(names);
        }
        if (!same) {
            Py_XDECREF(rebind);
            return PyErr_Occurred() ? NULL : miss(self);
        }
    }
    PyObject *result = NULL;
    /* the record is current: EPOCH stands (a closed record's epoch is -1) */
    {
        PyObject *mine = get_attr(rebind, s_epoch);
        PyObject *now = mine == NULL ? NULL : get_attr(self->epoch, s_value);
        r = now == NULL ? -1 : int_compare(mine, now, Py_EQ);
        Py_XDECREF(mine);
        Py_XDECREF(now);
        if (r != 1)
            goto out_miss;
    }
    if ((r = record_current(self)) != 1)
        goto out_miss;
    result = launch_locked(self, graph, rebind, NULL);
    Py_DECREF(rebind);
    return result;
out_miss:
    Py_DECREF(rebind);
    return r < 0 ? NULL : miss(self);
}

/* Take the queue's lock (None: busy, the Python path waits), then (a rebind record's
   inputs applied first) launch, commit and answer the completion. */
static PyObject *launch_locked(Replayer *self, PyObject *graph, PyObject *rebind, PyObject *reuse)
{
    int r;
    if ((r = try_acquire(self->acquire)) != 1)  /* another thread holds the queue: the Python path waits for it */
        return r < 0 ? NULL : miss(self);

    PyObject *native = self->native, *value = NULL, *done = NULL, *completion = NULL, *tmp = NULL;
    PyObject *result = NULL;
    if ((r = attr_true(self->slot, s_closed)) != 0) {
        if (r < 0)
            goto unlock;
        goto unlock_miss;
    }
    if (rebind != NULL) {
        r = apply_rebind(self, graph, rebind);
        if (r < 0)
            goto unlock;
        if (r == 0)
            goto unlock_miss;
    }
    if (self->fn != NULL) {
        long long info[2] = {0, -1};
        int code = self->fn(self->arg, info);
        if (code == -1)
            goto unlock_miss;
        if (code != 0) {
            tmp = PyObject_CallFunction(self->on_failure, "iLL", code, info[0], info[1]);
            if (tmp == NULL)
                goto unlock;  /* raised: nothing committed, as in the Python path */
            Py_CLEAR(tmp);
        }
    } else {
        tmp = PyObject_CallOneArg(self->launch_py, native);
        if (tmp == NULL)
            goto unlock;
        Py_CLEAR(tmp);
    }
    if (self->needs_submit) {
        tmp = PyObject_CallMethodNoArgs(native, s_submit);
        if (tmp == NULL)
            goto unlock;
        Py_CLEAR(tmp);
    }
    value = get_attr(self->slot, s_pending_value);
    if (value == NULL)
        goto unlock;
    if (self->owned) {  /* what close() defers behind */
        tmp = get_attr(graph, s_last_launch);
        if (tmp == NULL || PyObject_SetItem(tmp, self->slot, value) < 0)
            goto unlock;
        Py_CLEAR(tmp);
    }
    {
        long ops;
        if (add_to(self->slot, s_unsignaled_ops, 1, &ops) < 0)
            goto unlock;
        if (ops + 1 >= self->auto_flush) {
            done = PyObject_CallMethodNoArgs(self->slot, s_flush_locked);
            if (done == NULL)
                goto unlock;
        }
    }
    /* launches between two signals share the stream's latest completion */
    completion = get_attr(self->stream, s_ulast);
    if (completion == NULL)
        goto unlock;
    r = 0;
    if (completion != Py_None) {
        PyObject *cv = get_attr(completion, s_value);
        if (cv == NULL)
            goto unlock;
        r = int_compare(cv, value, Py_EQ);
        Py_DECREF(cv);
        if (r < 0)
            goto unlock;
        if (r == 1) {
            PyObject *values = get_attr(self->stream, s_values);
            if (values == NULL)
                goto unlock;
            r = 0;
            if (PyList_Check(values) && PyList_GET_SIZE(values) > 0)
                r = int_compare(PyList_GET_ITEM(values, PyList_GET_SIZE(values) - 1), value, Py_EQ);
            Py_DECREF(values);
            if (r < 0)
                goto unlock;
        }
    }
    if (r != 1) {
        Py_DECREF(completion);
        completion = stream_done(self->stream, self->slot, value, reuse);
        if (completion == NULL)
            goto unlock;
    }
    tmp = get_attr(self->record, s_last);
    if (tmp == NULL || set_item(tmp, self->slot, completion) < 0)
        goto unlock;
    Py_CLEAR(tmp);
    if (rebind != NULL) {  /* the record holds what it rebinds: its last launch here */
        tmp = get_attr(rebind, s_holds);
        if (tmp == NULL)
            goto unlock;
        if (tmp != Py_None) {
            PyObject *last = get_attr(tmp, s_last);
            if (last == NULL || set_item(last, self->slot, completion) < 0) {
                Py_XDECREF(last);
                goto unlock;
            }
            Py_DECREF(last);
        }
        Py_CLEAR(tmp);
    }
    result = completion;
    completion = NULL;
    goto unlock;

unlock_miss:
    self->misses++;
    result = Py_None;
    Py_INCREF(result);
unlock:
    if (release_keeping(self->release) < 0)  /* whatever happened, keeping an exception that is set */
        Py_CLEAR(result);
    Py_XDECREF(tmp);
    Py_XDECREF(value);
    Py_XDECREF(completion);
    if (result == NULL || result == Py_None) {
        if (done != NULL && result == NULL) {
            /* an error after the automatic signal: its retired owners still go */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if (PyObject_IsTrue(done) == 1) {
                PyObject *x = PyObject_CallMethodOneArg(self->slot, s_release_retired, done);
                Py_XDECREF(x);
                PyErr_Clear();
            }
            PyErr_Restore(et, ev, tb);
        }
        Py_XDECREF(done);
        return result;
    }
    if (done != NULL) {
        r = PyObject_IsTrue(done);
        if (r == 1) {
            tmp = PyObject_CallMethodOneArg(self->slot, s_release_retired, done);
            if (tmp == NULL)
                r = -1;
            Py_XDECREF(tmp);
        }
        Py_DECREF(done);
        if (r < 0) {
            Py_DECREF(result);
            return NULL;
        }
    }
    if (self->graph_tally != NULL)
        ((Tally *)self->graph_tally)->value++;
    else if (add_to(graph, s_launches, 1, NULL) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    if (self->stats_tally != NULL)
        ((Tally *)self->stats_tally)->value++;
    else if (add_to(self->stats, s_graph_launches, 1, NULL) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    self->hits++;
    return result;
}

static int Replayer_traverse(Replayer *self, visitproc visit, void *arg)
{
    for (int k = 0; k < RCACHE; k++) {
        Py_VISIT(self->rc_names[k]);
        Py_VISIT(self->rc_record[k]);
    }
    return visit_fields(&self->plan, &self->native, visit, arg);
}

static int Replayer_clear(Replayer *self)
{
    for (int k = 0; k < RCACHE; k++) {
        Py_CLEAR(self->rc_names[k]);
        Py_CLEAR(self->rc_record[k]);
    }
    clear_fields(&self->plan, &self->native);
    self->fn = NULL;
    self->stage_fn = NULL;
    return 0;
}

static void Replayer_dealloc(Replayer *self)
{
    PyObject_GC_UnTrack(self);
    Replayer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Replayer_init(Replayer *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"plan", "native_graph", "record", "epoch", "slot", "stream", "stats",
                            "launch", "on_failure", "entry", "argument", "keep", "owned", "auto_flush",
                            "stage", "tallies", NULL};
    PyObject *plan, *native_graph, *record, *epoch, *slot, *stream, *stats, *launch_py, *on_failure,
        *keep, *stage = Py_None, *tallies = Py_None, *graph_tally = NULL, *stats_tally = NULL;
    unsigned long long entry, argument, stage_entry = 0, stage_argument = 0;
    PyObject *stage_log = NULL, *stage_keep = NULL;
    Py_ssize_t stage_limit = 0;
    int owned;
    long auto_flush;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOKKOpl|OO", names, &plan, &native_graph,
                                     &record, &epoch, &slot, &stream, &stats, &launch_py, &on_failure,
                                     &entry, &argument, &keep, &owned, &auto_flush, &stage, &tallies))
        return -1;
    if (tallies != Py_None) {
        /* (graph's launch Tally, the device's graph-launch Tally) */
        if (!PyArg_ParseTuple(tallies, "O!O!", &TallyType, &graph_tally, &TallyType, &stats_tally))
            return -1;
    }
    if (auto_flush < 1) {
        PyErr_SetString(PyExc_ValueError, "auto_flush: expected at least 1");
        return -1;
    }
    if (stage != Py_None) {
        /* NativeGraph.fast_stage(): (entry, argument, log, limit, keep) */
        if (!PyTuple_Check(stage)
            || !PyArg_ParseTuple(stage, "KKO!nO", &stage_entry, &stage_argument, &PyList_Type, &stage_log,
                                 &stage_limit, &stage_keep))
            {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "stage: expected None or (entry, argument, log, limit, keep)");
            return -1;
        }
        if (stage_entry == 0 || stage_limit < 1) {
            PyErr_SetString(PyExc_ValueError, "stage: expected an entry address and a limit of at least 1");
            return -1;
        }
    }
    PyObject *lock = PyObject_GetAttrString(slot, "lock");
    if (lock == NULL)
        return -1;
    PyObject *acquire = get_attr(lock, s_acquire);
    PyObject *release = get_attr(lock, s_release);
    PyObject *native = get_attr(slot, s_unative);
    int needs_submit = native == NULL || native == Py_None ? -1 : attr_true(native, s_needs_submit);
    if (acquire == NULL || release == NULL || native == NULL || needs_submit < 0) {
        if (native == Py_None)
            PyErr_SetString(PyExc_ValueError, "slot: its native queue is not created yet");
        Py_DECREF(lock);
        Py_XDECREF(acquire);
        Py_XDECREF(release);
        Py_XDECREF(native);
        return -1;
    }
    Replayer_clear(self);
    self->lock = lock;
    self->acquire = acquire;
    self->release = release;
    self->native = native;
    self->needs_submit = needs_submit;
#define KEEP(field, value) do { Py_INCREF(value); self->field = value; } while (0)
    KEEP(plan, plan);
    KEEP(native_graph, native_graph);
    KEEP(record, record);
    KEEP(epoch, epoch);
    KEEP(slot, slot);
    KEEP(stream, stream);
    KEEP(stats, stats);
    KEEP(launch_py, launch_py);
    KEEP(on_failure, on_failure);
    KEEP(keep, keep);
#undef KEEP
    self->fn = (hrx_fast_fn)(uintptr_t)entry;
    self->arg = (void *)(uintptr_t)argument;
    if (graph_tally != NULL) {
        self->graph_tally = Py_NewRef(graph_tally);
        self->stats_tally = Py_NewRef(stats_tally);
    }
    if (stage_log != NULL) {
        Py_INCREF(stage_log);
        Py_INCREF(stage_keep);
        self->stage_log = stage_log;
        self->stage_keep = stage_keep;
    }
    self->stage_fn = (hrx_stage_fn)(uintptr_t)stage_entry;
    self->stage_arg = (void *)(uintptr_t)stage_argument;
    self->stage_limit = stage_limit;
    self->owned = owned;
    self->auto_flush = auto_flush;
    self->hits = self->misses = 0;
    return 0;
}

static PyMemberDef Replayer_members[] = {
    {"hits", T_PYSSIZET, offsetof(Replayer, hits), READONLY, "replays this replayer made"},
    {"misses", T_PYSSIZET, offsetof(Replayer, misses), READONLY, "calls it left to the Python path"},
    {"plan", T_OBJECT, offsetof(Replayer, plan), READONLY, "the plan it was made for"},
    {NULL}
};

static PyObject *Replayer_compiled_entry(Replayer *self, void *closure)
{
    return PyBool_FromLong(self->fn != NULL);
}

static PyObject *Replayer_compiled_stage(Replayer *self, void *closure)
{
    return PyBool_FromLong(self->stage_fn != NULL);
}

static PyMethodDef Replayer_methods[] = {
    {"rebind", (PyCFunction)(void (*)(void))Replayer_rebind, METH_FASTCALL,
     "rebind(graph, inputs): a replay with a mapping replayed before, or None (nothing done)"},
    {NULL}
};

static PyGetSetDef Replayer_getset[] = {
    {"compiled_entry", (getter)Replayer_compiled_entry, NULL, "whether the engine launches through C", NULL},
    {"compiled_stage", (getter)Replayer_compiled_stage, NULL, "whether the engine stages prepared patches in C", NULL},
    {NULL}
};

static PyTypeObject ReplayerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hrx_core.fastpath.Replayer",
    .tp_basicsize = sizeof(Replayer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The common replay of one graph on its recording stream, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Replayer_init,
    .tp_dealloc = (destructor)Replayer_dealloc,
    .tp_traverse = (traverseproc)Replayer_traverse,
    .tp_clear = (inquiry)Replayer_clear,
    .tp_call = (ternaryfunc)Replayer_call,
    .tp_members = Replayer_members,
    .tp_methods = Replayer_methods,
    .tp_getset = Replayer_getset,
};

/* ---- Runtime resubmission (hrx_core.execution.runtime.Runtime.submit) ---------------- */

static PyObject *s_submit_plan, *s_gclosed, *s_fast_resubmit, *s_resubmit, *s_generation, *s_places,
    *s_encode_signaled, *s_reported, *s_waited, *s_stream, *s_inherits_previous,
    *s_upstream, *s_room_taken, *s_sequence,
    *s_usequence, *s_add_uncounted, *s_observe, *s_quarantined, *s_releasing,
    *s_prove_idle, *s_give_room_back, *s_notice, *s_fold_observed,
    *s_reservations, *s_slot_attr, *s_device_graph, *s_fast, *s_completion, *s_resolved,
    *s_timestamp, *s_signaled, *s_utimeline, *s_completed, *s_has_errors, *s_runtime_attr, *s_graph_attr, *s_events, *s_owners, *s_submitted,
    *s_settled, *s_c_completed, *s_c_failed, *s_retire, *s_retained, *s_quarantine_failed, *s_space_waiters,
    *s_retired, *s_settle_finished;

#define SPARES 64  /* (RuntimeOptions.max_submissions' default: one settled batch) */

typedef struct {
    PyObject_HEAD
    /* object fields, `runtime` to `lane_release` (see visit_fields) */
    PyObject *runtime, *plan, *inflight, *submission_type, *event_type, *perf_counter;
    PyObject *submit_acquire, *submit_release, *space_acquire, *space_release;
    PyObject *pending, *uncounted, *unstamped;
    /* observe=True (noticed, not exact): the runtime's _observed deque, the two deques'
       append and _unstamped's popleft, the _fold_lock's methods, a 0.0 (see notice) */
    PyObject *observed, *observed_append, *unstamped_append, *unstamped_popleft, *fold_acquire, *fold_release, *zero;
    PyObject *owners, *counters, *infos, *reservations, *empty;
    /* bound methods: pending.append, pending.popleft, uncounted.append, the settle lock's */
    PyObject *pending_append, *pending_popleft, *uncounted_append, *settle_acquire, *settle_release;
    /* runtime._Resubmit where its first fields are (generation, slot, places), else NULL */
    PyObject *resubmit_type;
    /* the graph's one region, its lane, the lane's stream and queue slot, the lane
       lock's methods */
    PyObject *region, *lane, *stream, *slot, *lane_acquire, *lane_release;
    int lazy, reads_own_writes;
    int direct;   /* the region replays its device graph (_RecordedRegion.encode_signaled): call its replayer */
    int observe;  /* RuntimeOptions.observe: 0 off, 1 True (noticed: observe_noticed and notice here), 2 "exact" (Runtime._observe) */
    int c_clock;  /* perf_counter is time.perf_counter on clock_gettime(CLOCK_MONOTONIC): read here */
    /* the runtime's room and settled flags are plain: _pending a collections.deque (its
       bound append and popleft builtins), Submission's _settled and the runtime's
       _room_taken slots -- so the sections over them cannot release the GIL and run
       without their locks where those are free (enter_section) */
    int plain;
    long max_submissions;
    Py_ssize_t fold_after;  /* runtime._FOLD_AFTER */
    Py_ssize_t notice_scan, queues;  /* runtime._NOTICE_SCAN, Runtime._queues */
    Py_ssize_t hits, misses;
    /* settled submissions nothing else referenced, kept for reuse with their events
       list and Event (keep_spare, take_spare); their fields other than those hold None */
    PyObject *spares[SPARES];
    int nspares;
    Py_ssize_t recycled;  /* submissions made from a spare */
    Py_ssize_t refilled;  /* completions of those filled in by the replay (completion_spare) */
} Submitter;

static PyObject *sub_miss(Submitter *self)
{
    self->misses++;
    Py_RETURN_NONE;
}

/* A timeline's published word (Timeline.c_completed / c_failed): its address in *p,
   NULL where the engine publishes none. 0, or -1 with an exception */
static int c_word_at(PyObject *tl, PyObject *name, void **p, slot_site *site)
{
    PyObject *a = get_attr_at(tl, name, site);
    if (a == NULL)
        return -1;
    *p = PyLong_CheckExact(a) ? PyLong_AsVoidPtr(a) : NULL;
    Py_DECREF(a);
    return *p == NULL && PyErr_Occurred() ? -1 : 0;
}
#define c_word(tl, name, p) c_word_at((tl), (name), (p), SITE())

/* The value timeline `tl` reached: where its engine publishes the counter to C
   (Timeline.c_completed, the address of a uint64 that is completed()) one load, else
   completed() called. 0 with *value set, or -1 with an exception */
static int tl_completed(PyObject *tl, unsigned long long *value)
{
    void *p;
    if (c_word(tl, s_c_completed, &p) < 0)
        return -1;
    if (p != NULL) {
        *value = *(volatile unsigned long long *)p;
        return 0;
    }
    PyObject *c = PyObject_CallMethodNoArgs(tl, s_completed);
    if (c == NULL)
        return -1;
    *value = PyLong_AsUnsignedLongLong(c);
    Py_DECREF(c);
    return *value == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* Whether `tl` may report a failure (Timeline.has_errors): where its engine publishes a
   flag to C (Timeline.c_failed, the address of a uint64 set before any failure shows)
   one load, else has_errors() called. 1, 0, or -1 with an exception */
static int tl_failed(PyObject *tl)
{
    void *p;
    if (c_word(tl, s_c_failed, &p) < 0)
        return -1;
    if (p != NULL)
        return *(volatile unsigned long long *)p != 0;
    PyObject *x = PyObject_CallMethodNoArgs(tl, s_has_errors);
    int bad = x == NULL ? -1 : PyObject_IsTrue(x);
    Py_XDECREF(x);
    return bad;
}

/* a Python int attribute as a long long: 1, 0 (not an int), -1 error */
static int ll_attr_at(PyObject *obj, PyObject *name, long long *out, slot_site *site)
{
    PyObject *v = get_attr_at(obj, name, site);
    if (v == NULL)
        return -1;
    int r = PyLong_CheckExact(v);
    if (r && !compact_long(v, out)) {
        *out = PyLong_AsLongLong(v);
        if (*out == -1 && PyErr_Occurred())
            r = -1;
    }
    Py_DECREF(v);
    return r;
}
#define ll_attr(obj, name, out) ll_attr_at((obj), (name), (out), SITE())

/* Runtime._inherits_previous(previous), its common outcomes without Python frames:
   the previous submission not finished (1: it inherits), or finished with nothing
   upstream, no verdict and no failure on its timeline at all (0). Anything else --
   where the answer needs pending_failure -- asks the Python method. 1, 0, -1 error. */
static int inherits_previous(PyObject *runtime, PyObject *previous)
{
    PyObject *c = get_attr(previous, s_completion), *slot = NULL, *tl = NULL, *x = NULL;
    int r = -1, ask = 0;
    long long v, signaled;
    if (c == NULL || (slot = get_attr(c, s_slot_attr)) == NULL)
        goto done;
    {
        /* Completion.done_now: value <= slot.signaled and timeline.completed() >= value */
        int a = ll_attr(c, s_value, &v), b = a == 1 ? ll_attr(slot, s_signaled, &signaled) : a;
        if (a < 0 || b < 0)
            goto done;
        if (a == 0 || b == 0 || v < 0) {
            ask = 1;
            goto done;
        }
        if (v > signaled) {
            r = 1;
            goto done;
        }
        tl = get_attr(slot, s_utimeline);
        if (tl == NULL)
            goto done;
        if (tl == Py_None) {
            ask = 1;
            goto done;
        }
        unsigned long long completed;
        if (tl_completed(tl, &completed) < 0)
            goto done;
        if (completed < (unsigned long long)v) {
            r = 1;
            goto done;
        }
    }
    {
        /* finished: bool(upstream) or resolved is not None or timeline.has_errors() needs
           pending_failure (the Python method); else it inherits nothing */
        int up = attr_true(previous, s_upstream);
        if (up < 0)
            goto done;
        int resolved = up ? 1 : attr_is(previous, s_resolved, Py_None);
        if (resolved < 0)
            goto done;
        if (up || resolved == 0) {
            ask = 1;
            goto done;
        }
        int bad = tl_failed(tl);
        if (bad < 0)
            goto done;
        if (bad)
            ask = 1;
        else
            r = 0;
    }
done:
    Py_XDECREF(c);
    Py_XDECREF(slot);
    Py_XDECREF(tl);
    if (ask) {
        x = PyObject_CallMethodOneArg(runtime, s_inherits_previous, previous);
        r = x == NULL ? -1 : PyObject_IsTrue(x);
        Py_XDECREF(x);
    }
    return r;
}

/* Stream._forget_failures without its Python frame: _reported = len(_values), and an
   empty _waited (a fresh list only where it holds something). 0, or -1 with an exception */
static int forget_failures(PyObject *stream)
{
    PyObject *values = get_attr(stream, s_values);
    if (values == NULL)
        return -1;
    Py_ssize_t n = PyObject_Length(values);
    Py_DECREF(values);
    if (n < 0)
        return -1;
    PyObject *count = PyLong_FromSsize_t(n);
    if (count == NULL)
        return -1;
    int bad = set_attr(stream, s_reported, count) < 0;
    Py_DECREF(count);
    if (bad)
        return -1;
    PyObject *waited = get_attr(stream, s_waited);
    if (waited == NULL)
        return -1;
    int some = PyObject_IsTrue(waited);
    Py_DECREF(waited);
    if (some <= 0)
        return some;
    PyObject *empty = PyList_New(0);
    if (empty == NULL)
        return -1;
    bad = set_attr(stream, s_waited, empty) < 0;
    Py_DECREF(empty);
    return bad ? -1 : 0;
}

/* a field of the region's resubmit note (a new reference): by its index in the named
   tuple where the Submitter checked _Resubmit's fields, else by name */
static PyObject *resubmit_field_at(Submitter *self, PyObject *again, Py_ssize_t index, PyObject *name, slot_site *site)
{
    if (self->resubmit_type != NULL && (PyObject *)Py_TYPE(again) == self->resubmit_type)
        return Py_NewRef(PyTuple_GET_ITEM(again, index));
    return get_attr_at(again, name, site);
}
#define resubmit_field(self, again, index, name) resubmit_field_at((self), (again), (index), (name), SITE())

/* ---- spare submissions: a settled submission that nothing but the settling holds is
   kept, with its events list and Event, instead of being freed, and the next
   resubmission fills it in instead of allocating three objects (and freeing them when it
   settles). Reference counts decide: a submission, list or Event anything else holds
   (the caller, a trace, gc.get_objects) is never reused. */

/* the object in a slot attribute of obj, borrowed (NULL: not a slot, or empty) */
static inline PyObject *slot_peek_at(PyObject *obj, PyObject *name, slot_site *site)
{
    Py_ssize_t off = slot_offset_at(Py_TYPE(obj), name, site);
    return off > 0 ? *(PyObject **)((char *)obj + off) : NULL;
}
#define slot_peek(obj, name) slot_peek_at((obj), (name), SITE())

/* the Event of a would-be spare's one-item events list, borrowed, where the submission,
   its list and the Event hold `refs`, 1 and 1 references and no weak reference points at
   the submission; else NULL */
static PyObject *spare_event(Submitter *self, PyObject *sub, Py_ssize_t refs)
{
    PyTypeObject *t = Py_TYPE(sub);
    if ((PyObject *)t != self->submission_type || Py_REFCNT(sub) != refs)
        return NULL;
    if (t->tp_weaklistoffset != 0 && *(PyObject **)((char *)sub + t->tp_weaklistoffset) != NULL)
        return NULL;
    PyObject *events = slot_peek(sub, s_events);
    if (events == NULL || !PyList_CheckExact(events) || Py_REFCNT(events) != 1 || PyList_GET_SIZE(events) != 1)
        return NULL;
    PyObject *event = PyList_GET_ITEM(events, 0);
    if ((PyObject *)Py_TYPE(event) != self->event_type || Py_REFCNT(event) != 1)
        return NULL;
    return event;
}

/* keep a settled submission that its settling holds `refs` references to (0 kept, 1 not:
   not spare, or no room; -1 error) */
static int keep_spare(Submitter *self, PyObject *sub, Py_ssize_t refs)
{
    if (self->nspares >= SPARES)
        return 1;
    PyObject *event = spare_event(self, sub, refs);
    if (event == NULL)
        return 1;
    /* (what it referred to goes now, as when it was freed: a spare keeps nothing alive
       but its Event's Completion, where nothing else holds that -- the next replay fills
       it in, and it keeps only its queue slot, which the runtime holds anyway -- and
       what its Submitter holds anyway: the runtime, and the owners where they are this
       graph's, which the next resubmission would write back. A field that holds its
       cleared value already is not written again.) */
    if ((slot_peek(sub, s_runtime_attr) != self->runtime && set_attr(sub, s_runtime_attr, Py_None) < 0)
        || set_attr(sub, s_graph_attr, Py_None) < 0
        || (slot_peek(sub, s_owners) != self->owners && set_attr(sub, s_owners, Py_None) < 0)
        || set_attr(sub, s_submitted, Py_None) < 0 || set_attr(sub, s_sequence, Py_None) < 0
        || (!completion_spare(slot_peek(event, s_completion)) && set_attr(event, s_completion, Py_None) < 0)
        || set_new(event, s_upstream, self->empty) < 0 || set_new(event, s_resolved, Py_None) < 0
        || set_new(event, s_timestamp, Py_None) < 0)
        return -1;
    self->spares[self->nspares++] = Py_NewRef(sub);
    return 0;
}

/* a spare submission (a new reference), its Event (borrowed) in *event; NULL: none.
   One that something reached meanwhile (gc.get_objects) is dropped, not reused. */
static PyObject *take_spare(Submitter *self, PyObject **event)
{
    while (self->nspares > 0) {
        PyObject *sub = self->spares[--self->nspares];
        self->spares[self->nspares] = NULL;
        if ((*event = spare_event(self, sub, 1)) != NULL)
            return sub;
        Py_DECREF(sub);
    }
    return NULL;
}

/* Encode one region as Runtime._encode's resubmission branch does: the event, or NULL.
   `reuse`: a spare Event to fill in (borrowed), or NULL for a new one. */
static PyObject *encode_region(Submitter *self, PyObject *again, PyObject *reuse)
{
    PyObject *previous = get_attr(self->region, s_last);
    if (previous == NULL)
        return NULL;
    if (acquire_blocking(self->lane_acquire) < 0) {  /* blocking, as `with lane.lock` */
        Py_DECREF(previous);
        return NULL;
    }
    PyObject *completion = NULL, *event = NULL;
    if (self->direct && self->lazy) {
        /* _RecordedRegion.encode_signaled(lane, lazy=True): its device graph's compiled
           replay where the lane's stream recorded it (None: it did nothing) */
        PyObject *dg = get_attr(self->region, s_device_graph);
        PyObject *fast = dg == NULL ? NULL : get_attr(dg, s_fast);
        int same = fast == NULL ? -1 : attr_is(dg, s_stream, self->stream);
        if (same == 1 && fast != Py_None) {
            /* (a spare Event's settled Completion is filled in where the replay needs a new one) */
            PyObject *spare = reuse == NULL ? NULL : slot_peek(reuse, s_completion);
            completion = Py_IS_TYPE(fast, &ReplayerType) ? replay_into((Replayer *)fast, dg, spare) : PyObject_CallOneArg(fast, dg);
            if (spare != NULL && completion == spare)
                self->refilled++;
            if (completion == Py_None)
                Py_CLEAR(completion);
            else if (completion == NULL)
                same = -1;
        }
        Py_XDECREF(dg);
        Py_XDECREF(fast);
        if (same < 0)
            goto unlock;
    }
    if (completion == NULL) {
        PyObject *args[] = {self->region, self->lane, self->lazy ? Py_True : Py_False};
        completion = PyObject_VectorcallMethod(s_encode_signaled, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (completion == NULL)
            goto unlock;
    }
    /* Event(completion), its fields as Event.__init__ sets them */
    event = reuse != NULL ? Py_NewRef(reuse) : ((PyTypeObject *)self->event_type)->tp_alloc((PyTypeObject *)self->event_type, 0);
    if (event == NULL)
        goto unlock;
    /* (a spare's fields hold the last three already: keep_spare left them so) */
    if (set_attr(event, s_completion, completion) < 0 || set_new(event, s_upstream, self->empty) < 0
        || set_new(event, s_resolved, Py_None) < 0 || set_new(event, s_timestamp, Py_None) < 0) {
        Py_CLEAR(event);
        goto unlock;
    }
    if (forget_failures(self->stream) < 0)  /* the runtime reports the region's failures */
        Py_CLEAR(event);
unlock:
    Py_XDECREF(completion);
    if (release_keeping(self->lane_release) < 0)
        Py_CLEAR(event);
    if (event == NULL) {
        Py_DECREF(previous);
        return NULL;
    }
    if (self->reads_own_writes && previous != Py_None) {
        /* (Runtime._inherits_previous: does it carry its previous submission's failure?) */
        int inherit = inherits_previous(self->runtime, previous);
        if (inherit < 0)
            goto fail;
        if (inherit) {
            PyObject *up = PyTuple_Pack(1, previous);
            if (up == NULL || set_attr(event, s_upstream, up) < 0) {
                Py_XDECREF(up);
                goto fail;
            }
            Py_DECREF(up);
        }
    }
    Py_DECREF(previous);
    previous = NULL;
    if (set_attr(self->region, s_last, event) < 0)
        goto fail;
    {
        /* the region's access entries name the new event (_Inflight.replace) */
        PyObject *places = resubmit_field(self, again, 2, s_places);
        if (places == NULL)
            goto fail;
        PyObject *seq = PySequence_Fast(places, "places");
        Py_DECREF(places);
        if (seq == NULL)
            goto fail;
        int bad = 0;
        for (Py_ssize_t i = 0; !bad && i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *place = PySequence_Fast_GET_ITEM(seq, i), *entries, *index;
            bad = !PyTuple_Check(place) || PyTuple_GET_SIZE(place) != 2;
            if (bad)
                break;
            entries = PyTuple_GET_ITEM(place, 0);
            index = PyTuple_GET_ITEM(place, 1);
            PyObject *entry;
            Py_ssize_t at = PyList_CheckExact(entries) && PyLong_CheckExact(index) ? PyLong_AsSsize_t(index) : -1;
            if (at >= 0 && at < PyList_GET_SIZE(entries))
                entry = Py_NewRef(PyList_GET_ITEM(entries, at));
            else {
                PyErr_Clear();
                entry = PyObject_GetItem(entries, index);
            }
            if (entry != NULL && PyList_CheckExact(entry) && PyList_GET_SIZE(entry) == 4)
                PyList_SetItem(entry, 3, Py_NewRef(event));  /* (in place: the old event's reference goes) */
            else if (entry != NULL) {
                PyErr_SetString(PyExc_TypeError, "_Inflight entry: expected [start, end, writes, event]");
                bad = 1;
            }
            bad = bad || entry == NULL;
            Py_XDECREF(entry);
        }
        Py_DECREF(seq);
        if (bad) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "_Resubmit.places: expected (entries, index) pairs");
            goto fail;
        }
    }
    return event;
fail:
    Py_XDECREF(previous);
    Py_DECREF(event);
    return NULL;
}

/* The region can skip the hazard scan (Runtime._encode's resubmission branch): its
   `resubmit` note (a new reference) in *again; 1, 0 (no), -1 error */
static int resubmittable(Submitter *self, PyObject **again)
{
    *again = get_attr(self->region, s_resubmit);
    if (*again == NULL)
        return -1;
    if (*again == Py_None)
        return 0;
    PyObject *gen = get_attr(self->inflight, s_generation);
    PyObject *mine = gen == NULL ? NULL : resubmit_field(self, *again, 0, s_generation);
    int ok = mine == NULL ? -1 : (mine == gen ? 1 : int_compare(mine, gen, Py_EQ));
    Py_XDECREF(gen);
    Py_XDECREF(mine);
    if (ok == 1) {
        PyObject *slot = resubmit_field(self, *again, 1, s_slot_attr);
        ok = slot == NULL ? -1 : slot == self->slot;
        Py_XDECREF(slot);
    }
    return ok;
}

#define SETTLE_QUEUES 4
#define SETTLE_STACK 64  /* submissions a settling keeps on the stack (more: the heap) */

/* a new list of the n objects at items */
static PyObject *list_of(PyObject **items, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    for (Py_ssize_t i = 0; list != NULL && i < n; i++)
        PyList_SET_ITEM(list, i, Py_NewRef(items[i]));
    return list;
}

/* whether every item of the list `ends` is an exact float, none of them 0.0 (1), some 0.0
   (0), or something else (-1, no exception: the Python method decides) */
static int all_stamped(PyObject *ends)
{
    int all = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {
        PyObject *e = PyList_GET_ITEM(ends, i);
        if (!PyFloat_CheckExact(e))
            return -1;
        if (PyFloat_AS_DOUBLE(e) == 0.0)
            all = 0;
    }
    return all;
}

/* Runtime._notice (observe=True) without Python frames: the ends of regions that
   finished since the last notice stamped with one perf_counter() reading, oldest
   submissions first, one timeline read a queue (past a region of a queue that is not
   done, no later region of that queue is looked at; at most notice_scan + 1
   submissions, or until every queue is blocked); then the fully stamped ones leave
   _unstamped. Anything it does not expect -- an item other than (infos, ends list,
   submitted, events list) of floats, a completion without plain int values or a
   published timeline, more than SETTLE_QUEUES queues -- goes to the Python method, which
   stamps what is left the same way (a stamp made here stays). 0, or -1 with an exception. */
static PyObject *perf_counter_now(void);

static int notice(Submitter *self)
{
    Py_ssize_t n = PyObject_Length(self->unstamped);
    if (n <= 0)
        return n < 0 ? -1 : 0;
    if (self->observe != 1)
        return call_method0(self->runtime, s_notice);
    PyObject *now = self->c_clock ? perf_counter_now() : PyObject_CallNoArgs(self->perf_counter);
    if (now == NULL)
        return -1;
    if (acquire_blocking(self->fold_acquire) < 0) {
        Py_DECREF(now);
        return -1;
    }
    PyObject *blocked[SETTLE_QUEUES];
    int nblocked = 0, bad = 0, python = 0;
    Py_ssize_t scanned = 0;
    n = PyObject_Length(self->unstamped);  /* (under the lock) */
    bad = n < 0;
    for (Py_ssize_t k = 0; !bad && !python && k < n; k++) {
        PyObject *item = PySequence_GetItem(self->unstamped, k), *ends, *events;
        if (item == NULL) {
            bad = 1;
            break;
        }
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4 || !PyList_CheckExact(ends = PyTuple_GET_ITEM(item, 1))
            || !PyList_CheckExact(events = PyTuple_GET_ITEM(item, 3)) || PyList_GET_SIZE(events) > PyList_GET_SIZE(ends)) {
            python = 1;
            Py_DECREF(item);
            break;
        }
        for (Py_ssize_t i = 0; !bad && !python && i < PyList_GET_SIZE(events); i++) {
            PyObject *e = PyList_GET_ITEM(ends, i);
            if (!PyFloat_CheckExact(e)) {
                python = 1;
                break;
            }
            if (PyFloat_AS_DOUBLE(e) != 0.0)
                continue;  /* stamped by an earlier notice */
            PyObject *c = get_attr(PyList_GET_ITEM(events, i), s_completion);
            PyObject *slot = c == NULL ? NULL : get_attr(c, s_slot_attr);
            if (slot == NULL) {
                Py_XDECREF(c);
                bad = 1;
                break;
            }
            int q = 0;
            while (q < nblocked && blocked[q] != slot)
                q++;
            if (q == nblocked) {
                /* Completion.done_now: value <= slot.signaled and the timeline reached it */
                long long value, signaled;
                unsigned long long reached = 0;
                int a = ll_attr(c, s_value, &value), b = a == 1 ? ll_attr(slot, s_signaled, &signaled) : a;
                PyObject *tl = b == 1 ? get_attr(slot, s_utimeline) : NULL;
                if (a < 0 || b < 0 || (b == 1 && tl == NULL) || (tl != NULL && tl != Py_None && tl_completed(tl, &reached) < 0))
                    bad = 1;
                else if (a == 0 || b == 0 || tl == Py_None || value < 0)
                    python = 1;
                else if (value <= signaled && reached >= (unsigned long long)value)
                    PyList_SetItem(ends, i, Py_NewRef(now));  /* (in place: the 0.0's reference goes) */
                else if (nblocked == SETTLE_QUEUES)
                    python = 1;
                else
                    blocked[nblocked++] = Py_NewRef(slot);
                Py_XDECREF(tl);
            }
            Py_DECREF(c);
            Py_DECREF(slot);
        }
        Py_DECREF(item);
        scanned++;
        if (scanned > self->notice_scan || nblocked >= self->queues)
            break;
    }
    /* the fully stamped ones leave, oldest first */
    while (!bad && !python) {
        Py_ssize_t left = PyObject_Length(self->unstamped);
        PyObject *head = left > 0 ? PySequence_GetItem(self->unstamped, 0) : NULL;
        if (head == NULL) {
            bad = left != 0;
            break;
        }
        int all = PyTuple_CheckExact(head) && PyTuple_GET_SIZE(head) == 4 && PyList_CheckExact(PyTuple_GET_ITEM(head, 1))
                      ? all_stamped(PyTuple_GET_ITEM(head, 1)) : -1;
        if (all < 0)
            python = 1;
        if (all != 1) {
            Py_DECREF(head);
            break;
        }
        PyObject *x = call_0(self->unstamped_popleft);
        bad = x == NULL;
        Py_XDECREF(x);
        /* its own list of the submission's Events (observe_noticed's copy) lets them go:
           nothing reads them once stamped, and a settled submission whose Event nothing
           else holds is kept for reuse */
        PyObject *events = PyTuple_GET_ITEM(head, 3);
        if (!bad && PyList_CheckExact(events) && PyList_GET_SIZE(events) > 0)
            bad = PyList_SetSlice(events, 0, PyList_GET_SIZE(events), NULL) < 0;
        Py_DECREF(head);
    }
    for (int q = 0; q < nblocked; q++)
        Py_DECREF(blocked[q]);
    Py_DECREF(now);
    if (release_keeping(self->fold_release) < 0 || bad)
        return -1;
    return python ? call_method0(self->runtime, s_notice) : 0;
}

/* Runtime._observe for observe=True without its Python frame: (infos, [0.0] a region,
   submitted, a copy of the events list) joins _observed and _unstamped under the fold lock; past
   fold_after waiting, Runtime._fold_observed. 0, or -1 with an exception. */
static int observe_noticed(Submitter *self, PyObject *events, PyObject *submitted)
{
    Py_ssize_t n = PyObject_Length(self->infos);
    if (n < 0)
        return -1;
    PyObject *ends = PyList_New(n);
    if (ends == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(ends, i, Py_NewRef(self->zero));
    /* (a list of its own: notice empties it once the ends are stamped) */
    PyObject *mine = PyList_GetSlice(events, 0, PY_SSIZE_T_MAX);
    PyObject *item = mine == NULL ? NULL : PyTuple_Pack(4, self->infos, ends, submitted, mine);
    Py_XDECREF(mine);
    Py_DECREF(ends);
    if (item == NULL || acquire_blocking(self->fold_acquire) < 0) {
        Py_XDECREF(item);
        return -1;
    }
    PyObject *x = call_o(self->observed_append, item), *y = x == NULL ? NULL : call_o(self->unstamped_append, item);
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_DECREF(item);
    Py_ssize_t waiting = y == NULL ? -1 : PyObject_Length(self->observed);
    if (release_keeping(self->fold_release) < 0 || waiting < 0)
        return -1;
    return waiting > self->fold_after ? call_method0(self->runtime, s_fold_observed) : 0;
}

/* Runtime._settle_finished without Python frames, for a submitter out of room: the
   finished prefix of the pending submissions (each region's value signalled and reached
   on its queue's timeline; one timeline read a queue) is marked settled, its queues
   retire what finished, and it leaves the pending queue. Where a timeline may hold a
   failure the Python method quarantines the failed submissions' owners first; more
   queues than SETTLE_QUEUES, or pending entries that are not plain submissions, are
   settled by the Python method altogether. 1: something was settled (look for room
   again), 0: the oldest submission has not finished, -1 error. */
static int settle_prefix(Submitter *self)
{
    PyObject *slots[SETTLE_QUEUES], *tls[SETTLE_QUEUES];
    unsigned long long tops[SETTLE_QUEUES];
    int nq = 0, python = 0, rc = -1;
    /* the finished prefix (references held) and the ones this settling marked settled
       (borrowed from it): C arrays; lists are made only for the Python methods */
    PyObject *stack[2 * SETTLE_STACK], **batch = stack, **fresh;
    Py_ssize_t nb = 0, nf = 0;
    if (acquire_blocking(self->space_acquire) < 0)
        return -1;
    Py_ssize_t n = PyObject_Length(self->pending);
    int bad = n < 0;
    if (!bad && n > SETTLE_STACK) {
        batch = PyMem_Malloc(2 * (size_t)n * sizeof(PyObject *));
        if (batch == NULL) {
            PyErr_NoMemory();
            bad = 1;
            batch = stack;
        }
    }
    fresh = batch + (n > SETTLE_STACK ? n : SETTLE_STACK);
    for (Py_ssize_t i = 0; !bad && !python && i < n; i++) {
        PyObject *sub = PySequence_GetItem(self->pending, i), *events = NULL;
        int done = 1;
        if (sub == NULL) {
            bad = 1;
            break;
        }
        if ((PyObject *)Py_TYPE(sub) != self->submission_type || (events = get_attr(sub, s_events)) == NULL
            || !PyList_CheckExact(events)) {
            bad = events == NULL && PyErr_Occurred();
            python = !bad;
            Py_XDECREF(events);
            Py_DECREF(sub);
            break;
        }
        for (Py_ssize_t j = 0; done && j < PyList_GET_SIZE(events); j++) {
            PyObject *c = get_attr(PyList_GET_ITEM(events, j), s_completion);
            PyObject *slot = c == NULL ? NULL : get_attr(c, s_slot_attr);
            long long value;
            int r = slot == NULL ? -1 : ll_attr(c, s_value, &value);
            Py_XDECREF(c);
            if (r != 1) {
                Py_XDECREF(slot);
                bad = r < 0;
                python = !bad;
                done = 0;
                break;
            }
            int q = 0;
            while (q < nq && slots[q] != slot)
                q++;
            if (q == nq) {
                long long signaled;
                PyObject *tl = NULL;
                unsigned long long reached;
                if (nq == SETTLE_QUEUES || (r = ll_attr(slot, s_signaled, &signaled)) != 1
                    || (tl = get_attr(slot, s_utimeline)) == NULL || tl == Py_None || tl_completed(tl, &reached) < 0) {
                    bad = PyErr_Occurred() != NULL;
                    python = !bad;
                    Py_XDECREF(tl);
                    Py_DECREF(slot);
                    done = 0;
                    break;
                }
                /* work not signalled yet counts as unfinished */
                slots[q] = slot;  /* the reference moves here */
                slot = NULL;
                tls[q] = tl;
                tops[q] = signaled < 0 ? 0 : ((unsigned long long)signaled < reached ? (unsigned long long)signaled : reached);
                nq++;
            }
            Py_XDECREF(slot);
            if (value < 0 || (unsigned long long)value > tops[q])
                done = 0;
        }
        Py_DECREF(events);
        if (done && !bad && !python)
            batch[nb++] = sub;  /* (its reference moves here) */
        else
            Py_DECREF(sub);
        if (!done)
            break;
    }
    if (release_keeping(self->space_release) < 0)
        bad = 1;
    if (bad)
        goto out;
    if (python) {
        /* (settles whatever finished, the prefix included) */
        if (call_method0(self->runtime, s_settle_finished) < 0)
            goto out;
        rc = 1;
        goto out;
    }
    if (nb == 0) {
        rc = 0;
        goto out;
    }
    for (int q = 0; q < nq; q++) {
        /* slot.retire() where it retains owners */
        int some = attr_true(slots[q], s_retained);
        if (some < 0 || (some && call_method0(slots[q], s_retire) < 0))
            goto out;
    }
    if (notice(self) < 0)
        goto out;
    int entered = self->plain ? enter_section(self->settle_acquire) : acquire_blocking(self->settle_acquire);
    if (entered < 0)
        goto out;
    bad = 0;
    for (Py_ssize_t i = 0; !bad && i < nb; i++) {
        int settled = attr_true(batch[i], s_settled);
        bad = settled < 0 || (!settled && set_attr(batch[i], s_settled, Py_True) < 0);
        if (!bad && !settled)
            fresh[nf++] = batch[i];
    }
    if (leave_section(entered, self->settle_release) < 0 || bad)
        goto out;
    if (nf == 0) {
        rc = 1;
        goto out;
    }
    for (int q = 0; q < nq; q++) {
        int failed = tl_failed(tls[q]);
        if (failed < 0)
            goto out;
        if (failed) {
            PyObject *list = list_of(fresh, nf);
            PyObject *x = list == NULL ? NULL : PyObject_CallMethodOneArg(self->runtime, s_quarantine_failed, list);
            Py_XDECREF(list);
            if (x == NULL)
                goto out;
            Py_DECREF(x);
            break;
        }
    }
    {
        /* Runtime._retired(fresh): oldest first, so each is the head */
        PyObject *x;
        if (acquire_blocking(self->space_acquire) < 0)
            goto out;
        Py_ssize_t i = 0;
        for (bad = 0; !bad && i < nf; i++) {
            PyObject *head = PyObject_Length(self->pending) > 0 ? PySequence_GetItem(self->pending, 0) : NULL;
            if (head == NULL) {
                bad = PyErr_Occurred() != NULL;
                break;
            }
            Py_DECREF(head);  /* (only compared: the deque holds it) */
            if (head != fresh[i])
                break;
            x = call_0(self->pending_popleft);
            bad = x == NULL;
            Py_XDECREF(x);
        }
        int waiters = bad ? 0 : attr_true(self->runtime, s_space_waiters);
        if (release_keeping(self->space_release) < 0 || bad || waiters < 0)
            goto out;
        if (i < nf || waiters) {
            /* one settled out of order, or threads wait for room: the Python method
               removes the rest and notifies them */
            PyObject *rest = list_of(fresh + i, nf - i);
            x = rest == NULL ? NULL : PyObject_CallMethodOneArg(self->runtime, s_retired, rest);
            Py_XDECREF(rest);
            if (x == NULL)
                goto out;
            Py_DECREF(x);
        }
        /* the ones it took off the queue that nothing else holds (the settling holds
           one reference) are kept for the next resubmissions */
        for (Py_ssize_t k = 0; k < i; k++)
            if (keep_spare(self, fresh[k], 1) < 0)
                goto out;
    }
    rc = 1;
out:
    for (int q = 0; q < nq; q++) {
        Py_DECREF(slots[q]);
        Py_DECREF(tls[q]);
    }
    for (Py_ssize_t k = 0; k < nb; k++)
        Py_DECREF(batch[k]);
    if (batch != stack)
        PyMem_Free(batch);
    return rc;
}

static PyObject *resubmit(Submitter *self, PyObject *graph);

/* time.perf_counter() where it is clock_gettime(CLOCK_MONOTONIC) (checked when the
   Submitter is made): the same float, seconds made from nanoseconds as CPython's
   _PyTime_AsSecondsDouble makes them. New reference or NULL. */
static PyObject *perf_counter_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    volatile double d;  /* (as CPython: no rounding changed by optimization) */
    if (ns % 1000000000LL == 0)
        d = (double)(ns / 1000000000LL);
    else {
        d = (double)ns;
        d /= 1e9;
    }
    return PyFloat_FromDouble(d);
}

/* whether `fn` is time.perf_counter and that reads clock_gettime(CLOCK_MONOTONIC):
   1, 0, or -1 with an exception */
static int perf_counter_is_monotonic(PyObject *fn)
{
#if defined(__linux__)
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL)
        return -1;
    /* (the time module's builtin itself, whatever time.perf_counter is now) */
    int builtin = PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == time
                  && strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "perf_counter") == 0;
    PyObject *info = builtin ? PyObject_CallMethod(time, "get_clock_info", "s", "perf_counter") : NULL;
    PyObject *impl = info == NULL ? NULL : PyObject_GetAttrString(info, "implementation");
    int same = impl != NULL && PyUnicode_Check(impl) && PyUnicode_CompareWithASCIIString(impl, "clock_gettime(CLOCK_MONOTONIC)") == 0;
    Py_DECREF(time);
    Py_XDECREF(info);
    Py_XDECREF(impl);
    PyErr_Clear();
    return same;
#else
    (void)fn;
    return 0;
#endif
}

/* submitter(graph) -> Submission, or None: nothing was done, run the Python path */
static PyObject *Submitter_call(Submitter *self, PyObject *args, PyObject *kwargs)
{
    PyObject *graph;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "a submitter takes the graph only");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "submitter", 1, 1, &graph))
        return NULL;
    return resubmit(self, graph);
}

/* the resubmission of Submitter_call and of the compiled Runtime.submit (FastEntry) */
static PyObject *resubmit(Submitter *self, PyObject *graph)
{
    int r;
    if ((r = attr_is(graph, s_submit_plan, self->plan)) != 1)
        return r < 0 ? NULL : sub_miss(self);
    if ((r = attr_true(graph, s_gclosed)) != 0)
        return r < 0 ? NULL : sub_miss(self);
    if ((r = attr_true(self->runtime, s_closed)) != 0)
        return r < 0 ? NULL : sub_miss(self);
    if ((r = attr_true(self->runtime, s_fast_resubmit)) != 1)
        return r < 0 ? NULL : sub_miss(self);
    if (notice(self) < 0)  /* observe=True: notice what finished */
        return NULL;
    if ((r = try_acquire(self->submit_acquire)) != 1)  /* busy: the Python path waits for it */
        return r < 0 ? NULL : sub_miss(self);
    PyObject *again = NULL, *events = NULL, *submission = NULL, *submitted = NULL;
    int room_taken = 0, locked = 1;
    if (!PyDict_Check(self->reservations) || PyDict_GET_SIZE(self->reservations) != 0)
        goto miss;  /* a native session reserved lanes: the Python path checks whose */
    if ((r = resubmittable(self, &again)) != 1) {
        if (r < 0)
            goto error;
        goto miss;
    }
    /* room (max_submissions), as Runtime.submit takes it; none: settle what finished
       (Runtime._make_room's first step) and look again */
    for (int tries = 0; !room_taken; tries++) {
        /* (a section that cannot release the GIL: slots holding ints, the deque) */
        int entered = self->plain ? enter_section(self->space_acquire) : acquire_blocking(self->space_acquire);
        if (entered < 0)
            goto error;
        PyObject *taken = get_attr(self->runtime, s_room_taken);
        long t = taken == NULL ? -1 : PyLong_AsLong(taken);
        Py_XDECREF(taken);
        Py_ssize_t n = t < 0 ? -1 : PyObject_Length(self->pending);
        int room = n >= 0 && n + t < self->max_submissions;
        if (n >= 0 && room) {
            if (add_to(self->runtime, s_room_taken, 1, NULL) < 0)
                n = -1;
            else
                room_taken = 1;
        }
        if (leave_section(entered, self->space_release) < 0 || n < 0 || PyErr_Occurred())
            goto error;
        if (room)
            break;
        if (tries > 0)
            goto miss;  /* the Python path waits */
        int settled = settle_prefix(self);
        if (settled < 0)
            goto error;
        if (settled == 0)
            goto miss;  /* the oldest submission runs: the Python path waits for it */
    }
    submitted = self->c_clock ? perf_counter_now() : PyObject_CallNoArgs(self->perf_counter);
    if (submitted == NULL)
        goto error;
    {
        /* (a failure here left nothing accepted: Runtime._encode_failed has nothing to
           quarantine; the room is given back below, as in the Python path) */
        PyObject *reuse = NULL;
        submission = take_spare(self, &reuse);
        PyObject *event = encode_region(self, again, reuse);
        if (event == NULL)
            goto error;
        if (submission != NULL) {  /* its events list holds the Event it filled in */
            Py_DECREF(event);
            events = Py_NewRef(slot_peek(submission, s_events));
            self->recycled++;
        } else {
            events = PyList_New(1);
            if (events == NULL) {
                Py_DECREF(event);
                goto error;
            }
            PyList_SET_ITEM(events, 0, event);
        }
    }
    {
        /* Submission(runtime, graph, events, owners, submitted), its fields as
           Submission.__init__ sets them, numbered */
        if (submission == NULL)
            submission = ((PyTypeObject *)self->submission_type)->tp_alloc((PyTypeObject *)self->submission_type, 0);
        if (submission == NULL)
            goto error;
        /* (a spare holds this runtime, its events list and, mostly, these owners
           already: those are not written again) */
        PyObject *seq = get_attr(self->runtime, s_usequence);
        if (seq == NULL || set_new(submission, s_runtime_attr, self->runtime) < 0
            || set_attr(submission, s_graph_attr, graph) < 0 || set_new(submission, s_events, events) < 0
            || set_new(submission, s_owners, self->owners) < 0
            || set_attr(submission, s_submitted, submitted) < 0 || set_attr(submission, s_sequence, seq) < 0
            || set_attr(submission, s_settled, Py_False) < 0) {
            Py_XDECREF(seq);
            goto error;
        }
        /* runtime._sequence = seq + 1 (the int just read, not read again) */
        long long c;
        PyObject *next = compact_long(seq, &c) ? PyLong_FromLongLong(c + 1) : PyNumber_Add(seq, small_one);
        Py_DECREF(seq);
        if (next == NULL)
            goto error;
        int bad = set_attr(self->runtime, s_usequence, next) < 0;
        Py_DECREF(next);
        if (bad)
            goto error;
    }
    {
        int entered = self->plain ? enter_section(self->space_acquire) : acquire_blocking(self->space_acquire);
        if (entered < 0)
            goto error;
        int bad = add_to(self->runtime, s_room_taken, -1, NULL) < 0;
        if (!bad) {
            room_taken = 0;
            PyObject *x = call_o(self->pending_append, submission);
            bad = x == NULL;
            Py_XDECREF(x);
        }
        if (leave_section(entered, self->space_release) < 0 || bad)
            goto error;
    }
    {
        /* the graph's counters, added when the statistics are read: a run of them at
           the queue's tail, (counters, Tally), counts one more (the GIL makes the look
           and the increment one step: a run a reader took off the queue is never
           counted into again); else a new run of one */
        Py_ssize_t n = PyObject_Length(self->uncounted);
        PyObject *tail = n > 0 ? PySequence_GetItem(self->uncounted, n - 1) : NULL;
        if (n < 0 || (n > 0 && tail == NULL))
            goto error;
        if (tail != NULL && PyTuple_CheckExact(tail) && PyTuple_GET_SIZE(tail) == 2
            && PyTuple_GET_ITEM(tail, 0) == self->counters && Py_IS_TYPE(PyTuple_GET_ITEM(tail, 1), &TallyType)) {
            ((Tally *)PyTuple_GET_ITEM(tail, 1))->value++;
            Py_DECREF(tail);
        } else {
            Py_XDECREF(tail);
            PyObject *tally = PyType_GenericAlloc(&TallyType, 0), *run = NULL, *x = NULL;
            if (tally != NULL) {
                ((Tally *)tally)->value = 1;
                run = PyTuple_Pack(2, self->counters, tally);
                Py_DECREF(tally);
            }
            if (run != NULL) {
                x = call_o(self->uncounted_append, run);
                Py_DECREF(run);
            }
            if (x == NULL)
                goto error;
            Py_DECREF(x);
            if (n + 1 > self->fold_after && call_method0(self->runtime, s_add_uncounted) < 0)
                goto error;
        }
    }
    locked = 0;
    if (release_keeping(self->submit_release) < 0)
        goto error;
    if (self->observe == 1) {
        if (observe_noticed(self, events, submitted) < 0)
            goto error;
    } else if (self->observe) {
        PyObject *x = PyObject_CallMethodObjArgs(self->runtime, s_observe, self->infos, events, submitted, NULL);
        if (x == NULL)
            goto error;
        Py_DECREF(x);
    }
    {
        /* (the runtime's _quarantined dict and _releasing int read in place) */
        PyObject *q = slot_peek(self->runtime, s_quarantined), *rl = slot_peek(self->runtime, s_releasing);
        int busy = q != NULL && PyDict_CheckExact(q) ? PyDict_GET_SIZE(q) != 0 : attr_true(self->runtime, s_quarantined);
        if (busy == 0)
            busy = rl == small_zero ? 0 : attr_true(self->runtime, s_releasing);  /* (0: CPython's one small int) */
        if (busy < 0 || (busy && call_method0(self->runtime, s_prove_idle) < 0))
            goto error;
    }
    Py_DECREF(again);
    Py_DECREF(events);
    Py_DECREF(submitted);
    self->hits++;
    return submission;

error:
miss:
    {
        /* (an error after the submission entered the pending queue propagates: the
           lock and the room were settled then, as the Python path settles them) */
        int failed = PyErr_Occurred() != NULL;
        if (locked)
            release_keeping(self->submit_release);
        if (room_taken) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            PyObject *x = PyObject_CallMethodNoArgs(self->runtime, s_give_room_back);
            Py_XDECREF(x);
            if (x == NULL)
                PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        }
        Py_XDECREF(again);
        Py_XDECREF(events);
        Py_XDECREF(submission);
        Py_XDECREF(submitted);
        if (failed)
            return NULL;
        return sub_miss(self);
    }
}

static int Submitter_traverse(Submitter *self, visitproc visit, void *arg)
{
    for (int i = 0; i < self->nspares; i++)
        Py_VISIT(self->spares[i]);
    return visit_fields(&self->runtime, &self->lane_release, visit, arg);
}

static int Submitter_clear(Submitter *self)
{
    while (self->nspares > 0) {
        self->nspares--;
        Py_CLEAR(self->spares[self->nspares]);
    }
    clear_fields(&self->runtime, &self->lane_release);
    return 0;
}

static void Submitter_dealloc(Submitter *self)
{
    PyObject_GC_UnTrack(self);
    Submitter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *get_method(PyObject *obj, const char *attr, const char *method)
{
    PyObject *o = PyObject_GetAttrString(obj, attr);
    if (o == NULL)
        return NULL;
    PyObject *m = PyObject_GetAttrString(o, method);
    Py_DECREF(o);
    return m;
}

/* Submitter(runtime, plan, regions, submission_type, event_type, perf_counter,
   observe, max_submissions, fold_after); regions: a 1-tuple of
   (region, lane, lazy, reads_own_writes, direct) -- direct: the region's
   encode_signaled is _RecordedRegion's (a replay of its device graph) */
static int Submitter_init(Submitter *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"runtime", "plan", "regions", "submission_type", "event_type", "perf_counter",
                            "observe", "max_submissions", "fold_after", "resubmit_type", "notice_scan", NULL};
    PyObject *runtime, *plan, *regions, *submission_type, *event_type, *perf_counter, *resubmit_type = NULL;
    int observe;
    long max_submissions;
    Py_ssize_t fold_after, notice_scan = 16;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OOOiln|On", names, &runtime, &plan, &PyTuple_Type, &regions,
                                     &submission_type, &event_type, &perf_counter, &observe,
                                     &max_submissions, &fold_after, &resubmit_type, &notice_scan))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(regions);
    if (n != 1 || max_submissions < 1 || observe < 0 || observe > 2 || notice_scan < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "Submitter: one region, max_submissions >= 1, observe 0, 1 or 2 and notice_scan >= 0 expected");
        return -1;
    }
    Submitter_clear(self);
    {
        PyObject *region, *lane;
        int lazy, own, direct;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(regions, 0), "OOppp", &region, &lane, &lazy, &own, &direct))
            return -1;
        self->direct = direct;
        Py_INCREF(region);
        self->region = region;
        Py_INCREF(lane);
        self->lane = lane;
        self->lazy = lazy;
        self->reads_own_writes = own;
        if ((self->stream = get_attr(lane, s_stream)) == NULL
            || (self->slot = get_attr(self->stream, s_slot_attr)) == NULL
            || (self->lane_acquire = get_method(lane, "lock", "acquire")) == NULL
            || (self->lane_release = get_method(lane, "lock", "release")) == NULL)
            goto fail;
    }
#define KEEP(field, value) do { Py_INCREF(value); self->field = value; } while (0)
    KEEP(runtime, runtime);
    KEEP(plan, plan);
    KEEP(submission_type, submission_type);
    KEEP(event_type, event_type);
    KEEP(perf_counter, perf_counter);
#undef KEEP
    self->observe = observe;
    self->c_clock = perf_counter_is_monotonic(perf_counter);
    if (self->c_clock < 0)
        goto fail;
    self->max_submissions = max_submissions;
    self->fold_after = fold_after;
    self->notice_scan = notice_scan;
    if (observe == 1) {
        /* (the runtime's observation state: see notice and observe_noticed) */
        PyObject *queues = PyObject_GetAttrString(runtime, "_queues");
        self->queues = queues == NULL ? -1 : PyLong_AsSsize_t(queues);
        Py_XDECREF(queues);
        if (self->queues < 0 || (self->observed = PyObject_GetAttrString(runtime, "_observed")) == NULL
            || (self->observed_append = PyObject_GetAttrString(self->observed, "append")) == NULL
            || (self->fold_acquire = get_method(runtime, "_fold_lock", "acquire")) == NULL
            || (self->fold_release = get_method(runtime, "_fold_lock", "release")) == NULL
            || (self->zero = PyFloat_FromDouble(0.0)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "Submitter: runtime._queues must be an int >= 0");
            goto fail;
        }
    }
    if ((self->inflight = PyObject_GetAttrString(runtime, "_inflight")) == NULL
        || (self->submit_acquire = get_method(runtime, "_submit_lock", "acquire")) == NULL
        || (self->submit_release = get_method(runtime, "_submit_lock", "release")) == NULL
        || (self->space_acquire = get_method(runtime, "_space_lock", "acquire")) == NULL
        || (self->space_release = get_method(runtime, "_space_lock", "release")) == NULL
        || (self->pending = PyObject_GetAttrString(runtime, "_pending")) == NULL
        || (self->uncounted = PyObject_GetAttrString(runtime, "_uncounted")) == NULL
        || (self->unstamped = PyObject_GetAttrString(runtime, "_unstamped")) == NULL
        || (self->reservations = PyObject_GetAttrString(runtime, "_reservations")) == NULL
        || (self->pending_append = PyObject_GetAttrString(self->pending, "append")) == NULL
        || (self->pending_popleft = PyObject_GetAttrString(self->pending, "popleft")) == NULL
        || (self->uncounted_append = PyObject_GetAttrString(self->uncounted, "append")) == NULL
        || (self->unstamped_append = PyObject_GetAttrString(self->unstamped, "append")) == NULL
        || (self->unstamped_popleft = PyObject_GetAttrString(self->unstamped, "popleft")) == NULL
        || (self->settle_acquire = get_method(runtime, "_settle_lock", "acquire")) == NULL
        || (self->settle_release = get_method(runtime, "_settle_lock", "release")) == NULL
        || (self->owners = PyObject_GetAttrString(plan, "owners")) == NULL
        || (self->counters = PyObject_GetAttrString(plan, "counters")) == NULL
        || (self->infos = PyObject_GetAttrString(plan, "infos")) == NULL
        || (self->empty = PyTuple_New(0)) == NULL)
        goto fail;
    if (!PyType_Check(submission_type) || !PyType_Check(event_type)) {
        PyErr_SetString(PyExc_TypeError, "Submitter: submission_type and event_type must be classes");
        goto fail;
    }
    if (resubmit_type != NULL && resubmit_type != Py_None) {
        /* a tuple class whose _fields begin (generation, slot, places): read by index */
        PyObject *fields = PyType_Check(resubmit_type) && PyType_IsSubtype((PyTypeObject *)resubmit_type, &PyTuple_Type)
                               ? PyObject_GetAttrString(resubmit_type, "_fields") : NULL;
        PyErr_Clear();
        PyObject *want = Py_BuildValue("(sss)", "generation", "slot", "places");
        PyObject *head = fields != NULL && PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) >= 3
                             ? PyTuple_GetSlice(fields, 0, 3) : NULL;
        int same = want != NULL && head != NULL ? PyObject_RichCompareBool(head, want, Py_EQ) : 0;
        Py_XDECREF(fields);
        Py_XDECREF(want);
        Py_XDECREF(head);
        if (same < 0)
            goto fail;
        if (same)
            self->resubmit_type = Py_NewRef(resubmit_type);
    }
    {
        /* (see `plain`) */
        PyTypeObject *rt = Py_TYPE(runtime);
        self->plain = PyCFunction_Check(self->pending_append) && PyCFunction_Check(self->pending_popleft)
                      && strcmp(Py_TYPE(self->pending)->tp_name, "collections.deque") == 0
                      && slot_offset(rt, s_room_taken) >= 0 && slot_offset((PyTypeObject *)submission_type, s_settled) >= 0;
        PyErr_Clear();
    }
    self->hits = self->misses = self->recycled = self->refilled = 0;
    return 0;
fail:
    Submitter_clear(self);
    return -1;
}

static PyMemberDef Submitter_members[] = {
    {"hits", T_PYSSIZET, offsetof(Submitter, hits), READONLY, "submissions this submitter made"},
    {"misses", T_PYSSIZET, offsetof(Submitter, misses), READONLY, "calls it left to the Python path"},
    {"recycled", T_PYSSIZET, offsetof(Submitter, recycled), READONLY, "submissions it made from a spare (a settled one nothing held)"},
    {"refilled", T_PYSSIZET, offsetof(Submitter, refilled), READONLY, "completions a replay filled in: a spare's, that nothing held"},
    {"plain", T_INT, offsetof(Submitter, plain), READONLY,
     "1 where its room and settling sections run without their locks while those are free (enter_section)"},
    {"spares", T_INT, offsetof(Submitter, nspares), READONLY, "settled submissions it keeps for reuse"},
    {"c_clock", T_INT, offsetof(Submitter, c_clock), READONLY, "1: it reads time.perf_counter's clock (CLOCK_MONOTONIC) itself"},
    {"plan", T_OBJECT, offsetof(Submitter, plan), READONLY, "the submit plan it was made for"},
    {NULL}
};

/* submitter.settle() -> bool: Runtime._settle_finished in C (settle_prefix) over the
   runtime's whole pending queue, for Runtime.synchronize once its waits are done: True
   where something was settled, False where the oldest submission has not finished */
static PyObject *Submitter_settle(Submitter *self, PyObject *Py_UNUSED(ignored))
{
    if (self->runtime == NULL || self->pending == NULL) {
        PyErr_SetString(PyExc_ValueError, "Submitter: not initialized");
        return NULL;
    }
    int r = settle_prefix(self);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyMethodDef Submitter_methods[] = {
    {"settle", (PyCFunction)Submitter_settle, METH_NOARGS,
     "Settle the finished prefix of the runtime's pending submissions (Runtime._settle_finished in C)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SubmitterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hrx_core.fastpath.Submitter",
    .tp_basicsize = sizeof(Submitter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Runtime.submit of a one-region tracked graph resubmitted without a hazard scan, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Submitter_init,
    .tp_dealloc = (destructor)Submitter_dealloc,
    .tp_traverse = (traverseproc)Submitter_traverse,
    .tp_clear = (inquiry)Submitter_clear,
    .tp_call = (ternaryfunc)Submitter_call,
    .tp_members = Submitter_members,
    .tp_methods = Submitter_methods,
};

/* ---- Eager dispatch (hrx_core.stream.Stream.dispatch) ------------------------------- */

/* An engine's C dispatch entry: 0 launched; -1 nothing done, take the Python path; a
   positive code: the native failure (nothing launched), handed to on_failure(code). */
typedef int (*hrx_dispatch_fn)(void *arg, uintptr_t function, const unsigned int *dims, void **params);

#define HRX_FAST_ARGS 32  /* buffers + scalars a compiled dispatch packs; more: the Python path */

static PyObject *s_executables, *s_unloaded, *s_fast_handle, *s_buffer_access,
    *s_check_scalars, *s_ualloc, *s_base, *s_nbytes, *s_uclosed, *s_device, *s_host_maps,
    *s_host_dirty, *s_native_attr, *s_retain, *s_commit_locked, *s_note_use, *s_dispatches, *s_scalar_plan,
    *s_pending, *s_device_dirty;

typedef struct {
    PyObject_HEAD
    /* object fields, `slot` to `address_attr` (see visit_fields) */
    PyObject *slot, *acquire, *release, *native, *device, *device_key, *stats;
    PyObject *kernel_type, *buffer_type, *bufferarg_type;
    PyObject *launch_py;     /* native.dispatch, used when there is no C entry */
    PyObject *on_failure;    /* on_failure(code): raises the engine's error for a failed launch */
    PyObject *keep;          /* what keeps the C entry's argument alive */
    PyObject *address_attr;  /* the native buffers' device address attribute (C entry only) */
    int needs_submit;
    hrx_dispatch_fn fn;
    void *arg;
    long max_grid[3], max_block[3], max_threads;
    Py_ssize_t hits, misses;
} Dispatcher;

static PyObject *dis_miss(Dispatcher *self)
{
    self->misses++;
    Py_RETURN_NONE;
}

/* A grid or block given as an exact int or a tuple of 1 to 3 exact ints, each within
   1..limit: 1 with out[] filled; 0 anything else (the Python path validates and
   raises); the dims are not written on 0. */
static int plain_dims(PyObject *value, const long *limit, unsigned int *out)
{
    long d[3] = {1, 1, 1};
    if (PyLong_CheckExact(value)) {
        int overflow;
        d[0] = PyLong_AsLongAndOverflow(value, &overflow);
        if (overflow || (d[0] == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
    } else if (PyTuple_CheckExact(value) && PyTuple_GET_SIZE(value) >= 1 && PyTuple_GET_SIZE(value) <= 3) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++) {
            PyObject *v = PyTuple_GET_ITEM(value, i);
            int overflow;
            if (!PyLong_CheckExact(v))
                return 0;
            d[i] = PyLong_AsLongAndOverflow(v, &overflow);
            if (overflow || (d[i] == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return 0;
            }
        }
    } else {
        return 0;
    }
    for (int i = 0; i < 3; i++) {
        if (d[i] < 1 || d[i] > limit[i])
            return 0;
        out[i] = (unsigned int)d[i];
    }
    return 1;
}

/* a Python int attribute as a C long: 1, 0 (not an exact int), -1 error */
static int long_attr_at(PyObject *obj, PyObject *name, long long *out, slot_site *site)
{
    PyObject *v = get_attr_at(obj, name, site);
    if (v == NULL)
        return -1;
    int r = 0;
    if (PyLong_CheckExact(v)) {
        *out = PyLong_AsLongLong(v);
        r = (*out == -1 && PyErr_Occurred()) ? -1 : 1;
    }
    Py_DECREF(v);
    return r;
}
#define long_attr(obj, name, out) long_attr_at((obj), (name), (out), SITE())

/* One scalar into an argument cell as Kernel.check_scalars would convert it, where the
   kernel's plan (Kernel._scalar_plan: code, numpy scalar type) lets C do it exactly: a
   numpy scalar of the declared type, an exact int in an integer dtype's range, an
   exact float for float64 (or float32 within its range). 1 converted; 0 leave the
   call to check_scalars (its checks and errors); -1 an exception. */
static int convert_scalar(PyObject *v, long code, PyObject *stype, uint64_t *cell)
{
    int size = (int)(code & 0xF), kind = (int)(code & 0xF0);
    cell[0] = cell[1] = 0;
    if (code == 0 || !(size == 1 || size == 2 || size == 4 || size == 8))
        return 0;
    if ((PyObject *)Py_TYPE(v) == stype) {
        Py_buffer view;
        if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
            return -1;
        int ok = view.len == size;
        if (ok)
            memcpy(cell, view.buf, (size_t)size);
        PyBuffer_Release(&view);
        return ok;
    }
    if (PyLong_CheckExact(v) && (kind == 0x10 || kind == 0x20)) {
        if (kind == 0x20 && size == 8) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();  /* negative or too large: check_scalars says so */
                return 0;
            }
            memcpy(cell, &u, 8);
            return 1;
        }
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        long long lo = 0, hi = LLONG_MAX;
        if (kind == 0x10 && size < 8) {
            hi = (1LL << (8 * size - 1)) - 1;
            lo = -hi - 1;
        } else if (kind == 0x10) {
            lo = LLONG_MIN;
        } else {
            hi = (1LL << (8 * size)) - 1;
        }
        if (x < lo || x > hi)
            return 0;
        switch (size) {
        case 1: { uint8_t b = (uint8_t)x; memcpy(cell, &b, 1); break; }
        case 2: { uint16_t b = (uint16_t)x; memcpy(cell, &b, 2); break; }
        case 4: { uint32_t b = (uint32_t)x; memcpy(cell, &b, 4); break; }
        default: { uint64_t b = (uint64_t)x; memcpy(cell, &b, 8); break; }
        }
        return 1;
    }
    if (PyFloat_CheckExact(v) && kind == 0x30) {
        double d = PyFloat_AS_DOUBLE(v);
        if (size == 8) {
            memcpy(cell, &d, 8);
            return 1;
        }
        if (d - d == 0.0 && (d > FLT_MAX || d < -FLT_MAX))
            return 0;  /* finite and past float32: numpy's overflow check decides */
        float x = (float)d;
        memcpy(cell, &x, 4);
        return 1;
    }
    return 0;
}

/* Allocation.note_use's common case (the same bytes, later work on this queue): 1 done;
   0 the Python method must do it; -1 an exception. */
static int note_use_fast(PyObject *alloc, PyObject *slot, PyObject *completion, long long start, long long end,
                         int writes)
{
    PyObject *pending = get_attr(alloc, s_pending);
    if (pending == NULL)
        return -1;
    int r = 0;
    if (PyDict_CheckExact(pending)) {
        PyObject *entry = PyDict_GetItemWithError(pending, slot);  /* borrowed */
        if (entry == NULL) {
            r = PyErr_Occurred() ? -1 : 0;
        } else if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) == 4) {
            PyObject *e1 = PyList_GET_ITEM(entry, 1), *e2 = PyList_GET_ITEM(entry, 2), *e3 = PyList_GET_ITEM(entry, 3);
            if (PyLong_CheckExact(e1) && PyLong_CheckExact(e2) && (e3 == Py_True || (e3 == Py_False && !writes))) {
                long long s1 = PyLong_AsLongLong(e1), s2 = PyLong_AsLongLong(e2);
                if (PyErr_Occurred()) {
                    PyErr_Clear();
                } else if (s1 <= start && end <= s2) {
                    Py_INCREF(completion);
                    Py_INCREF(entry);
                    r = PyList_SetItem(entry, 0, completion) < 0 ? -1 : 1;
                    Py_DECREF(entry);
                    if (r == 1 && writes && set_attr(alloc, s_device_dirty, Py_True) < 0)
                        r = -1;
                }
            }
        }
    }
    Py_DECREF(pending);
    return r;
}

/* dispatcher(stream, kernel, grid, bindings, block, scalars) -> Completion, or None:
   nothing was done, run the Python path (Stream.dispatch). */
static PyObject *Dispatcher_call(Dispatcher *self, PyObject *args, PyObject *kwargs)
{
    PyObject *stream, *kernel, *grid, *bindings, *block, *scalars;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "a dispatcher takes positional arguments only");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "dispatcher", 6, 6, &stream, &kernel, &grid, &bindings, &block, &scalars))
        return NULL;
    unsigned int dims[6];
    if ((PyObject *)Py_TYPE(kernel) != self->kernel_type)
        return dis_miss(self);
    if (!plain_dims(grid, self->max_grid, dims) || !plain_dims(block, self->max_block, dims + 3))
        return dis_miss(self);
    if ((long long)dims[3] * dims[4] * dims[5] > self->max_threads)
        return dis_miss(self);

    /* everything below holds references released at `out` */
    PyObject *exe = NULL, *access = NULL, *plan = NULL, *conv = NULL, *pyargs = NULL, *handle_obj = NULL;
    PyObject *allocs = NULL, *committed = NULL, *completion = NULL, *result = NULL;
    PyObject *alloc_of[HRX_FAST_ARGS];   /* borrowed from the bindings' buffers, kept by `allocs` */
    long long start_of[HRX_FAST_ARGS], end_of[HRX_FAST_ARGS];
    int writes_of[HRX_FAST_ARGS];
    uint64_t cells[HRX_FAST_ARGS][2];
    void *params[HRX_FAST_ARGS];
    Py_ssize_t nb = 0, ns = 0, nallocs = 0;
    uintptr_t handle = 0;
    int r, locked = 0, missed = 0;
    PyObject *done = NULL;

    {
        PyObject *exes = get_attr(kernel, s_executables);
        if (exes == NULL)
            goto out;
        if (PyDict_CheckExact(exes)) {
            exe = PyDict_GetItemWithError(exes, self->device_key);
            Py_XINCREF(exe);
        }
        Py_DECREF(exes);
        if (exe == NULL) {
            if (PyErr_Occurred())
                goto out;
            goto miss;  /* not loaded on this device yet: the Python path loads it */
        }
    }
    if ((r = attr_true(exe, s_unloaded)) != 0) {
        if (r < 0)
            goto out;
        goto miss;
    }
    if (self->fn != NULL) {
        handle_obj = get_attr(exe, s_fast_handle);
        if (handle_obj == NULL)
            goto out;
        if (!PyLong_CheckExact(handle_obj))
            goto miss;
        handle = (uintptr_t)PyLong_AsUnsignedLongLong(handle_obj);
        if (PyErr_Occurred())
            goto out;
        if (handle == 0)
            goto miss;  /* the engine launches this executable from Python only */
    }
    access = get_attr(kernel, s_buffer_access);
    if (access == NULL)
        goto out;
    if (!PyTuple_CheckExact(access))
        goto miss;
    nb = PyTuple_GET_SIZE(access);
    if (!(PyList_CheckExact(bindings) || PyTuple_CheckExact(bindings)) || PySequence_Fast_GET_SIZE(bindings) != nb
        || nb > HRX_FAST_ARGS)
        goto miss;
    if (self->fn == NULL && (pyargs = PyList_New(0)) == NULL)
        goto out;

    /* buffers: whole Buffer objects of this device, open, with no host mapping or
       unflushed host write (Stream._buffer_arg's checks; anything else, the Python path) */
    for (Py_ssize_t i = 0; i < nb; i++) {
        /* (Python code may run between items -- BufferArg's constructor -- and another
           thread may shrink a list meanwhile: checked on every item) */
        if (i >= PySequence_Fast_GET_SIZE(bindings))
            goto miss;
        PyObject *b = PySequence_Fast_GET_ITEM(bindings, i);
        if ((PyObject *)Py_TYPE(b) != self->buffer_type)
            goto miss;
        if ((r = attr_true(b, s_uclosed)) != 0) {
            if (r < 0)
                goto out;
            goto miss;
        }
        if ((r = attr_is(b, s_device, self->device)) != 1) {
            if (r < 0)
                goto out;
            goto miss;
        }
        PyObject *alloc = get_attr(b, s_ualloc);
        if (alloc == NULL)
            goto out;
        alloc_of[i] = alloc;  /* a new reference until `allocs` holds it (below) */
        int found = 0;
        for (Py_ssize_t j = 0; j < nallocs; j++)
            found |= PyTuple_GET_ITEM(allocs, j) == alloc;
        if (allocs == NULL && (allocs = PyTuple_New(nb)) == NULL) {
            Py_DECREF(alloc);
            goto out;
        }
        if (!found) {
            PyTuple_SET_ITEM(allocs, nallocs, alloc);  /* steals */
            nallocs++;
        } else {
            Py_DECREF(alloc);  /* `allocs` holds it */
        }
        PyObject *maps = get_attr(alloc, s_host_maps);
        if (maps == NULL)
            goto out;
        int mapped = !PyList_CheckExact(maps) || PyList_GET_SIZE(maps) != 0;
        Py_DECREF(maps);
        if (mapped)
            goto miss;
        if ((r = attr_true(alloc, s_host_dirty)) != 0) {
            if (r < 0)
                goto out;
            goto miss;
        }
        long long base, nbytes;
        if ((r = long_attr(b, s_base, &base)) != 1 || (r = long_attr(b, s_nbytes, &nbytes)) != 1) {
            if (r < 0)
                goto out;
            goto miss;
        }
        long acc = PyLong_AsLong(PyTuple_GET_ITEM(access, i));
        if (acc == -1 && PyErr_Occurred())
            goto out;
        start_of[i] = base;
        end_of[i] = base + nbytes;
        writes_of[i] = (acc & 2) != 0;
        PyObject *native = get_attr(alloc, s_native_attr);
        if (native == NULL)
            goto out;
        if (self->fn != NULL) {
            long long address;
            r = long_attr(native, self->address_attr, &address);
            Py_DECREF(native);
            if (r != 1) {
                if (r < 0) {
                    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                        goto out;
                    PyErr_Clear();
                }
                goto miss;  /* no address the C entry can pack: the Python path packs it */
            }
            cells[i][0] = (uint64_t)address + (uint64_t)base;
            params[i] = cells[i];
        } else {
            PyObject *a[] = {native, NULL, NULL, PyTuple_GET_ITEM(access, i)};
            a[1] = PyLong_FromLongLong(base);
            a[2] = PyLong_FromLongLong(nbytes);
            PyObject *arg = (a[1] == NULL || a[2] == NULL) ? NULL : PyObject_Vectorcall(self->bufferarg_type, a, 4, NULL);
            Py_DECREF(native);
            Py_XDECREF(a[1]);
            Py_XDECREF(a[2]);
            if (arg == NULL)
                goto out;
            r = PyList_Append(pyargs, arg);
            Py_DECREF(arg);
            if (r < 0)
                goto out;
        }
    }

    /* scalars: converted here where the kernel's plan allows (C entry only: the Python
       dispatch takes numpy scalars), else by the kernel's own check (its errors) */
    plan = get_attr(kernel, s_scalar_plan);
    if (plan == NULL)
        goto out;
    if (!PyTuple_CheckExact(plan))
        goto miss;
    {
        int converted = 0;
        Py_ssize_t np_ = PyTuple_GET_SIZE(plan);
        if ((PyTuple_CheckExact(scalars) || PyList_CheckExact(scalars)) && PySequence_Fast_GET_SIZE(scalars) == np_
            && nb + np_ <= HRX_FAST_ARGS && (self->fn != NULL || np_ == 0)) {
            converted = 1;
            for (Py_ssize_t i = 0; i < np_; i++) {
                PyObject *step = PyTuple_GET_ITEM(plan, i);
                long code = 0;
                if (!PyTuple_CheckExact(step) || PyTuple_GET_SIZE(step) != 2
                    || ((code = PyLong_AsLong(PyTuple_GET_ITEM(step, 0))) == -1 && PyErr_Occurred()))
                    goto out_or_miss;
                if (i >= PySequence_Fast_GET_SIZE(scalars))
                    goto miss;
                r = convert_scalar(PySequence_Fast_GET_ITEM(scalars, i), code, PyTuple_GET_ITEM(step, 1), cells[nb + i]);
                if (r < 0)
                    goto out;
                if (r == 0) {
                    converted = 0;
                    break;
                }
                params[nb + i] = cells[nb + i];
            }
            ns = np_;
        }
        if (!converted) {
            conv = PyObject_CallMethodOneArg(kernel, s_check_scalars, scalars);
            if (conv == NULL)
                goto out;
            if (!PyTuple_CheckExact(conv) && !PyList_CheckExact(conv))
                goto miss;
            ns = PySequence_Fast_GET_SIZE(conv);
            if (nb + ns > HRX_FAST_ARGS)
                goto miss;
            for (Py_ssize_t i = 0; i < ns; i++) {
                PyObject *v = PySequence_Fast_GET_ITEM(conv, i);
                if (self->fn != NULL) {
                    Py_buffer view;
                    if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
                        goto out;
                    int fits = view.len > 0 && view.len <= (Py_ssize_t)sizeof(cells[0]);
                    if (fits) {
                        cells[nb + i][0] = cells[nb + i][1] = 0;
                        memcpy(cells[nb + i], view.buf, (size_t)view.len);
                        params[nb + i] = cells[nb + i];
                    }
                    PyBuffer_Release(&view);
                    if (!fits)
                        goto miss;
                } else if (PyList_Append(pyargs, v) < 0) {
                    goto out;
                }
            }
        }
    }

    /* the queue: taken without waiting (another thread holds it: the Python path waits) */
    if ((r = try_acquire(self->acquire)) != 1) {
        if (r < 0)
            goto out;
        goto miss;
    }
    locked = 1;
    if ((r = attr_true(self->slot, s_closed)) != 0) {
        if (r < 0)
            goto out;
        goto miss;
    }
    if (self->fn != NULL) {
        int code = self->fn(self->arg, handle, dims, (nb + ns) ? params : NULL);
        if (code == -1)
            goto miss;
        if (code != 0) {
            PyObject *x = PyObject_CallFunction(self->on_failure, "i", code);
            if (x == NULL)
                goto out;  /* raised: nothing launched, nothing committed */
            Py_DECREF(x);
        }
    } else {
        PyObject *g = Py_BuildValue("(III)", dims[0], dims[1], dims[2]);
        PyObject *bl = g == NULL ? NULL : Py_BuildValue("(III)", dims[3], dims[4], dims[5]);
        PyObject *x = NULL;
        if (bl != NULL) {
            PyObject *a[] = {exe, g, bl, pyargs};
            x = PyObject_Vectorcall(self->launch_py, a, 4, NULL);
        }
        Py_XDECREF(g);
        Py_XDECREF(bl);
        if (x == NULL)
            goto out;
        Py_DECREF(x);
    }
    if (self->needs_submit && call_method0(self->native, s_submit) < 0)
        goto out;
    for (Py_ssize_t j = 0; j < nallocs; j++) {
        if (call_method0(PyTuple_GET_ITEM(allocs, j), s_retain) < 0)
            goto out;
    }
    {
        PyObject *retain;
        if (allocs == NULL) {
            retain = PyTuple_New(0);
        } else {
            retain = nallocs < nb ? PyTuple_GetSlice(allocs, 0, nallocs) : Py_NewRef(allocs);
        }
        if (retain == NULL)
            goto out;
        committed = PyObject_CallMethodOneArg(self->slot, s_commit_locked, retain);
        Py_DECREF(retain);
        if (committed == NULL)
            goto out;
        if (!PyTuple_CheckExact(committed) || PyTuple_GET_SIZE(committed) != 2) {
            PyErr_SetString(PyExc_TypeError, "QueueSlot.commit_locked: expected (value, done)");
            goto out;
        }
        done = PyTuple_GET_ITEM(committed, 1);
    }
    locked = 0;
    if (release_keeping(self->release) < 0)
        goto out;
    if ((r = PyObject_IsTrue(done)) != 0) {
        if (r < 0)
            goto out;
        PyObject *x = PyObject_CallMethodOneArg(self->slot, s_release_retired, done);
        if (x == NULL)
            goto out;
        Py_DECREF(x);
    }
    {
        /* Stream._dispatched: the stream's latest completion, or one at the new value */
        PyObject *value = PyTuple_GET_ITEM(committed, 0);
        completion = get_attr(stream, s_ulast);
        if (completion == NULL)
            goto out;
        r = 0;
        if (completion != Py_None) {
            PyObject *cv = get_attr(completion, s_value);
            if (cv == NULL)
                goto out;
            r = int_compare(cv, value, Py_EQ);
            Py_DECREF(cv);
            if (r < 0)
                goto out;
        }
        if (r != 1) {
            Py_DECREF(completion);
            completion = stream_done(stream, self->slot, value, NULL);
            if (completion == NULL)
                goto out;
        }
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        if ((r = note_use_fast(alloc_of[i], self->slot, completion, start_of[i], end_of[i], writes_of[i])) != 0) {
            if (r < 0)
                goto out;
            continue;
        }
        PyObject *a[] = {alloc_of[i], completion, NULL, NULL, writes_of[i] ? Py_True : Py_False};
        a[2] = PyLong_FromLongLong(start_of[i]);
        a[3] = PyLong_FromLongLong(end_of[i]);
        PyObject *x = (a[2] == NULL || a[3] == NULL) ? NULL
            : PyObject_VectorcallMethod(s_note_use, a, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_XDECREF(a[2]);
        Py_XDECREF(a[3]);
        if (x == NULL)
            goto out;
        Py_DECREF(x);
    }
    if (add_to(self->stats, s_dispatches, 1, NULL) < 0)
        goto out;
    result = completion;
    completion = NULL;
    self->hits++;
    goto out;

out_or_miss:
    if (PyErr_Occurred())
        goto out;
miss:
    missed = 1;
out:
    if (locked && release_keeping(self->release) < 0)
        Py_CLEAR(result);
    Py_XDECREF(exe);
    Py_XDECREF(access);
    Py_XDECREF(plan);
    Py_XDECREF(conv);
    Py_XDECREF(pyargs);
    Py_XDECREF(handle_obj);
    Py_XDECREF(allocs);
    Py_XDECREF(committed);
    Py_XDECREF(completion);
    if (missed && !PyErr_Occurred())
        return dis_miss(self);
    return result;
}

static int Dispatcher_traverse(Dispatcher *self, visitproc visit, void *arg)
{
    return visit_fields(&self->slot, &self->address_attr, visit, arg);
}

static int Dispatcher_clear(Dispatcher *self)
{
    clear_fields(&self->slot, &self->address_attr);
    self->fn = NULL;
    return 0;
}

static void Dispatcher_dealloc(Dispatcher *self)
{
    PyObject_GC_UnTrack(self);
    Dispatcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int three_longs(PyObject *seq, const char *what, long *out)
{
    PyObject *t = PySequence_Tuple(seq);
    if (t == NULL)
        return -1;
    int ok = PyTuple_GET_SIZE(t) == 3;
    for (Py_ssize_t i = 0; ok && i < 3; i++) {
        out[i] = PyLong_AsLong(PyTuple_GET_ITEM(t, i));
        ok = !(out[i] == -1 && PyErr_Occurred()) && out[i] >= 1;
    }
    Py_DECREF(t);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s: expected three positive ints", what);
        return -1;
    }
    return 0;
}

/* Dispatcher(slot, device, stats, kernel_type, buffer_type, bufferarg_type, launch,
   on_failure, entry, argument, keep, address_attr, max_grid, max_block, max_threads) */
static int Dispatcher_init(Dispatcher *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"slot", "device", "stats", "kernel_type", "buffer_type", "bufferarg_type", "launch",
                            "on_failure", "entry", "argument", "keep", "address_attr", "max_grid", "max_block",
                            "max_threads", NULL};
    PyObject *slot, *device, *stats, *kernel_type, *buffer_type, *bufferarg_type, *launch_py, *on_failure, *keep,
        *address_attr, *max_grid, *max_block;
    unsigned long long entry, argument;
    long max_threads;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOKKOUOOl", names, &slot, &device, &stats, &kernel_type,
                                     &buffer_type, &bufferarg_type, &launch_py, &on_failure, &entry, &argument,
                                     &keep, &address_attr, &max_grid, &max_block, &max_threads))
        return -1;
    if (max_threads < 1) {
        PyErr_SetString(PyExc_ValueError, "max_threads: expected at least 1");
        return -1;
    }
    if (entry != 0 && !PyCallable_Check(on_failure)) {
        PyErr_SetString(PyExc_ValueError, "on_failure: a C entry needs a failure handler");
        return -1;
    }
    Dispatcher_clear(self);
    if (three_longs(max_grid, "max_grid", self->max_grid) < 0 || three_longs(max_block, "max_block", self->max_block) < 0)
        return -1;
    self->max_threads = max_threads;
    PyObject *lock = PyObject_GetAttrString(slot, "lock");
    if (lock == NULL)
        return -1;
    self->acquire = get_attr(lock, s_acquire);
    self->release = get_attr(lock, s_release);
    Py_DECREF(lock);
    self->native = get_attr(slot, s_unative);
    self->device_key = PyLong_FromVoidPtr(device);
    int needs_submit = self->native == NULL || self->native == Py_None ? -1 : attr_true(self->native, s_needs_submit);
    if (self->acquire == NULL || self->release == NULL || self->device_key == NULL || needs_submit < 0) {
        if (self->native == Py_None)
            PyErr_SetString(PyExc_ValueError, "slot: its native queue is not created yet");
        Dispatcher_clear(self);
        return -1;
    }
    self->needs_submit = needs_submit;
#define KEEP(field, value) do { Py_INCREF(value); self->field = value; } while (0)
    KEEP(slot, slot);
    KEEP(device, device);
    KEEP(stats, stats);
    KEEP(kernel_type, kernel_type);
    KEEP(buffer_type, buffer_type);
    KEEP(bufferarg_type, bufferarg_type);
    KEEP(launch_py, launch_py);
    KEEP(on_failure, on_failure);
    KEEP(keep, keep);
    KEEP(address_attr, address_attr);
#undef KEEP
    self->fn = (hrx_dispatch_fn)(uintptr_t)entry;
    self->arg = (void *)(uintptr_t)argument;
    self->hits = self->misses = 0;
    return 0;
}

static PyMemberDef Dispatcher_members[] = {
    {"hits", T_PYSSIZET, offsetof(Dispatcher, hits), READONLY, "dispatches this dispatcher made"},
    {"misses", T_PYSSIZET, offsetof(Dispatcher, misses), READONLY, "calls it left to the Python path"},
    {NULL}
};

static PyObject *Dispatcher_compiled_entry(Dispatcher *self, void *closure)
{
    return PyBool_FromLong(self->fn != NULL);
}

static PyGetSetDef Dispatcher_getset[] = {
    {"compiled_entry", (getter)Dispatcher_compiled_entry, NULL, "whether the engine launches through C", NULL},
    {NULL}
};

static PyTypeObject DispatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hrx_core.fastpath.Dispatcher",
    .tp_basicsize = sizeof(Dispatcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A stream's eager dispatch of whole buffers, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Dispatcher_init,
    .tp_dealloc = (destructor)Dispatcher_dealloc,
    .tp_traverse = (traverseproc)Dispatcher_traverse,
    .tp_clear = (inquiry)Dispatcher_clear,
    .tp_call = (ternaryfunc)Dispatcher_call,
    .tp_members = Dispatcher_members,
    .tp_getset = Dispatcher_getset,
};

/* ---- Observation's fold: Runtime._fold and Runtime._defer_trace's loops ------------ */

#define FOLD_ROWS 64  /* regions a graph may have for the compiled fold (more: Python's) */

/* whether `item` is (regions, ends, submitted, events) as the runtime makes it: regions a
   tuple of RegionInfo-shaped tuples (name, lane, deps, graph: str, str, tuple, ...), at
   most FOLD_ROWS of them, ends a list of as many floats, submitted a float */
static int fold_item_ok(PyObject *item)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4)
        return 0;
    PyObject *regions = PyTuple_GET_ITEM(item, 0), *ends = PyTuple_GET_ITEM(item, 1);
    if (!PyTuple_Check(regions) || PyTuple_GET_SIZE(regions) > FOLD_ROWS || !PyList_CheckExact(ends)
        || PyList_GET_SIZE(ends) != PyTuple_GET_SIZE(regions) || !PyFloat_CheckExact(PyTuple_GET_ITEM(item, 2)))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(regions); i++) {
        PyObject *r = PyTuple_GET_ITEM(regions, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) < 3 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(r, 0))
            || !PyUnicode_CheckExact(PyTuple_GET_ITEM(r, 1)) || !PyTuple_Check(PyTuple_GET_ITEM(r, 2))
            || !PyFloat_CheckExact(PyList_GET_ITEM(ends, i)))
            return 0;
    }
    return 1;
}

/* fold_ready's write-back of a run: each lane whose last_end moved gets the end float
   that moved it, each busy list [seconds, count] its new values. 0, or -1 with an
   exception (the rest still written). */
static int fold_flush(PyObject **lanes, PyObject **end_objs, int nl, PyObject **busy, const double *sums,
                      const long long *counts, int nb)
{
    int rc = 0;
    for (int l = 0; l < nl; l++)
        if (end_objs[l] != NULL && set_attr(lanes[l], s_last_end, end_objs[l]) < 0)
            rc = -1;
    for (int j = 0; j < nb; j++) {
        PyObject *sum = PyFloat_FromDouble(sums[j]), *count = sum == NULL ? NULL : PyLong_FromLongLong(counts[j]);
        if (count == NULL) {
            Py_XDECREF(sum);
            rc = -1;
            continue;
        }
        PyList_SetItem(busy[j], 0, sum);  /* (steals; the old value goes) */
        PyList_SetItem(busy[j], 1, count);
    }
    return rc;
}

/* fold_ready(items, lanes, busy, latencies) -> bool: Runtime._fold's loop (change both).
   Each region of each stamped item (a list, in submission order) adds its busy time --
   from max(submitted, its lane's last_end) to its end, at least 0 -- and one region to
   busy[lane] ([seconds, count], made on first use), appends its latency (end -
   submitted, at least 0) to latencies[name], and moves its lane's last_end on. The same
   float operations in the same order as the Python loop: the same bits. False, having
   changed nothing: something is not as the runtime makes it (the Python loop folds
   them, and raises what it raises). */
static PyObject *module_fold_ready(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) || !PyDict_CheckExact(args[2])
        || !PyDict_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "fold_ready(items: list, lanes: dict, busy: dict, latencies: dict)");
        return NULL;
    }
    PyObject *items = args[0], *lanes = args[1], *busy = args[2], *latencies = args[3];
    Py_ssize_t n = PyList_GET_SIZE(items);
    /* first every check, so that a False leaves everything as it was: each item's shape,
       each region's lane a Lane of `lanes` whose last_end is a float, each busy and
       latency entry already there of the right type */
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(items, k);
        if (!fold_item_ok(item))
            Py_RETURN_FALSE;
        PyObject *regions = PyTuple_GET_ITEM(item, 0);
        if (k > 0 && regions == PyTuple_GET_ITEM(PyList_GET_ITEM(items, k - 1), 0))
            continue;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(regions); i++) {
            PyObject *r = PyTuple_GET_ITEM(regions, i), *name = PyTuple_GET_ITEM(r, 0), *lname = PyTuple_GET_ITEM(r, 1);
            PyObject *lane = PyDict_GetItemWithError(lanes, lname);
            if (lane == NULL) {
                if (PyErr_Occurred())
                    return NULL;
                Py_RETURN_FALSE;
            }
            PyObject *end = get_attr(lane, s_last_end);
            if (end == NULL)
                return NULL;
            int ok = PyFloat_CheckExact(end);
            Py_DECREF(end);
            PyObject *b = PyDict_GetItemWithError(busy, lname), *lat = PyDict_GetItemWithError(latencies, name);
            if (PyErr_Occurred())
                return NULL;
            if (!ok || (b != NULL && !(PyList_CheckExact(b) && PyList_GET_SIZE(b) == 2
                                       && PyFloat_CheckExact(PyList_GET_ITEM(b, 0)) && PyLong_CheckExact(PyList_GET_ITEM(b, 1))))
                || (lat != NULL && !PyList_CheckExact(lat)))
                Py_RETURN_FALSE;
        }
    }
    /* A run of one graph's submissions is folded in C doubles: each distinct lane's
       last_end and each distinct busy list's seconds and count (regions sharing a lane
       share them, so every sum sees its additions in the Python loop's order: the same
       bits), written back when the run ends. */
    PyObject *last = NULL;
    PyObject *row_lat[FOLD_ROWS];  /* (borrowed: the dicts hold them) */
    int row_l[FOLD_ROWS], row_b[FOLD_ROWS];  /* a row's distinct lane and busy list */
    PyObject *u_lane[FOLD_ROWS], *u_end_obj[FOLD_ROWS], *u_busy[FOLD_ROWS];  /* (borrowed) */
    double u_end[FOLD_ROWS], u_sum[FOLD_ROWS];
    long long u_count[FOLD_ROWS];
    int nl = 0, nb = 0, failed = 0;
    for (Py_ssize_t k = 0; k <= n && !failed; k++) {
        PyObject *item = k < n ? PyList_GET_ITEM(items, k) : NULL;
        PyObject *regions = item != NULL ? PyTuple_GET_ITEM(item, 0) : NULL;
        if (regions != last && last != NULL) {
            /* the run ends: its lanes' last_end and its busy lists written back */
            if (fold_flush(u_lane, u_end_obj, nl, u_busy, u_sum, u_count, nb) < 0)
                return NULL;
            nl = nb = 0;
        }
        if (item == NULL)
            break;
        PyObject *ends = PyTuple_GET_ITEM(item, 1);
        double submitted = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(item, 2));
        Py_ssize_t rn = PyTuple_GET_SIZE(regions);
        if (regions != last) {  /* (a graph's submissions share its plan's infos: looked up once a run) */
            last = regions;
            for (Py_ssize_t i = 0; i < rn; i++) {
                PyObject *r = PyTuple_GET_ITEM(regions, i), *lname = PyTuple_GET_ITEM(r, 1);
                PyObject *lane = PyDict_GetItemWithError(lanes, lname);
                if (lane == NULL)
                    return NULL;  /* (checked above: only an error raised by a key's hash or compare) */
                int l = 0;
                while (l < nl && u_lane[l] != lane)
                    l++;
                if (l == nl) {
                    PyObject *end = get_attr(lane, s_last_end);
                    if (end == NULL)
                        return NULL;
                    u_end[l] = PyFloat_AsDouble(end);  /* (a float, checked) */
                    Py_DECREF(end);
                    u_lane[l] = lane;
                    u_end_obj[l] = NULL;  /* (unchanged) */
                    nl++;
                }
                row_l[i] = l;
                PyObject *fresh = PyList_New(2);
                if (fresh == NULL)
                    return NULL;
                PyList_SET_ITEM(fresh, 0, PyFloat_FromDouble(0.0));
                PyList_SET_ITEM(fresh, 1, Py_NewRef(small_zero));
                if (PyList_GET_ITEM(fresh, 0) == NULL) {
                    Py_DECREF(fresh);
                    return NULL;
                }
                PyObject *b = PyDict_SetDefault(busy, lname, fresh);
                Py_DECREF(fresh);
                if (b == NULL)
                    return NULL;
                int j = 0;
                while (j < nb && u_busy[j] != b)
                    j++;
                if (j == nb) {
                    long long c = PyLong_AsLongLong(PyList_GET_ITEM(b, 1));
                    if (c == -1 && PyErr_Occurred())
                        return NULL;
                    u_busy[j] = b;
                    u_sum[j] = PyFloat_AS_DOUBLE(PyList_GET_ITEM(b, 0));
                    u_count[j] = c;
                    nb++;
                }
                row_b[i] = j;
                PyObject *empty = PyList_New(0);
                if (empty == NULL)
                    return NULL;
                row_lat[i] = PyDict_SetDefault(latencies, PyTuple_GET_ITEM(r, 0), empty);
                Py_DECREF(empty);
                if (row_lat[i] == NULL)
                    return NULL;
            }
        }
        for (Py_ssize_t i = 0; i < rn; i++) {
            PyObject *end_obj = PyList_GET_ITEM(ends, i);
            double end = PyFloat_AS_DOUBLE(end_obj);
            int l = row_l[i], j = row_b[i];
            double lane_end = u_end[l];
            double start = lane_end > submitted ? lane_end : submitted;
            if (end > lane_end) {
                u_end[l] = end;
                u_end_obj[l] = end_obj;  /* (the items list holds it) */
            }
            double d = end - start;
            u_sum[j] += d > 0.0 ? d : 0.0;
            u_count[j] += 1;
            d = end - submitted;
            PyObject *latency = PyFloat_FromDouble(d > 0.0 ? d : 0.0);
            if (latency == NULL || PyList_Append(row_lat[i], latency) < 0) {
                Py_XDECREF(latency);
                failed = 1;  /* (what was folded so far is written back, as the loop would have) */
                break;
            }
            Py_DECREF(latency);
        }
    }
    if (failed) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (fold_flush(u_lane, u_end_obj, nl, u_busy, u_sum, u_count, nb) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* fold_take(waiting) -> list or None: Runtime._fold_observed's partition (change both),
   its caller holding the fold lock. Every item leaves the deque `waiting`; the stamped
   ones (no end 0.0 in item[1]) are returned in order, the others go back to the front of
   `waiting`, in order, for a later fold. None, having changed nothing: an item is not a
   tuple whose second entry is a list of floats (the Python lines decide). */
static PyObject *module_fold_take(PyObject *module, PyObject *waiting)
{
    (void)module;
    PyObject *items = PySequence_List(waiting);
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items), unready = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(items, k);
        PyObject *ends = PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) >= 2 ? PyTuple_GET_ITEM(item, 1) : NULL;
        if (ends == NULL || !PyList_CheckExact(ends)) {
            Py_DECREF(items);
            Py_RETURN_NONE;
        }
        int stamped = 1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ends); i++) {
            PyObject *e = PyList_GET_ITEM(ends, i);
            if (!PyFloat_CheckExact(e)) {
                Py_DECREF(items);
                Py_RETURN_NONE;
            }
            if (PyFloat_AS_DOUBLE(e) == 0.0)  /* (as `0.0 in ends`: -0.0 too, never a NaN) */
                stamped = 0;
        }
        unready += !stamped;
    }
    PyObject *x = PyObject_CallMethodNoArgs(waiting, s_clear);
    if (x == NULL) {
        Py_DECREF(items);
        return NULL;
    }
    Py_DECREF(x);
    if (unready == 0)
        return items;
    PyObject *ready = PyList_New(n - unready), *later = PyList_New(unready);
    if (ready == NULL || later == NULL)
        goto fail;
    /* (`later` reversed: extendleft puts the last first, so they keep their order) */
    for (Py_ssize_t k = 0, r = 0, u = unready; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(items, k), *ends = PyTuple_GET_ITEM(item, 1);
        int stamped = 1;
        for (Py_ssize_t i = 0; stamped && i < PyList_GET_SIZE(ends); i++)
            stamped = PyFloat_AS_DOUBLE(PyList_GET_ITEM(ends, i)) != 0.0;
        if (stamped)
            PyList_SET_ITEM(ready, r++, Py_NewRef(item));
        else
            PyList_SET_ITEM(later, --u, Py_NewRef(item));
    }
    x = PyObject_CallMethodOneArg(waiting, s_extendleft, later);
    if (x == NULL)
        goto fail;
    Py_DECREF(x);
    Py_DECREF(later);
    Py_DECREF(items);
    return ready;
fail:
    {
        /* (every item back where it was, as far as the deque lets it) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *y = PyObject_CallMethodNoArgs(waiting, s_clear);
        Py_XDECREF(y);
        y = y == NULL ? NULL : PyObject_CallMethodOneArg(waiting, s_extend, items);
        Py_XDECREF(y);
        if (y == NULL)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
    }
    Py_XDECREF(ready);
    Py_XDECREF(later);
    Py_DECREF(items);
    return NULL;
}

/* trace_defer(items, pending, live, total, limit, lane_end) -> (total, dropped) or None:
   Runtime._defer_trace's loops (change both), its caller holding the trace lock. Each
   folded item (a list, each as fold_ready takes them) joins the deque `pending` as
   ((regions, ends, submitted, None), live, events) -- the item itself in place of the
   first where its Events list is empty or None -- events: a slice a region, a flow a
   dependency, a memory sample -- and `total` counts them; then, while more than one is
   kept and the oldest can go with `limit` events left, the oldest goes (uncounted in
   total, counted in dropped), its regions' ends moving lane_end[lane] on. None, having
   changed nothing: an item is not as the runtime makes it. An entry of `pending` not as
   this makes them stops the dropping (the Python loop goes on from there). */
static PyObject *module_trace_defer(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long total, limit;
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[5])) {
        PyErr_SetString(PyExc_TypeError, "trace_defer(items: list, pending, live, total: int, limit: int, lane_end: dict)");
        return NULL;
    }
    if ((total = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
        return NULL;
    if ((limit = PyLong_AsLongLong(args[4])) == -1 && PyErr_Occurred())
        return NULL;
    PyObject *items = args[0], *pending = args[1], *live = args[2], *lane_end = args[5];
    Py_ssize_t n = PyList_GET_SIZE(items);
    for (Py_ssize_t k = 0; k < n; k++)
        if (!fold_item_ok(PyList_GET_ITEM(items, k)))
            Py_RETURN_NONE;
    PyObject *append = PyObject_GetAttr(pending, s_append);
    if (append == NULL)
        return NULL;
    PyObject *last = NULL, *events = NULL;
    long long each = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(items, k), *regions = PyTuple_GET_ITEM(item, 0);
        if (regions != last) {  /* (counted once a run of one graph's submissions) */
            last = regions;
            each = PyTuple_GET_SIZE(regions) + 1;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(regions); i++)
                each += PyTuple_GET_SIZE(PyTuple_GET_ITEM(PyTuple_GET_ITEM(regions, i), 2));
            Py_XDECREF(events);
            if ((events = PyLong_FromLongLong(each)) == NULL)
                goto fail;
        }
        /* (not its Events: nothing to keep alive -- the item itself where its list of them
           is empty, as observe=True's are once stamped) */
        PyObject *events_of = PyTuple_GET_ITEM(item, 3);
        PyObject *kept = events_of == Py_None || (PyList_CheckExact(events_of) && PyList_GET_SIZE(events_of) == 0)
            ? Py_NewRef(item) : PyTuple_Pack(4, regions, PyTuple_GET_ITEM(item, 1), PyTuple_GET_ITEM(item, 2), Py_None);
        PyObject *entry = kept == NULL ? NULL : PyTuple_Pack(3, kept, live, events);
        Py_XDECREF(kept);
        PyObject *x = entry == NULL ? NULL : call_o(append, entry);
        Py_XDECREF(entry);
        if (x == NULL)
            goto fail;
        Py_DECREF(x);
        total += each;
    }
    Py_CLEAR(events);
    Py_CLEAR(append);
    /* the oldest go while more than one is kept and `limit` events stay; where their
       slices ended is kept per lane in C (the latest end, a float of theirs) and moved
       into lane_end once at the end: the same values as one lane_end update a drop */
    long long dropped = 0;
    PyObject *d_lane[FOLD_ROWS], *d_end[FOLD_ROWS];  /* (borrowed; `drops` holds the items) */
    int nd = 0, rc = 0;
    PyObject *popleft = PyObject_GetAttr(pending, s_popleft), *drops = PyList_New(0);
    if (popleft == NULL || drops == NULL)
        goto drop_out;
    for (;;) {
        Py_ssize_t kept_n = PyObject_Length(pending);
        if (kept_n < 0)
            goto drop_error;
        if (kept_n <= 1)
            break;
        PyObject *oldest = PySequence_GetItem(pending, 0);
        if (oldest == NULL)
            goto drop_error;
        long long m = -1;
        PyObject *kept = NULL;
        if (PyTuple_CheckExact(oldest) && PyTuple_GET_SIZE(oldest) == 3 && PyLong_CheckExact(PyTuple_GET_ITEM(oldest, 2))) {
            kept = PyTuple_GET_ITEM(oldest, 0);
            m = PyLong_AsLongLong(PyTuple_GET_ITEM(oldest, 2));
            if (m == -1 && PyErr_Occurred()) {
                Py_DECREF(oldest);
                goto drop_error;
            }
        }
        int fits = kept != NULL && fold_item_ok(kept);
        if (fits) {  /* (its lanes must fit the C table: else the Python loop goes on) */
            PyObject *regions = PyTuple_GET_ITEM(kept, 0);
            int extra = 0;
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(regions); i++) {
                PyObject *lane = PyTuple_GET_ITEM(PyTuple_GET_ITEM(regions, i), 1);
                int l = 0;
                while (l < nd && d_lane[l] != lane)
                    l++;
                extra += l == nd;
            }
            fits = nd + extra <= FOLD_ROWS;
        }
        if (m < 0 || !fits || total - m < limit) {
            Py_DECREF(oldest);
            break;  /* (not one of these: the Python loop decides) */
        }
        PyObject *x = call_0(popleft);
        if (x == NULL || PyList_Append(drops, kept) < 0) {  /* (kept alive until lane_end has its ends) */
            Py_XDECREF(x);
            Py_DECREF(oldest);
            goto drop_error;
        }
        Py_DECREF(x);
        total -= m;
        dropped += m;
        PyObject *regions = PyTuple_GET_ITEM(kept, 0), *ends = PyTuple_GET_ITEM(kept, 1);
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(regions); i++) {  /* where the dropped slices ended, as if built */
            PyObject *lane = PyTuple_GET_ITEM(PyTuple_GET_ITEM(regions, i), 1), *end = PyList_GET_ITEM(ends, i);
            int l = 0;
            while (l < nd && d_lane[l] != lane)
                l++;
            if (l == nd) {
                d_lane[nd] = lane;
                d_end[nd++] = end;
            } else if (PyFloat_AS_DOUBLE(end) > PyFloat_AS_DOUBLE(d_end[l])) {
                d_end[l] = end;
            }
        }
        Py_DECREF(oldest);
    }
    goto drop_out;
drop_error:
    rc = -1;
drop_out:
    /* lane_end[lane] = the latest end where it is later than what lane_end holds (or
       than 0.0 where it holds nothing), as the drops one by one would have left it --
       also after an error, for the drops made */
    {
        PyObject *et = NULL, *ev = NULL, *tb = NULL;
        if (rc < 0)
            PyErr_Fetch(&et, &ev, &tb);
        for (int l = 0; l < nd; l++) {
            PyObject *was = PyDict_GetItemWithError(lane_end, d_lane[l]);
            int later = -1;
            if (was != NULL)
                later = PyFloat_CheckExact(was) ? PyFloat_AS_DOUBLE(d_end[l]) > PyFloat_AS_DOUBLE(was)
                                                : PyObject_RichCompareBool(d_end[l], was, Py_GT);
            else if (!PyErr_Occurred())
                later = PyFloat_AS_DOUBLE(d_end[l]) > 0.0;
            if (later < 0 || (later && PyDict_SetItem(lane_end, d_lane[l], d_end[l]) < 0)) {
                if (rc == 0) {  /* (the first error stands) */
                    rc = -1;
                    PyErr_Fetch(&et, &ev, &tb);
                } else {
                    PyErr_Clear();
                }
            }
        }
        if (rc < 0)
            PyErr_Restore(et, ev, tb);
    }
    Py_XDECREF(popleft);
    Py_XDECREF(drops);
    if (rc < 0 || popleft == NULL || drops == NULL)
        return NULL;
    return Py_BuildValue("(LL)", total, dropped);
fail:
    Py_XDECREF(events);
    Py_XDECREF(append);
    return NULL;
}

/* slot_fills() -> int: how many attribute lookups missed the slot-offset cache so far */
static PyObject *module_slot_fills(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromSsize_t(slot_fills);
}

static PyMethodDef module_methods[] = {
    {"slot_fills", module_slot_fills, METH_NOARGS, "Attribute lookups that missed the slot-offset cache so far."},
    {"fold_ready", (PyCFunction)(void (*)(void))module_fold_ready, METH_FASTCALL, "Runtime._fold's loop."},
    {"fold_take", module_fold_take, METH_O, "Runtime._fold_observed's partition of the waiting submissions."},
    {"trace_defer", (PyCFunction)(void (*)(void))module_trace_defer, METH_FASTCALL, "Runtime._defer_trace's loops."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, NULL, "HRX's compiled replay path.", -1, module_methods};

/* ---- Compiled entries: Graph.launch and Runtime.submit without a Python frame ------- */

/* A method of a Python class whose common call runs in C: FastEntry(impl, kind) stands
   in the class for the Python function `impl` and behaves as it does (a method
   descriptor: bound like a function, `__wrapped__`, `__doc__`, `__name__` from impl).
   kind 0, Graph.launch: launch(graph) and launch(graph, inputs=dict) go to the graph's
   Replayer (graph._fast); kind 1, Runtime.submit: submit(runtime, graph) goes to the
   graph's Submitter (graph._fast_submit) where it was made for that runtime. Where there
   is no compiled object, other arguments are given, or the compiled object answers None
   (it did nothing), `impl` runs with the same arguments: same results either way. */
typedef struct {
    PyObject_HEAD
    PyObject *impl;   /* the Python method */
    PyObject *rest;   /* its path after the compiled attempt: called when that declined */
    PyObject *dict;   /* __dict__ (__name__, __qualname__, __module__) */
    int kind;
    vectorcallfunc vectorcall;
} FastEntry;

static PyObject *s_inputs, *s_fast_submit;

static PyObject *entry_fast(FastEntry *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int *tried)
{
    /* Py_None: not handled here (run impl; *tried set: its compiled object declined, run
       rest); NULL: an exception; else the answer */
    PyObject *inputs = NULL;
    if (self->kind == 0) {  /* launch(graph) or launch(graph, inputs=<non-empty dict>) */
        if (nargs != 1)
            Py_RETURN_NONE;
        if (kwnames != NULL) {
            PyObject *kw = PyTuple_GET_SIZE(kwnames) == 1 ? PyTuple_GET_ITEM(kwnames, 0) : NULL;
            if (kw == NULL || (kw != s_inputs && PyUnicode_Compare(kw, s_inputs) != 0))
                Py_RETURN_NONE;
            inputs = args[1];
            if (!PyDict_CheckExact(inputs) || PyDict_GET_SIZE(inputs) == 0)
                Py_RETURN_NONE;
        }
    } else if (nargs != 2 || kwnames != NULL) {  /* submit(runtime, graph) */
        Py_RETURN_NONE;
    }
    PyObject *holder = args[self->kind];  /* the graph, in either case */
    PyObject *fast = get_attr(holder, self->kind == 0 ? s_fast : s_fast_submit);
    if (fast == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *r;
    if (self->kind == 0 && Py_IS_TYPE(fast, &ReplayerType)) {
        *tried = 1;
        r = inputs == NULL ? replay((Replayer *)fast, holder) : replay_rebound((Replayer *)fast, holder, inputs);
    } else if (self->kind == 1 && Py_IS_TYPE(fast, &SubmitterType) && ((Submitter *)fast)->runtime == args[0]) {
        *tried = 1;
        r = resubmit((Submitter *)fast, holder);
    } else {
        r = Py_NewRef(Py_None);
    }
    Py_DECREF(fast);
    return r;
}

static PyObject *FastEntry_vectorcall(FastEntry *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 0)
        kwnames = NULL;
    if (self->impl == NULL) {
        PyErr_SetString(PyExc_TypeError, "FastEntry: not initialised");
        return NULL;
    }
    int tried = 0;
    PyObject *r = entry_fast(self, args, nargs, kwnames, &tried);
    if (r != Py_None)
        return r;
    Py_DECREF(r);
    /* declined: the rest of the Python path (not its compiled attempt again) */
    return PyObject_Vectorcall(tried ? self->rest : self->impl, args, nargsf, kwnames);
}

static PyObject *FastEntry_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int FastEntry_init(FastEntry *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"impl", "rest", "kind", NULL};
    PyObject *impl, *rest;
    int kind;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOi", names, &impl, &rest, &kind))
        return -1;
    if (!PyCallable_Check(impl) || !PyCallable_Check(rest) || kind < 0 || kind > 1) {
        PyErr_SetString(PyExc_ValueError,
                        "FastEntry(impl, rest, kind): two callables and kind 0 (Graph.launch) or 1 (Runtime.submit)");
        return -1;
    }
    Py_XSETREF(self->impl, Py_NewRef(impl));
    Py_XSETREF(self->rest, Py_NewRef(rest));
    self->kind = kind;
    self->vectorcall = (vectorcallfunc)FastEntry_vectorcall;
    return 0;
}

static PyObject *FastEntry_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    FastEntry *self = (FastEntry *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->vectorcall = (vectorcallfunc)FastEntry_vectorcall;
    return (PyObject *)self;
}

static PyObject *FastEntry_call(FastEntry *self, PyObject *args, PyObject *kwargs)
{
    if (self->impl == NULL) {
        PyErr_SetString(PyExc_TypeError, "FastEntry: not initialised");
        return NULL;
    }
    return PyObject_Call(self->impl, args, kwargs);  /* (calls not made by vectorcall: impl) */
}

static PyObject *FastEntry_repr(FastEntry *self)
{
    PyObject *name = self->impl == NULL ? NULL : PyObject_GetAttrString(self->impl, "__qualname__");
    if (name == NULL) {
        PyErr_Clear();
        return PyUnicode_FromString("<compiled entry>");
    }
    PyObject *r = PyUnicode_FromFormat("<compiled entry %S>", name);
    Py_DECREF(name);
    return r;
}

static PyObject *FastEntry_doc(FastEntry *self, void *closure)
{
    if (self->impl == NULL)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->impl, "__doc__");
}

static int FastEntry_traverse(FastEntry *self, visitproc visit, void *arg)
{
    Py_VISIT(self->impl);
    Py_VISIT(self->rest);
    Py_VISIT(self->dict);
    return 0;
}

static int FastEntry_clear(FastEntry *self)
{
    Py_CLEAR(self->impl);
    Py_CLEAR(self->rest);
    Py_CLEAR(self->dict);
    return 0;
}

static void FastEntry_dealloc(FastEntry *self)
{
    PyObject_GC_UnTrack(self);
    FastEntry_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef FastEntry_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(FastEntry, impl), READONLY, "the Python implementation"},
    {"rest", T_OBJECT, offsetof(FastEntry, rest), READONLY, "the Python path after a declined compiled attempt"},
    {"kind", T_INT, offsetof(FastEntry, kind), READONLY, "0: Graph.launch, 1: Runtime.submit"},
    {NULL}
};

static PyGetSetDef FastEntry_getset[] = {
    {"__doc__", (getter)FastEntry_doc, NULL, NULL, NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject FastEntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hrx_core.fastpath.FastEntry",
    .tp_basicsize = sizeof(FastEntry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A method whose common call runs in C (Graph.launch, Runtime.submit).",
    .tp_new = FastEntry_new,
    .tp_init = (initproc)FastEntry_init,
    .tp_dealloc = (destructor)FastEntry_dealloc,
    .tp_traverse = (traverseproc)FastEntry_traverse,
    .tp_clear = (inquiry)FastEntry_clear,
    .tp_call = (ternaryfunc)FastEntry_call,
    .tp_repr = (reprfunc)FastEntry_repr,
    .tp_vectorcall_offset = offsetof(FastEntry, vectorcall),
    .tp_descr_get = FastEntry_get,
    .tp_dictoffset = offsetof(FastEntry, dict),
    .tp_members = FastEntry_members,
    .tp_getset = FastEntry_getset,
};

static PyObject *hrx_module_create(const char *name)
{
    module_def.m_name = name;
    if ((small_zero = PyLong_FromLong(0)) == NULL || (small_one = PyLong_FromLong(1)) == NULL)
        return NULL;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_plan, "_plan");
    INTERN(s_bound, "_bound");
    INTERN(s_items, "items");
    INTERN(s_apply_patches, "apply_patches");
    INTERN(s_rebound_attr, "rebound");
    INTERN(s_rebind_memo, "_rebind_memo");
    INTERN(s_restore, "_restore");
    INTERN(s_refs, "refs");
    INTERN(s_holds, "holds");
    INTERN(s_rebound, "_rebound");
    INTERN(s_closed, "closed");
    INTERN(s_epoch, "epoch");
    INTERN(s_value, "value");
    INTERN(s_unative, "_native");
    INTERN(s_needs_submit, "needs_submit");
    INTERN(s_submit, "submit");
    INTERN(s_pending_value, "pending_value");
    INTERN(s_unsignaled_ops, "unsignaled_ops");
    INTERN(s_flush_locked, "_flush_locked");
    INTERN(s_last_launch, "_last_launch");
    INTERN(s_values, "_values");
    INTERN(s_ulast, "_last");
    INTERN(s_done, "_done");
    INTERN(s_last, "last");
    INTERN(s_release_retired, "release_retired");
    INTERN(s_launches, "launches");
    INTERN(s_graph_launches, "graph_launches");
    INTERN(s_acquire, "acquire");
    INTERN(s_release, "release");
    INTERN(s_submit_plan, "_submit_plan");
    INTERN(s_gclosed, "_closed");
    INTERN(s_fast_resubmit, "fast_resubmit");
    INTERN(s_resubmit, "resubmit");
    INTERN(s_generation, "generation");
    INTERN(s_places, "places");
    INTERN(s_encode_signaled, "encode_signaled");
    INTERN(s_reported, "_reported");
    INTERN(s_waited, "_waited");
    INTERN(s_stream, "stream");
    INTERN(s_inherits_previous, "_inherits_previous");
    INTERN(s_upstream, "upstream");
    INTERN(s_room_taken, "_room_taken");
    INTERN(s_sequence, "sequence");
    INTERN(s_usequence, "_sequence");
    INTERN(s_add_uncounted, "_add_uncounted");
    INTERN(s_observe, "_observe");
    INTERN(s_quarantined, "_quarantined");
    INTERN(s_releasing, "_releasing");
    INTERN(s_prove_idle, "_prove_idle");
    INTERN(s_give_room_back, "_give_room_back");
    INTERN(s_notice, "_notice");
    INTERN(s_fold_observed, "_fold_observed");
    INTERN(s_reservations, "_reservations");
    INTERN(s_slot_attr, "slot");
    INTERN(s_last_end, "last_end");
    INTERN(s_append, "append");
    INTERN(s_popleft, "popleft");
    INTERN(s_clear, "clear");
    INTERN(s_extend, "extend");
    INTERN(s_extendleft, "extendleft");
    INTERN(s_device_graph, "device_graph");
    INTERN(s_fast, "_fast");
    INTERN(s_completion, "completion");
    INTERN(s_resolved, "resolved");
    INTERN(s_timestamp, "timestamp");
    INTERN(s_signaled, "signaled");
    INTERN(s_utimeline, "_timeline");
    INTERN(s_completed, "completed");
    INTERN(s_has_errors, "has_errors");
    INTERN(s_runtime_attr, "runtime");
    INTERN(s_graph_attr, "graph");
    INTERN(s_events, "events");
    INTERN(s_owners, "owners");
    INTERN(s_submitted, "submitted");
    INTERN(s_settled, "_settled");
    INTERN(s_c_completed, "c_completed");
    INTERN(s_c_failed, "c_failed");
    INTERN(s_retire, "retire");
    INTERN(s_retained, "retained");
    INTERN(s_quarantine_failed, "_quarantine_failed");
    INTERN(s_space_waiters, "_space_waiters");
    INTERN(s_retired, "_retired");
    INTERN(s_settle_finished, "_settle_finished");
    INTERN(s_executables, "_executables");
    INTERN(s_unloaded, "unloaded");
    INTERN(s_fast_handle, "fast_handle");
    INTERN(s_buffer_access, "buffer_access");
    INTERN(s_check_scalars, "check_scalars");
    INTERN(s_ualloc, "_alloc");
    INTERN(s_base, "_base");
    INTERN(s_nbytes, "nbytes");
    INTERN(s_uclosed, "_closed");
    INTERN(s_device, "device");
    INTERN(s_host_maps, "host_maps");
    INTERN(s_host_dirty, "host_dirty");
    INTERN(s_native_attr, "native");
    INTERN(s_retain, "retain");
    INTERN(s_commit_locked, "commit_locked");
    INTERN(s_note_use, "note_use");
    INTERN(s_dispatches, "dispatches");
    INTERN(s_scalar_plan, "_scalar_plan");
    INTERN(s_pending, "pending");
    INTERN(s_device_dirty, "device_dirty");
    INTERN(s_inputs, "inputs");
    INTERN(s_fast_submit, "_fast_submit");
#undef INTERN
    static struct {
        const char *name;
        PyTypeObject *type;
    } types[] = {
        {"Replayer", &ReplayerType},   {"Submitter", &SubmitterType}, {"Dispatcher", &DispatcherType},
        {"FastEntry", &FastEntryType}, {"Tally", &TallyType},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i].type) < 0)
            return NULL;
    if (check_lock_layouts() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        Py_INCREF(types[i].type);
        if (PyModule_AddObject(m, types[i].name, (PyObject *)types[i].type) < 0) {
            Py_DECREF(types[i].type);
            Py_DECREF(m);
            return NULL;
        }
    }
    /* whether threading's locks are taken without a method call (check_lock_layouts) */
    if (PyModule_AddIntConstant(m, "direct_locks", lock_type != NULL) < 0
        || PyModule_AddIntConstant(m, "sem_locks", sem_locks) < 0) {  /* (check_sem_locks) */
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
"""


def module() -> hotpath.HotModule:
    """The compiled replay module, or the reason there is none (built on first use)."""
    return hotpath.load_extension(NAME, SOURCE)


class TalliedCount:
    """A count kept as a Python int (the attribute ``base``) plus what compiled paths
    counted in ``Tally`` objects (the attribute ``tallies``: None, or a tuple of them,
    one per loaded copy of the extension -- a new cache directory loads another): reads
    add them up, assignments set the int so that the sum is the value assigned. A
    compiled replay then counts with one C increment (Graph.launches,
    DeviceStats.graph_launches)."""

    def __init__(self, base: str, tallies: str, doc: str = "") -> None:
        self.base, self.tallies = base, tallies
        self.__doc__ = doc

    def _counted(self, obj: Any) -> int:
        tallies = getattr(obj, self.tallies)
        return sum(t.value for t in tallies) if tallies else 0

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        return getattr(obj, self.base) + self._counted(obj)

    def __set__(self, obj: Any, value: int) -> None:
        setattr(obj, self.base, value - self._counted(obj))

    def tally(self, obj: Any, lib: Any) -> Any:
        """``obj``'s Tally of the compiled module ``lib`` (made on first use)."""
        tallies = getattr(obj, self.tallies) or ()
        for t in tallies:
            if type(t) is lib.Tally:
                return t
        t = lib.Tally()
        setattr(obj, self.tallies, (*tallies, t))
        return t


#: FastEntry kinds: the methods a compiled entry can stand for
ENTRY_KINDS = {"graph_launch": 0, "runtime_submit": 1}


def bind_entry(cls: type, name: str, rest: Any, kind: str, lib: Any) -> bool:
    """Put the compiled entry ``lib.FastEntry`` in place of ``cls.<name>`` (once): the
    method's common call then runs without a Python frame (see FastEntry in the C
    source). Calls it does not take run the Python function, which stays reachable as
    ``cls.<name>.__wrapped__``; calls its compiled object declined (did nothing) run
    ``rest``, the Python function's path after its own compiled attempt (same
    signature). Called where a replayer or submitter is first made, so only once the
    extension is built. Answers whether the entry is (now) in place."""
    current = cls.__dict__.get(name)
    entry_type = getattr(lib, "FastEntry", None)
    if entry_type is None or current is None:
        return False
    if isinstance(current, entry_type):
        return True
    if type(current).__name__ == "FastEntry":  # another loaded copy's: stand for its function
        current = current.__wrapped__
    entry = entry_type(current, rest, ENTRY_KINDS[kind])
    for attr in ("__module__", "__name__", "__qualname__"):
        setattr(entry, attr, getattr(current, attr))
    setattr(cls, name, entry)
    return True


def status() -> dict[str, Any]:
    """``{"compiled": bool, "reason": str, "path": str | None}`` (builds on first use)."""
    return module().status


def doctor_row() -> tuple[str, str, str]:
    """The ``hrx doctor`` row: ``("core", "compiled replay", "compiled, ..." | "fallback (Python): why")``."""
    return hotpath.doctor_row("core", "compiled replay", status)


__all__ = ["ENTRY_KINDS", "NAME", "SOURCE", "TalliedCount", "bind_entry", "doctor_row", "module", "status"]
