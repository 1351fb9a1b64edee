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

/* An engine's C replay entry: 0 launched; -1 nothing done, take the Python path;
   a positive code: the native failure, with info[0] = step and info[1] = node. */
typedef int (*hrx_fast_fn)(void *arg, long long *info);

static PyObject *s_bound, *s_items, *s_apply_patches, *s_rebound_attr, *s_rebind_memo, *s_refs, *s_holds;
static PyObject *s_plan, *s_rebound, *s_closed, *s_epoch, *s_value,
    *s_unative, *s_needs_submit, *s_submit, *s_pending_value, *s_unsignaled_ops,
    *s_flush_locked, *s_last_launch, *s_values, *s_ulast, *s_done, *s_last,
    *s_release_retired, *s_launches, *s_graph_launches, *s_acquire, *s_release;

typedef struct {
    PyObject_HEAD
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
    PyObject *native;        /* slot._native (made once per queue) */
    int needs_submit;        /* native.needs_submit */
    hrx_fast_fn fn;
    void *arg;
    int owned;
    long auto_flush;
    Py_ssize_t hits, misses;
} Replayer;

static int attr_is(PyObject *obj, PyObject *name, PyObject *expected)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int same = v == expected;
    Py_DECREF(v);
    return same;
}

static int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int t = v == Py_True ? 1 : (v == Py_False || v == Py_None ? 0 : PyObject_IsTrue(v));
    Py_DECREF(v);
    return t;
}

static PyObject *miss(Replayer *self)
{
    self->misses++;
    Py_RETURN_NONE;
}

static int increment(PyObject *obj, PyObject *name, long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    long n = PyLong_AsLong(v);
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    PyObject *w = PyLong_FromLong(n + 1);
    if (w == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    if (out != NULL)
        *out = n + 1;
    return rc;
}

/* 1 when the graph's launch record was validated at the current EPOCH, 0 if not, -1 error */
static int record_current(Replayer *self)
{
    PyObject *mine = PyObject_GetAttr(self->record, s_epoch);
    if (mine == NULL)
        return -1;
    PyObject *now = PyObject_GetAttr(self->epoch, s_value);
    if (now == NULL) {
        Py_DECREF(mine);
        return -1;
    }
    int r = PyObject_RichCompareBool(mine, now, Py_EQ);
    Py_DECREF(mine);
    Py_DECREF(now);
    return r;
}

static PyObject *launch_locked(Replayer *self, PyObject *graph, PyObject *rebind);

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
    int r;
    /* (the graph drops its replayer with its plan and when it closes; a new native
       graph comes with a new plan) */
    if ((r = attr_is(graph, s_plan, self->plan)) != 1)
        return r < 0 ? NULL : miss(self);
    if ((r = attr_is(graph, s_rebound, Py_False)) != 1)
        return r < 0 ? NULL : miss(self);
    if ((r = record_current(self)) != 1)
        return r < 0 ? NULL : miss(self);
    /* (an unloaded kernel moved the epoch, and the graph's record check refuses it:
       a current record means every kernel is loaded) */
    return launch_locked(self, graph, NULL);
}

/* Apply a rebind record's inputs (under the queue's lock), as Graph._apply_record
   does: 1 applied, 0 the Python path must do it (some may be staged already: it
   starts from what the graph's bindings say now), -1 an exception. */
static int apply_rebind(Replayer *self, PyObject *graph, PyObject *rebind)
{
    PyObject *bound = PyObject_GetAttr(graph, s_bound);
    if (bound == NULL)
        return -1;
    PyObject *items = PyObject_GetAttr(rebind, s_items);
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
        PyObject *rebound = PyObject_GetAttr(rebind, s_rebound_attr);
        if (rebound == NULL || PyObject_SetAttr(graph, s_rebound, rebound) < 0)
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
    PyObject *graph = args[0], *inputs = args[1];
    if (!PyDict_CheckExact(inputs) || PyDict_GET_SIZE(inputs) == 0)
        return miss(self);
    int r;
    if ((r = attr_is(graph, s_plan, self->plan)) != 1)
        return r < 0 ? NULL : miss(self);
    Py_ssize_t n = PyDict_GET_SIZE(inputs), pos = 0, i = 0;
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
    PyObject *memo = PyObject_GetAttr(graph, s_rebind_memo);
    if (memo == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *rebind = PyDict_Check(memo) ? PyDict_GetItemWithError(memo, key) : NULL;
    Py_XINCREF(rebind);
    Py_DECREF(memo);
    Py_DECREF(key);
    if (rebind == NULL)
        return PyErr_Occurred() ? NULL : miss(self);
    PyObject *result = NULL;
    /* the record is current: EPOCH stands and each value is the object it was made from */
    {
        PyObject *mine = PyObject_GetAttr(rebind, s_epoch);
        PyObject *now = mine == NULL ? NULL : PyObject_GetAttr(self->epoch, s_value);
        r = now == NULL ? -1 : PyObject_RichCompareBool(mine, now, Py_EQ);
        Py_XDECREF(mine);
        Py_XDECREF(now);
        if (r != 1)
            goto out_miss;
    }
    {
        PyObject *refs = PyObject_GetAttr(rebind, s_refs);
        if (refs == NULL) {
            r = -1;
            goto out_miss;
        }
        r = PyTuple_Check(refs) && PyTuple_GET_SIZE(refs) == n;
        pos = 0;
        i = 0;
        while (r == 1 && PyDict_Next(inputs, &pos, &name, &value)) {
            PyObject *obj = PyObject_CallNoArgs(PyTuple_GET_ITEM(refs, i++));
            if (obj == NULL) {
                r = -1;
                break;
            }
            r = obj == value;
            Py_DECREF(obj);
        }
        Py_DECREF(refs);
        if (r != 1)
            goto out_miss;
    }
    if ((r = record_current(self)) != 1)
        goto out_miss;
    result = launch_locked(self, graph, rebind);
    Py_DECREF(rebind);
    return result;
out_miss:
    Py_DECREF(rebind);
    return r < 0 ? NULL : miss(self);
}

/* Take the queue's lock (None: busy, the Python path waits), then (a rebind record's
   inputs applied first) launch, commit and answer the completion. */
static PyObject *launch_locked(Replayer *self, PyObject *graph, PyObject *rebind)
{
    int r;
    PyObject *no = Py_False;
    PyObject *got = PyObject_Vectorcall(self->acquire, &no, 1, NULL);
    if (got == NULL)
        return NULL;
    int locked = got == Py_True;
    Py_DECREF(got);
    if (!locked)
        return miss(self);  /* another thread holds the queue: the Python path waits for it */

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
    value = PyObject_GetAttr(self->slot, s_pending_value);
    if (value == NULL)
        goto unlock;
    if (self->owned) {  /* what close() defers behind */
        tmp = PyObject_GetAttr(graph, s_last_launch);
        if (tmp == NULL || PyObject_SetItem(tmp, self->slot, value) < 0)
            goto unlock;
        Py_CLEAR(tmp);
    }
    {
        long ops;
        if (increment(self->slot, s_unsignaled_ops, &ops) < 0)
            goto unlock;
        if (ops >= self->auto_flush) {
            done = PyObject_CallMethodNoArgs(self->slot, s_flush_locked);
            if (done == NULL)
                goto unlock;
        }
    }
    /* launches between two signals share the stream's latest completion */
    completion = PyObject_GetAttr(self->stream, s_ulast);
    if (completion == NULL)
        goto unlock;
    r = 0;
    if (completion != Py_None) {
        PyObject *cv = PyObject_GetAttr(completion, s_value);
        if (cv == NULL)
            goto unlock;
        r = PyObject_RichCompareBool(cv, value, Py_EQ);
        Py_DECREF(cv);
        if (r < 0)
            goto unlock;
        if (r == 1) {
            PyObject *values = PyObject_GetAttr(self->stream, s_values);
            if (values == NULL)
                goto unlock;
            r = 0;
            if (PyList_Check(values) && PyList_GET_SIZE(values) > 0)
                r = PyObject_RichCompareBool(PyList_GET_ITEM(values, PyList_GET_SIZE(values) - 1), value, Py_EQ);
            Py_DECREF(values);
            if (r < 0)
                goto unlock;
        }
    }
    if (r != 1) {
        Py_DECREF(completion);
        completion = PyObject_CallMethodOneArg(self->stream, s_done, value);
        if (completion == NULL)
            goto unlock;
    }
    tmp = PyObject_GetAttr(self->record, s_last);
    if (tmp == NULL || PyObject_SetItem(tmp, self->slot, completion) < 0)
        goto unlock;
    Py_CLEAR(tmp);
    if (rebind != NULL) {  /* the record holds what it rebinds: its last launch here */
        tmp = PyObject_GetAttr(rebind, s_holds);
        if (tmp == NULL)
            goto unlock;
        if (tmp != Py_None) {
            PyObject *last = PyObject_GetAttr(tmp, s_last);
            if (last == NULL || PyObject_SetItem(last, self->slot, completion) < 0) {
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
    {
        /* release the lock whatever happened, keeping an exception that is set */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *rel = PyObject_Vectorcall(self->release, NULL, 0, NULL);
        if (rel == NULL) {
            if (et != NULL)
                PyErr_Clear();
            else
                Py_CLEAR(result);
        }
        Py_XDECREF(rel);
        if (et != NULL)
            PyErr_Restore(et, ev, tb);
    }
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
    if (increment(graph, s_launches, NULL) < 0 || increment(self->stats, s_graph_launches, NULL) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    self->hits++;
    return result;
}

static int Replayer_traverse(Replayer *self, visitproc visit, void *arg)
{
    Py_VISIT(self->plan);
    Py_VISIT(self->native_graph);
    Py_VISIT(self->record);
    Py_VISIT(self->epoch);
    Py_VISIT(self->slot);
    Py_VISIT(self->lock);
    Py_VISIT(self->stream);
    Py_VISIT(self->stats);
    Py_VISIT(self->launch_py);
    Py_VISIT(self->on_failure);
    Py_VISIT(self->keep);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->native);
    return 0;
}

static int Replayer_clear(Replayer *self)
{
    Py_CLEAR(self->plan);
    Py_CLEAR(self->native_graph);
    Py_CLEAR(self->record);
    Py_CLEAR(self->epoch);
    Py_CLEAR(self->slot);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->stats);
    Py_CLEAR(self->launch_py);
    Py_CLEAR(self->on_failure);
    Py_CLEAR(self->keep);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->native);
    self->fn = NULL;
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
                            NULL};
    PyObject *plan, *native_graph, *record, *epoch, *slot, *stream, *stats, *launch_py, *on_failure,
        *keep;
    unsigned long long entry, argument;
    int owned;
    long auto_flush;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOKKOpl", names, &plan, &native_graph,
                                     &record, &epoch, &slot, &stream, &stats, &launch_py, &on_failure,
                                     &entry, &argument, &keep, &owned, &auto_flush))
        return -1;
    if (auto_flush < 1) {
        PyErr_SetString(PyExc_ValueError, "auto_flush: expected at least 1");
        return -1;
    }
    PyObject *lock = PyObject_GetAttrString(slot, "lock");
    if (lock == NULL)
        return -1;
    PyObject *acquire = PyObject_GetAttr(lock, s_acquire);
    PyObject *release = PyObject_GetAttr(lock, s_release);
    PyObject *native = PyObject_GetAttr(slot, s_unative);
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

static PyMethodDef Replayer_methods[] = {
    {"rebind", (PyCFunction)(void (*)(void))Replayer_rebind, METH_FASTCALL,
     "rebind(graph, inputs): a replay with a mapping replayed before, or None (nothing done)"},
    {NULL}
};

static PyGetSetDef Replayer_getset[] = {
    {"compiled_entry", (getter)Replayer_compiled_entry, NULL, "whether the engine launches through C", NULL},
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

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, NULL, "HRX's compiled replay path.", -1, NULL};

static PyObject *hrx_module_create(const char *name)
{
    module_def.m_name = name;
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_plan, "_plan");
    INTERN(s_bound, "_bound");
    INTERN(s_items, "items");
    INTERN(s_apply_patches, "apply_patches");
    INTERN(s_rebound_attr, "rebound");
    INTERN(s_rebind_memo, "_rebind_memo");
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
#undef INTERN
    if (PyType_Ready(&ReplayerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReplayerType);
    if (PyModule_AddObject(m, "Replayer", (PyObject *)&ReplayerType) < 0) {
        Py_DECREF(&ReplayerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
"""


def module() -> hotpath.HotModule:
    """The compiled replay module, or the reason there is none (built on first use)."""
    return hotpath.load_extension(NAME, SOURCE)


def status() -> dict[str, Any]:
    """``{"compiled": bool, "reason": str, "path": str | None}`` (builds on first use)."""
    return module().status


def doctor_row() -> tuple[str, str, str]:
    """The ``hrx doctor`` row: ``("core", "compiled replay", "compiled, ..." | "fallback (Python): why")``."""
    try:
        state = status()
    except Exception as exc:  # noqa: BLE001 - doctor reports, never raises
        return ("core", "compiled replay", f"fallback (Python): {type(exc).__name__}: {exc}")
    if state["compiled"]:
        return ("core", "compiled replay", f"compiled, {state['reason']} ({state['path']})")
    return ("core", "compiled replay", f"fallback (Python): {state['reason']}")


__all__ = ["NAME", "SOURCE", "doctor_row", "module", "status"]
