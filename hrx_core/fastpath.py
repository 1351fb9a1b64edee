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

/* call a bound method with no arguments and drop its result: 0, or -1 with an exception */
static int call0(PyObject *fn)
{
    PyObject *r = PyObject_Vectorcall(fn, NULL, 0, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* fn(False) answered True: 1; False: 0; an exception: -1 */
static int try_acquire(PyObject *acquire)
{
    PyObject *no = Py_False;
    PyObject *got = PyObject_Vectorcall(acquire, &no, 1, NULL);
    if (got == NULL)
        return -1;
    int r = got == Py_True;
    Py_DECREF(got);
    return r;
}

/* release a lock keeping the exception that is set, if any: -1 when the release raised
   and nothing else was set */
static int release_keeping(PyObject *release)
{
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

/* attribute += delta on a Python int attribute */
static int add_to(PyObject *obj, PyObject *name, long delta, long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    long n = PyLong_AsLong(v);
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    PyObject *w = PyLong_FromLong(n + delta);
    if (w == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    if (out != NULL)
        *out = n;
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
        if (add_to(self->slot, s_unsignaled_ops, 1, &ops) < 0)
            goto unlock;
        if (ops + 1 >= self->auto_flush) {
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
    if (add_to(graph, s_launches, 1, NULL) < 0 || add_to(self->stats, s_graph_launches, 1, NULL) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    self->hits++;
    return result;
}

static int Replayer_traverse(Replayer *self, visitproc visit, void *arg)
{
    return visit_fields(&self->plan, &self->native, visit, arg);
}

static int Replayer_clear(Replayer *self)
{
    clear_fields(&self->plan, &self->native);
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

/* ---- Runtime resubmission (hrx_core.execution.runtime.Runtime.submit) ---------------- */

static PyObject *s_submit_plan, *s_gclosed, *s_fast_resubmit, *s_resubmit, *s_generation, *s_places,
    *s_encode_signaled, *s_forget_failures, *s_stream, *s_inherits_previous,
    *s_upstream, *s_room_taken, *s_sequence,
    *s_usequence, *s_add_uncounted, *s_observe, *s_quarantined, *s_releasing,
    *s_prove_idle, *s_give_room_back, *s_notice,
    *s_reservations, *s_slot_attr, *s_append, *s_replace;

typedef struct {
    PyObject_HEAD
    /* object fields, `runtime` to `lane_release` (see visit_fields) */
    PyObject *runtime, *plan, *inflight, *submission_type, *event_type, *perf_counter;
    PyObject *submit_acquire, *submit_release, *space_acquire, *space_release;
    PyObject *pending, *uncounted, *unstamped;
    PyObject *owners, *counters, *infos, *reservations;
    /* the graph's one region, its lane, the lane's stream and queue slot, the lane
       lock's methods */
    PyObject *region, *lane, *stream, *slot, *lane_acquire, *lane_release;
    int lazy, reads_own_writes;
    int observe;  /* RuntimeOptions.observe: Runtime._observe keeps the submission */
    long max_submissions;
    Py_ssize_t fold_after;  /* runtime._FOLD_AFTER */
    Py_ssize_t hits, misses;
} Submitter;

static PyObject *sub_miss(Submitter *self)
{
    self->misses++;
    Py_RETURN_NONE;
}

/* Encode one region as Runtime._encode's resubmission branch does: the event, or NULL */
static PyObject *encode_region(Submitter *self, PyObject *again)
{
    PyObject *previous = PyObject_GetAttr(self->region, s_last);
    if (previous == NULL)
        return NULL;
    PyObject *got = PyObject_Vectorcall(self->lane_acquire, NULL, 0, NULL);  /* blocking, as `with lane.lock` */
    if (got == NULL) {
        Py_DECREF(previous);
        return NULL;
    }
    Py_DECREF(got);
    PyObject *completion = NULL, *event = NULL;
    {
        PyObject *args[] = {self->region, self->lane, self->lazy ? Py_True : Py_False};
        completion = PyObject_VectorcallMethod(s_encode_signaled, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (completion == NULL)
            goto unlock;
    }
    event = PyObject_CallOneArg(self->event_type, completion);
    if (event == NULL)
        goto unlock;
    {
        PyObject *r = PyObject_CallMethodNoArgs(self->stream, s_forget_failures);
        if (r == NULL)
            Py_CLEAR(event);
        Py_XDECREF(r);
    }
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
        PyObject *x = PyObject_CallMethodOneArg(self->runtime, s_inherits_previous, previous);
        int inherit = x == NULL ? -1 : PyObject_IsTrue(x);
        Py_XDECREF(x);
        if (inherit < 0)
            goto fail;
        if (inherit) {
            PyObject *up = PyTuple_Pack(1, previous);
            if (up == NULL || PyObject_SetAttr(event, s_upstream, up) < 0) {
                Py_XDECREF(up);
                goto fail;
            }
            Py_DECREF(up);
        }
    }
    Py_DECREF(previous);
    previous = NULL;
    if (PyObject_SetAttr(self->region, s_last, event) < 0)
        goto fail;
    {
        /* the region's access entries name the new event (_Inflight.replace) */
        PyObject *places = PyObject_GetAttr(again, s_places);
        if (places == NULL)
            goto fail;
        PyObject *x = PyObject_CallMethodObjArgs(self->inflight, s_replace, places, event, NULL);
        Py_DECREF(places);
        if (x == NULL)
            goto fail;
        Py_DECREF(x);
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
    *again = PyObject_GetAttr(self->region, s_resubmit);
    if (*again == NULL)
        return -1;
    if (*again == Py_None)
        return 0;
    PyObject *gen = PyObject_GetAttr(self->inflight, s_generation);
    PyObject *mine = gen == NULL ? NULL : PyObject_GetAttr(*again, s_generation);
    int ok = mine == NULL ? -1 : PyObject_RichCompareBool(mine, gen, Py_EQ);
    Py_XDECREF(gen);
    Py_XDECREF(mine);
    if (ok == 1)
        ok = attr_is(*again, s_slot_attr, self->slot);
    return ok;
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
    int r;
    if ((r = attr_is(graph, s_submit_plan, self->plan)) != 1)
        return r < 0 ? NULL : sub_miss(self);
    if ((r = attr_true(graph, s_gclosed)) != 0)
        return r < 0 ? NULL : sub_miss(self);
    if ((r = attr_true(self->runtime, s_closed)) != 0)
        return r < 0 ? NULL : sub_miss(self);
    if ((r = attr_true(self->runtime, s_fast_resubmit)) != 1)
        return r < 0 ? NULL : sub_miss(self);
    if (PyObject_Length(self->unstamped) > 0) {  /* observe=True: notice what finished */
        if (call_method0(self->runtime, s_notice) < 0)
            return NULL;
    }
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
    /* room (max_submissions), as Runtime.submit takes it */
    if (call0(self->space_acquire) < 0)
        goto error;
    {
        PyObject *taken = PyObject_GetAttr(self->runtime, s_room_taken);
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
        if (release_keeping(self->space_release) < 0 || n < 0 || PyErr_Occurred())
            goto error;
        if (!room)
            goto miss;  /* the Python path settles or waits */
    }
    submitted = PyObject_CallNoArgs(self->perf_counter);
    if (submitted == NULL)
        goto error;
    {
        /* (a failure here left nothing accepted: Runtime._encode_failed has nothing to
           quarantine; the room is given back below, as in the Python path) */
        PyObject *event = encode_region(self, again);
        if (event == NULL)
            goto error;
        events = PyList_New(1);
        if (events == NULL) {
            Py_DECREF(event);
            goto error;
        }
        PyList_SET_ITEM(events, 0, event);
    }
    {
        PyObject *a[] = {self->runtime, graph, events, self->owners, submitted};
        submission = PyObject_Vectorcall(self->submission_type, a, 5, NULL);
        if (submission == NULL)
            goto error;
    }
    {
        PyObject *seq = PyObject_GetAttr(self->runtime, s_usequence);
        if (seq == NULL || PyObject_SetAttr(submission, s_sequence, seq) < 0) {
            Py_XDECREF(seq);
            goto error;
        }
        Py_DECREF(seq);
        if (add_to(self->runtime, s_usequence, 1, NULL) < 0)
            goto error;
    }
    if (call0(self->space_acquire) < 0)
        goto error;
    {
        int bad = add_to(self->runtime, s_room_taken, -1, NULL) < 0;
        if (!bad) {
            room_taken = 0;
            PyObject *x = PyObject_CallMethodOneArg(self->pending, s_append, submission);
            bad = x == NULL;
            Py_XDECREF(x);
        }
        if (release_keeping(self->space_release) < 0 || bad)
            goto error;
    }
    {
        /* the graph's counters, added when the statistics are read */
        PyObject *x = PyObject_CallMethodOneArg(self->uncounted, s_append, self->counters);
        if (x == NULL)
            goto error;
        Py_DECREF(x);
        if (PyObject_Length(self->uncounted) > self->fold_after && call_method0(self->runtime, s_add_uncounted) < 0)
            goto error;
    }
    locked = 0;
    if (release_keeping(self->submit_release) < 0)
        goto error;
    if (self->observe) {
        PyObject *x = PyObject_CallMethodObjArgs(self->runtime, s_observe, self->infos, events, submitted, NULL);
        if (x == NULL)
            goto error;
        Py_DECREF(x);
    }
    {
        int busy = attr_true(self->runtime, s_quarantined);
        if (busy == 0)
            busy = attr_true(self->runtime, s_releasing);
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
    return visit_fields(&self->runtime, &self->lane_release, visit, arg);
}

static int Submitter_clear(Submitter *self)
{
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
   (region, lane, lazy, reads_own_writes) */
static int Submitter_init(Submitter *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"runtime", "plan", "regions", "submission_type", "event_type", "perf_counter",
                            "observe", "max_submissions", "fold_after", NULL};
    PyObject *runtime, *plan, *regions, *submission_type, *event_type, *perf_counter;
    int observe;
    long max_submissions;
    Py_ssize_t fold_after;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!OOOpln", names, &runtime, &plan, &PyTuple_Type, &regions,
                                     &submission_type, &event_type, &perf_counter, &observe,
                                     &max_submissions, &fold_after))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(regions);
    if (n != 1 || max_submissions < 1) {
        PyErr_SetString(PyExc_ValueError, "Submitter: one region and max_submissions >= 1 expected");
        return -1;
    }
    Submitter_clear(self);
    {
        PyObject *region, *lane;
        int lazy, own;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(regions, 0), "OOpp", &region, &lane, &lazy, &own))
            return -1;
        Py_INCREF(region);
        self->region = region;
        Py_INCREF(lane);
        self->lane = lane;
        self->lazy = lazy;
        self->reads_own_writes = own;
        if ((self->stream = PyObject_GetAttr(lane, s_stream)) == NULL
            || (self->slot = PyObject_GetAttr(self->stream, s_slot_attr)) == NULL
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
    self->max_submissions = max_submissions;
    self->fold_after = fold_after;
    if ((self->inflight = PyObject_GetAttrString(runtime, "_inflight")) == NULL
        || (self->submit_acquire = get_method(runtime, "_submit_lock", "acquire")) == NULL
        || (self->submit_release = get_method(runtime, "_submit_lock", "release")) == NULL
        || (self->space_acquire = get_method(runtime, "_space_lock", "acquire")) == NULL
        || (self->space_release = get_method(runtime, "_space_lock", "release")) == NULL
        || (self->pending = PyObject_GetAttrString(runtime, "_pending")) == NULL
        || (self->uncounted = PyObject_GetAttrString(runtime, "_uncounted")) == NULL
        || (self->unstamped = PyObject_GetAttrString(runtime, "_unstamped")) == NULL
        || (self->reservations = PyObject_GetAttrString(runtime, "_reservations")) == NULL
        || (self->owners = PyObject_GetAttrString(plan, "owners")) == NULL
        || (self->counters = PyObject_GetAttrString(plan, "counters")) == NULL
        || (self->infos = PyObject_GetAttrString(plan, "infos")) == NULL)
        goto fail;
    self->hits = self->misses = 0;
    return 0;
fail:
    Submitter_clear(self);
    return -1;
}

static PyMemberDef Submitter_members[] = {
    {"hits", T_PYSSIZET, offsetof(Submitter, hits), READONLY, "submissions this submitter made"},
    {"misses", T_PYSSIZET, offsetof(Submitter, misses), READONLY, "calls it left to the Python path"},
    {"plan", T_OBJECT, offsetof(Submitter, plan), READONLY, "the submit plan it was made for"},
    {NULL}
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
    INTERN(s_submit_plan, "_submit_plan");
    INTERN(s_gclosed, "_closed");
    INTERN(s_fast_resubmit, "fast_resubmit");
    INTERN(s_resubmit, "resubmit");
    INTERN(s_generation, "generation");
    INTERN(s_places, "places");
    INTERN(s_encode_signaled, "encode_signaled");
    INTERN(s_forget_failures, "_forget_failures");
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
    INTERN(s_reservations, "_reservations");
    INTERN(s_slot_attr, "slot");
    INTERN(s_append, "append");
    INTERN(s_replace, "replace");
#undef INTERN
    if (PyType_Ready(&ReplayerType) < 0)
        return NULL;
    if (PyType_Ready(&SubmitterType) < 0)
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
    Py_INCREF(&SubmitterType);
    if (PyModule_AddObject(m, "Submitter", (PyObject *)&SubmitterType) < 0) {
        Py_DECREF(&SubmitterType);
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
