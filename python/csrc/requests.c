/*
 * The op's requests from Python objects (requests.h): read the tensors (tensors.c), apply the one
 * copy of the layout rules (store_args.c, transfer_args.c), run the library, or the plain host
 * loop when every tensor is on the CPU (host_copy.c); raise what went wrong, naming the argument.
 */
#include "requests.h"

#include <stdio.h>
#include <string.h>

#include "door.h"
#include "dlpack_view.h"
#include "host_copy.h"
#include "kvjit.h"
#include "store_args.h"
#include "tensors.h"
#include "transfer_args.h"

PyObject *door_error_factory;

static void raise_status(kvjit_status s) {
  PyObject *exc =
      PyObject_CallFunction(door_error_factory, "iss", (int)s, kvjit_door.status_name(s), kvjit_door.last_error());
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
}

int door_ready(void) {
  if (kvjit_door.ctx != NULL) return 1;
  PyErr_SetString(PyExc_RuntimeError, "kvjit._C: used before init()");
  return 0;
}

void kvjit_door_with_gil(void (*fn)(void *), void *arg) {
  if (!Py_IsInitialized()) {
    fn(arg);
    return;
  }
  PyGILState_STATE held = PyGILState_Ensure();
  fn(arg);
  PyGILState_Release(held);
}

int door_int_arg(PyObject *obj, const char *name, int64_t *out) {
  if (!PyLong_Check(obj) || PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s: expected an int, got %s", name, Py_TYPE(obj)->tp_name);
    return -1;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (overflow) {
    PyErr_Format(PyExc_ValueError, "%s: %R does not fit in 64 bits", name, obj);
    return -1;
  }
  *out = (int64_t)v;
  return 0;
}

int door_stream_and_context(PyObject *stream, PyObject *context, door_extra *x) {
  x->has_stream = stream != NULL && stream != Py_None;
  x->stream = NULL;
  x->ctx = kvjit_door.ctx;
  if (x->has_stream) {
    x->stream = PyLong_AsVoidPtr(stream);
    if (x->stream == NULL && PyErr_Occurred()) return -1;
  }
  if (context != NULL && context != Py_None) {
    x->ctx = PyLong_AsVoidPtr(context);
    if (x->ctx == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "context: NULL handle");
      return -1;
    }
  }
  return 0;
}

static void raise_refusal(kvjit_request_error kind, const char *msg) {
  PyErr_SetString(kind == KVJIT_REQUEST_TYPE_ERROR ? PyExc_TypeError : PyExc_ValueError, msg);
}

/* None after a call that returned @p s, or NULL with the kvjit.Error set. */
static PyObject *call_result(kvjit_status s) {
  if (s != KVJIT_OK) {
    raise_status(s);
    return NULL;
  }
  Py_INCREF(Py_None);
  return Py_None;
}

/* ---- store_kv_cache ------------------------------------------------------------------------- */

static const char *const kStoreTensorNames[7] = {"k", "v", "k_cache", "v_cache", "indices", "k_scale", "v_scale"};

/* The store of @p objs (k, v, k_cache, v_cache, indices, k_scale, v_scale; None: absent) with the
 * op's scalars (num_slots, skip_slot, split, pdl, cache_dtype, layout). */
PyObject *door_store_run(PyObject *const objs[7], const int64_t scalars[6], const door_extra *x,
                           enum door_mode mode) {
  if (!door_ready()) return NULL;
  static const int optional[7] = {0, 1, 0, 1, 0, 1, 1};
  kvjit_door_tensor t[7];
  kvjit_store_request req;
  kvjit_tensor_view *views[7] = {&req.k, &req.v, &req.k_cache, &req.v_cache, &req.indices, &req.k_scale,
                                 &req.v_scale};
  PyObject *result = NULL;
  int n_kept = 0;
  if (kvjit_door_read_all(objs, kStoreTensorNames, optional, 7, views, t, &n_kept)) goto done;
  req.num_slots = scalars[0];
  req.skip_slot = scalars[1];
  req.split = scalars[2];
  req.pdl = scalars[3];
  req.cache_dtype = scalars[4];
  req.layout = scalars[5];
  void *stream = x->stream;
  kvjit_context *ctx = x->ctx;
  char msg[512];
  kvjit_store_kv_args a;
  kvjit_store_layouts layouts; /* what a's layout pointers point at */
  /* On CUDA, or all on the CPU (a plain loop there; the rules are the same). */
  kvjit_request_error refused = kvjit_store_request_on_device(&req, KVJIT_DL_CUDA, "CUDA", NULL, 0);
  int on_cuda = !refused;
  if (refused && mode != MODE_ARGS && kvjit_store_request_on_device(&req, KVJIT_DL_CPU, "CPU", NULL, 0)) {
    kvjit_store_request_on_device(&req, KVJIT_DL_CUDA, "CUDA", msg, sizeof msg); /* worded only when refused */
    raise_refusal(refused, msg);
    goto done;
  }
  if (mode == MODE_ARGS) memset(&layouts, 0, sizeof layouts); /* returned whole, flat or not */
  if ((refused = kvjit_store_request_args(&req, &a, &layouts, msg, sizeof msg))) {
    raise_refusal(refused, msg);
    goto done;
  }
  if (!on_cuda && a.batch > 0 && mode != MODE_ARGS) {
    if (a.k_cache_layout != NULL || a.v_cache_layout != NULL) {
      /* The host loop addresses flat rows only; the layout's address rule lives in the library. */
      PyErr_Format(PyExc_ValueError, "%s: a strided cache (pages, or a row with strides) is stored on CUDA tensors "
                   "only; on the CPU pass flat caches", a.k_cache_layout != NULL ? "k_cache" : "v_cache");
      goto done;
    }
    if (mode == MODE_CALL) kvjit_host_store(&a);
    result = call_result(KVJIT_OK);
    goto done;
  }
  if (!x->has_stream && on_cuda && kvjit_door_default_stream(&t[0], req.k.device_index, &stream)) goto done;
  a.stream = stream;
  if (mode == MODE_PREPARE && x->batch != NULL && x->batch != Py_None && door_int_arg(x->batch, "batch", &a.batch))
    goto done;
  if (mode == MODE_ARGS) {
    /* The args, then the K and V layouts their pointers point at (pointers mean nothing outside). */
    char raw[sizeof a + sizeof layouts];
    memcpy(raw, &a, sizeof a);
    memcpy(raw + sizeof a, &layouts, sizeof layouts);
    result = PyBytes_FromStringAndSize(raw, sizeof raw);
    goto done;
  }
  kvjit_door_guard guard;
  if (kvjit_door_enter(on_cuda ? req.k.device_index : -1, 0, &guard, msg, sizeof msg)) {
    PyErr_SetString(PyExc_RuntimeError, msg);
    goto done;
  }
  kvjit_status s;
  if (mode == MODE_PREPARE) {
    PyThreadState *saved = PyEval_SaveThread(); /* a miss compiles */
    s = kvjit_door.store_prepare(ctx, &a);
    PyEval_RestoreThread(saved);
  } else {
    /* A loaded variant: a microsecond of host work, less than the GIL's round trip costs. */
    s = kvjit_door.store(ctx, &a);
  }
  kvjit_door_leave(&guard);
  result = call_result(s);
done:
  for (int i = 0; i < n_kept; i++) kvjit_door_release(&t[i]);
  return result;
}

/* ---- transfer_kv ---------------------------------------------------------------------------- */

/* The op's tensors, in the order the request's views are read (kTransferArg: where each is). */
enum { TRANSFER_TENSORS = 8 };
static const char *const kTransferTensorNames[TRANSFER_TENSORS] = {"src_k",       "src_v",       "dst_k",   "dst_v",
                                                                   "src_indices", "dst_indices", "k_scale", "v_scale"};
static const int kTransferArg[TRANSFER_TENSORS] = {0, 1, 2, 3, 4, 5, 11, 12};

/* The transfer of @p args (the op's 14 arguments, in order; only the tensors are read here) with
 * the op's scalars (src_num_slots, dst_num_slots, split, pdl, row_elements, max_ctas). */
PyObject *door_transfer_run(PyObject *const *args, const int64_t scalars[6], const door_extra *x,
                              enum door_mode mode) {
  if (!door_ready()) return NULL;
  static const int optional[TRANSFER_TENSORS] = {0, 1, 0, 1, 0, 0, 1, 1};
  kvjit_door_tensor t[TRANSFER_TENSORS];
  kvjit_transfer_request req;
  kvjit_tensor_view *views[TRANSFER_TENSORS] = {&req.src_k,       &req.src_v,       &req.dst_k,   &req.dst_v,
                                                &req.src_indices, &req.dst_indices, &req.k_scale, &req.v_scale};
  PyObject *result = NULL;
  PyObject *objs[TRANSFER_TENSORS];
  for (int i = 0; i < TRANSFER_TENSORS; i++) objs[i] = args[kTransferArg[i]];
  int n_kept = 0;
  if (kvjit_door_read_all(objs, kTransferTensorNames, optional, TRANSFER_TENSORS, views, t, &n_kept)) goto done;
  req.src_num_slots = scalars[0];
  req.dst_num_slots = scalars[1];
  req.split = scalars[2];
  req.pdl = scalars[3];
  req.row_elements = scalars[4];
  req.max_ctas = scalars[5];
  void *stream = x->stream;
  kvjit_context *ctx = x->ctx;
  char msg[512];
  kvjit_transfer_kv_args a;
  kvjit_transfer_layouts layouts; /* what a's layout pointers point at */
  if (mode == MODE_ARGS) memset(&layouts, 0, sizeof layouts); /* returned whole, flat or not */
  int32_t device = -1;
  kvjit_request_error refused = kvjit_transfer_request_args(&req, KVJIT_DL_CUDA, &a, &layouts, &device, msg,
                                                            sizeof msg);
  if (refused) {
    raise_refusal(refused, msg);
    goto done;
  }
  int first = -1, host = 0; /* the first device tensor (its framework's stream is the default); any host one */
  for (int i = TRANSFER_TENSORS - 1; i >= 0; i--) {
    if (!views[i]->present) continue;
    if (views[i]->device_type == KVJIT_DL_CUDA) first = i;
    else host = 1;
  }
  if (!x->has_stream && first >= 0 && kvjit_door_default_stream(&t[first], views[first]->device_index, &stream))
    goto done;
  a.stream = stream;
  if (mode == MODE_PREPARE && x->batch != NULL && x->batch != Py_None && door_int_arg(x->batch, "batch", &a.batch))
    goto done;
  if (mode == MODE_ARGS) {
    /* The args, then the four layouts their pointers point at (pointers mean nothing outside). */
    char raw[sizeof a + sizeof layouts];
    memcpy(raw, &a, sizeof a);
    memcpy(raw + sizeof a, &layouts, sizeof layouts);
    result = PyBytes_FromStringAndSize(raw, sizeof raw);
    goto done;
  }
  if (first < 0 && a.batch > 0 && (a.src_k_layout || a.dst_k_layout || a.src_v_layout || a.dst_v_layout)) {
    /* The host loop moves flat rows only; the layout's address rule lives in the library. */
    PyErr_SetString(PyExc_ValueError, "src_k: a strided cache (pages, or a row with strides) moves with CUDA "
                    "tensors among the arguments only; between CPU tensors pass flat caches");
    goto done;
  }
  if (first < 0 && a.batch > 0 && a.dst_dtype != KVJIT_DTYPE_BYTES && mode != MODE_ARGS) {
    PyErr_SetString(PyExc_ValueError, "src_k: converting on the way runs on the GPU: no CUDA tensor among the "
                    "arguments");
    goto done;
  }
  if (first < 0 && a.batch > 0 && mode != MODE_ARGS) {
    /* Every tensor on the host: a plain loop there (no GPU reads them, so no pinning needed). */
    if (mode == MODE_CALL && kvjit_host_transfer(&a, msg, sizeof msg))
      PyErr_SetString(PyExc_MemoryError, msg);
    else
      result = call_result(KVJIT_OK);
    goto done;
  }
  kvjit_door_guard guard;
  if (kvjit_door_enter(device, host, &guard, msg, sizeof msg)) {
    PyErr_SetString(PyExc_RuntimeError, msg);
    goto done;
  }
  /* Host memory the GPU reads or writes must be pinned: pageable memory would fault there. */
  for (int i = 0; i < TRANSFER_TENSORS && mode == MODE_CALL && a.batch > 0; i++) {
    if (!views[i]->present || views[i]->device_type == KVJIT_DL_CUDA) continue;
    if (kvjit_door_check_pinned(kTransferTensorNames[i], views[i], msg, sizeof msg)) {
      kvjit_door_leave(&guard);
      PyErr_SetString(PyExc_ValueError, msg);
      goto done;
    }
  }
  kvjit_status s;
  if (mode == MODE_PREPARE) {
    PyThreadState *saved = PyEval_SaveThread();
    s = kvjit_door.transfer_prepare(ctx, &a);
    PyEval_RestoreThread(saved);
  } else {
    s = kvjit_door.transfer(ctx, &a);
  }
  kvjit_door_leave(&guard);
  result = call_result(s);
done:
  for (int i = 0; i < n_kept; i++) kvjit_door_release(&t[i]);
  return result;
}

/* ---- the op-argument calls ------------------------------------------------------------------- */

/* The store from the op's argument list: its tensors are at 0-4, 9 and 10. */
static PyObject *store_op_args(PyObject *const *args, const int64_t scalars[6], const door_extra *x,
                               enum door_mode mode) {
  PyObject *const objs[7] = {args[0], args[1], args[2], args[3], args[4], args[9], args[10]};
  return door_store_run(objs, scalars, x, mode);
}

/* An op's argument list: its length, where its six scalars are, who runs it. */
typedef struct op_call {
  const char *usage;
  Py_ssize_t num_args;
  int scalar_at[6];
  const char *scalar_names[6];
  PyObject *(*run)(PyObject *const *args, const int64_t scalars[6], const door_extra *x, enum door_mode mode);
} op_call;

static const op_call kStoreCall = {
    "store_kv_cache_op takes the op's 13 arguments, then stream, context, batch", 13, {5, 6, 7, 8, 11, 12},
    {"num_slots", "skip_slot", "split", "pdl", "cache_dtype", "layout"}, store_op_args};
static const op_call kTransferCall = {
    "transfer_kv_op takes the op's 14 arguments, then stream, context, batch", 14, {6, 7, 8, 9, 10, 13},
    {"src_num_slots", "dst_num_slots", "split", "pdl", "row_elements", "max_ctas"}, door_transfer_run};

/* The op's arguments, then stream, context, batch (each may be left out). */
static PyObject *call_op(const op_call *op, PyObject *const *args, Py_ssize_t nargs, enum door_mode mode) {
  Py_ssize_t n = op->num_args;
  if (nargs < n || nargs > n + 3) {
    PyErr_SetString(PyExc_TypeError, op->usage);
    return NULL;
  }
  int64_t scalars[6];
  door_extra x = {0, NULL, NULL, nargs > n + 2 ? args[n + 2] : NULL};
  for (int i = 0; i < 6; i++)
    if (door_int_arg(args[op->scalar_at[i]], op->scalar_names[i], &scalars[i])) return NULL;
  if (door_stream_and_context(nargs > n ? args[n] : NULL, nargs > n + 1 ? args[n + 1] : NULL, &x)) return NULL;
  return op->run(args, scalars, &x, mode);
}

#define OP_ENTRY(name, op, mode)                                               \
  PyObject *name(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { \
    (void)self;                                                                \
    return call_op(&op, args, nargs, mode);                                    \
  }
OP_ENTRY(door_store_op, kStoreCall, MODE_CALL)
OP_ENTRY(door_store_prepare, kStoreCall, MODE_PREPARE)
OP_ENTRY(door_store_args, kStoreCall, MODE_ARGS)
OP_ENTRY(door_transfer_op, kTransferCall, MODE_CALL)
OP_ENTRY(door_transfer_prepare, kTransferCall, MODE_PREPARE)
OP_ENTRY(door_transfer_args, kTransferCall, MODE_ARGS)
