/*
 * kvjit._C: the one native door from Python into kvjit's ops.
 *
 * Any tensor a framework hands over -- a torch.Tensor through PyTorch's DLPack exchange API
 * (no allocation, torch's current stream), anything with __cuda_array_interface__ (CuPy,
 * Numba) or __dlpack__ (JAX, CuPy, NumPy) -- becomes a kvjit_tensor_view (tensors.c), then the
 * one copy of the layout rules (store_args.c, transfer_args.c) makes the library's request, and
 * the library runs it. Exceptions are raised here, naming the argument: ValueError / TypeError
 * for what the rules refuse, kvjit.Error (built by the package's factory) for library failures.
 * The torch op kernels (op.cpp, op_transfer.cpp) live in this module too and call the same rules.
 *
 * It links nothing: libkvjit's and libcuda's entry points are resolved (door.c) from the copies
 * the process already loaded.
 *
 * kvjit.store_kv_cache and kvjit.transfer_kv are this module's store_kv_cache and transfer_kv
 * themselves (keywords.c binds their arguments): a call costs no Python frame. Keywords left to
 * their defaults, or in the spellings the package maps without normalising, cost nothing; any
 * other goes through the package's one normaliser (python/kvjit/_ops.py), once. The *_op,
 * *_prepare and *_args calls take the op's arguments as they are: ints, None for an absent
 * tensor, stream and context int handles or None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "docs.h"
#include "door.h"
#include "dlpack_view.h"
#include "host_copy.h"
#include "keywords.h"
#include "kvjit.h"
#include "store_args.h"
#include "tensors.h"
#include "torch_op.h"
#include "transfer_args.h"

/* Set once by init() under the GIL. */
static PyObject *g_error; /* error(status, name, message) -> the kvjit.Error to raise */

static void raise_status(kvjit_status s) {
  PyObject *exc = PyObject_CallFunction(g_error, "iss", (int)s, kvjit_door.status_name(s), kvjit_door.last_error());
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
}

static int ready(void) {
  if (kvjit_door.ctx != NULL) return 1;
  PyErr_SetString(PyExc_RuntimeError, "kvjit._C: used before init()");
  return 0;
}

/* An int argument of the op (int64); TypeError naming it otherwise. */
static int int_arg(PyObject *obj, const char *name, int64_t *out) {
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

/* What a call gives beside the op's arguments: stream, context, batch (prepare). */
typedef struct door_extra {
  int has_stream;
  void *stream;
  kvjit_context *ctx;
  PyObject *batch; /* prepare's batch, or NULL / None */
} door_extra;

/* stream (None or an int CUstream handle) and context (None or an int kvjit_context handle). */
static int stream_and_context(PyObject *stream, PyObject *context, door_extra *x) {
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

enum door_mode { MODE_CALL, MODE_PREPARE, MODE_ARGS };

static const char *const kStoreTensorNames[7] = {"k", "v", "k_cache", "v_cache", "indices", "k_scale", "v_scale"};

/* The store of @p objs (k, v, k_cache, v_cache, indices, k_scale, v_scale; None: absent) with the
 * op's scalars (num_slots, skip_slot, split, pdl, cache_dtype, layout). */
static PyObject *store_run(PyObject *const objs[7], const int64_t scalars[6], const door_extra *x,
                           enum door_mode mode) {
  if (!ready()) return NULL;
  static const int optional[7] = {0, 1, 0, 1, 0, 1, 1};
  kvjit_door_tensor t[7];
  kvjit_store_request req;
  kvjit_tensor_view *views[7] = {&req.k, &req.v, &req.k_cache, &req.v_cache, &req.indices, &req.k_scale,
                                 &req.v_scale};
  PyObject *result = NULL;
  int n_read = 0;
  for (; n_read < 7; n_read++) {
    if (kvjit_door_read(objs[n_read], kStoreTensorNames[n_read], optional[n_read], &t[n_read])) goto done;
    *views[n_read] = t[n_read].buf.view;
  }
  kvjit_door_fill_devices(views, 7);
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
  if (!x->has_stream && on_cuda && kvjit_door_default_stream(&t[0], &stream)) goto done;
  a.stream = stream;
  if (mode == MODE_PREPARE && x->batch != NULL && x->batch != Py_None && int_arg(x->batch, "batch", &a.batch))
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
  for (int i = 0; i < n_read; i++) kvjit_door_release(&t[i]);
  return result;
}

/* store_kv_cache_op(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale,
 * v_scale, cache_dtype, layout[, stream[, context[, batch]]]): the op's arguments, then the door's. */
static PyObject *store(PyObject *const *args, Py_ssize_t nargs, enum door_mode mode) {
  if (nargs < 13 || nargs > 16) {
    PyErr_SetString(PyExc_TypeError, "store_kv_cache_op takes the op's 13 arguments, then stream, context, batch");
    return NULL;
  }
  PyObject *const objs[7] = {args[0], args[1], args[2], args[3], args[4], args[9], args[10]};
  int64_t scalars[6];
  door_extra x = {0, NULL, NULL, nargs > 15 ? args[15] : NULL};
  if (int_arg(args[5], "num_slots", &scalars[0]) || int_arg(args[6], "skip_slot", &scalars[1]) ||
      int_arg(args[7], "split", &scalars[2]) || int_arg(args[8], "pdl", &scalars[3]) ||
      int_arg(args[11], "cache_dtype", &scalars[4]) || int_arg(args[12], "layout", &scalars[5]) ||
      stream_and_context(nargs > 13 ? args[13] : NULL, nargs > 14 ? args[14] : NULL, &x))
    return NULL;
  return store_run(objs, scalars, &x, mode);
}

static PyObject *c_store(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return store(args, nargs, MODE_CALL);
}
static PyObject *c_store_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return store(args, nargs, MODE_PREPARE);
}
static PyObject *c_store_args(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return store(args, nargs, MODE_ARGS);
}

/* ---- transfer_kv ---------------------------------------------------------------------------- */

/* The op's tensors, in the order the request's views are read (kTransferArg: where each is). */
enum { TRANSFER_TENSORS = 8 };
static const char *const kTransferTensorNames[TRANSFER_TENSORS] = {"src_k",       "src_v",       "dst_k",   "dst_v",
                                                                   "src_indices", "dst_indices", "k_scale", "v_scale"};
static const int kTransferArg[TRANSFER_TENSORS] = {0, 1, 2, 3, 4, 5, 11, 12};

/* The transfer of @p args (the op's 14 arguments, in order; only the tensors are read here) with
 * the op's scalars (src_num_slots, dst_num_slots, split, pdl, row_elements, max_ctas). */
static PyObject *transfer_run(PyObject *const *args, const int64_t scalars[6], const door_extra *x,
                              enum door_mode mode) {
  if (!ready()) return NULL;
  static const int optional[TRANSFER_TENSORS] = {0, 1, 0, 1, 0, 0, 1, 1};
  kvjit_door_tensor t[TRANSFER_TENSORS];
  kvjit_transfer_request req;
  kvjit_tensor_view *views[TRANSFER_TENSORS] = {&req.src_k,       &req.src_v,       &req.dst_k,   &req.dst_v,
                                                &req.src_indices, &req.dst_indices, &req.k_scale, &req.v_scale};
  PyObject *result = NULL;
  int n_read = 0;
  for (; n_read < TRANSFER_TENSORS; n_read++) {
    if (kvjit_door_read(args[kTransferArg[n_read]], kTransferTensorNames[n_read], optional[n_read], &t[n_read]))
      goto done;
    *views[n_read] = t[n_read].buf.view;
  }
  kvjit_door_fill_devices(views, TRANSFER_TENSORS);
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
  int first = -1; /* the first device tensor: its framework's stream is the default */
  for (int i = 0; i < TRANSFER_TENSORS && first < 0; i++)
    if (views[i]->present && views[i]->device_type == KVJIT_DL_CUDA) first = i;
  if (!x->has_stream && first >= 0 && kvjit_door_default_stream(&t[first], &stream)) goto done;
  a.stream = stream;
  if (mode == MODE_PREPARE && x->batch != NULL && x->batch != Py_None && int_arg(x->batch, "batch", &a.batch))
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
  int host = 0;
  for (int i = 0; i < TRANSFER_TENSORS; i++) host |= views[i]->present && views[i]->device_type != KVJIT_DL_CUDA;
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
  for (int i = 0; i < n_read; i++) kvjit_door_release(&t[i]);
  return result;
}

/* transfer_kv_op(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots,
 * dst_num_slots, split, pdl, row_elements, k_scale, v_scale, max_ctas[, stream[, context[, batch]]]). */
static PyObject *transfer(PyObject *const *args, Py_ssize_t nargs, enum door_mode mode) {
  if (nargs < 14 || nargs > 17) {
    PyErr_SetString(PyExc_TypeError, "transfer_kv_op takes the op's 14 arguments, then stream, context, batch");
    return NULL;
  }
  int64_t scalars[6];
  door_extra x = {0, NULL, NULL, nargs > 16 ? args[16] : NULL};
  if (int_arg(args[6], "src_num_slots", &scalars[0]) || int_arg(args[7], "dst_num_slots", &scalars[1]) ||
      int_arg(args[8], "split", &scalars[2]) || int_arg(args[9], "pdl", &scalars[3]) ||
      int_arg(args[10], "row_elements", &scalars[4]) || int_arg(args[13], "max_ctas", &scalars[5]) ||
      stream_and_context(nargs > 14 ? args[14] : NULL, nargs > 15 ? args[15] : NULL, &x))
    return NULL;
  return transfer_run(args, scalars, &x, mode);
}

static PyObject *c_transfer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return transfer(args, nargs, MODE_CALL);
}
static PyObject *c_transfer_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return transfer(args, nargs, MODE_PREPARE);
}
static PyObject *c_transfer_args(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  return transfer(args, nargs, MODE_ARGS);
}

/* ---- the public calls: kvjit.store_kv_cache and kvjit.transfer_kv ---------------------------- */

/* Set by init(): the package's keyword normalisers (kvjit/_ops.py store_scalars, transfer_scalars)
 * and its spellings mapped without normalising ({"fp8_e4m3": 4, ...}, {"vllm_paged": 1}). */
static PyObject *g_store_scalars, *g_transfer_scalars, *g_fast_cache_dtype, *g_fast_layout, *g_zero, *g_auto;

/* How a call's six scalar keywords may skip the normaliser: left out always; None where None is
 * the default; a str found in the package's fast table. */
typedef struct scalar_keywords {
  const char *names[6];
  int64_t defaults[6];
  int none_is_default[6];
  PyObject **fast[6]; /* a dict of spellings -> the op's int, or NULL */
  PyObject **normalise;
} scalar_keywords;

/* One keyword without the normaliser: 1 with *out set, 0 when it needs it, -1 on an error. */
static int plain_scalar(const scalar_keywords *k, int i, PyObject *given, int64_t *out) {
  if (given == NULL || (given == Py_None && k->none_is_default[i])) {
    *out = k->defaults[i];
    return 1;
  }
  if (k->fast[i] == NULL || !PyUnicode_CheckExact(given)) return 0;
  PyObject *code = PyDict_GetItemWithError(*k->fast[i], given);
  if (code == NULL) return PyErr_Occurred() ? -1 : 0;
  return int_arg(code, k->names[i], out) ? -1 : 1;
}

/*
 * The op's six scalars and the door's stream and context from a call's keywords (@p given: the
 * six scalars' keywords, stream, context; NULL: left out). The common call costs no Python;
 * anything else goes through the package's one normaliser, which returns the six ints, the
 * stream handle and the context handle (or None), or raises naming the keyword.
 */
static int scalars_of(const scalar_keywords *k, PyObject *const given[8], int64_t scalars[6], door_extra *x) {
  int plain = (given[6] == NULL || given[6] == Py_None) && (given[7] == NULL || given[7] == Py_None);
  for (int i = 0; i < 6 && plain > 0; i++) plain = plain_scalar(k, i, given[i], &scalars[i]);
  if (plain < 0) return -1;
  if (plain) return stream_and_context(NULL, NULL, x);
  PyObject *argv[8];
  for (int i = 0; i < 8; i++)
    argv[i] = given[i] != NULL ? given[i] : i < 6 && k->defaults[i] == 0 && !k->none_is_default[i] ? g_zero : Py_None;
  if (given[3] == NULL) argv[3] = g_auto; /* pdl */
  PyObject *r = PyObject_Vectorcall(*k->normalise, argv, 8, NULL);
  if (r == NULL) return -1;
  int failed = !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 8;
  if (failed) PyErr_SetString(PyExc_SystemError, "kvjit._C: a normaliser returned no 8-tuple");
  for (int i = 0; i < 6 && !failed; i++) failed = int_arg(PyTuple_GET_ITEM(r, i), k->names[i], &scalars[i]) != 0;
  failed = failed || stream_and_context(PyTuple_GET_ITEM(r, 6), PyTuple_GET_ITEM(r, 7), x) != 0;
  Py_DECREF(r);
  return failed ? -1 : 0;
}

static kvjit_call_spec store_spec = {
    "store_kv_cache",
    {"k", "v", "k_cache", "v_cache", "indices", "num_slots", "skip_slot", "split", "pdl", "k_scale", "v_scale",
     "cache_dtype", "layout", "stream", "context"},
    15, 5, 5, {NULL}};

static const scalar_keywords store_keywords = {
    {"num_slots", "skip_slot", "split", "pdl", "cache_dtype", "layout"},
    {-1, -1, 0, KVJIT_PDL_AUTO, 0, 0},
    {1, 1, 0, 0, 1, 1},
    {NULL, NULL, NULL, NULL, &g_fast_cache_dtype, &g_fast_layout},
    &g_store_scalars};

static PyObject *c_store_kv_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  (void)self;
  PyObject *a[15];
  if (!ready() || kvjit_call_bind(&store_spec, args, nargs, kwnames, a)) return NULL;
  PyObject *const objs[7] = {a[0], a[1], a[2], a[3], a[4], a[9] ? a[9] : Py_None, a[10] ? a[10] : Py_None};
  PyObject *const given[8] = {a[5], a[6], a[7], a[8], a[11], a[12], a[13], a[14]};
  int64_t scalars[6];
  door_extra x = {0, NULL, NULL, NULL};
  if (scalars_of(&store_keywords, given, scalars, &x)) return NULL;
  return store_run(objs, scalars, &x, MODE_CALL);
}

static kvjit_call_spec transfer_spec = {
    "transfer_kv",
    {"src_k", "src_v", "dst_k", "dst_v", "src_indices", "dst_indices", "src_num_slots", "dst_num_slots", "split",
     "pdl", "row_elements", "k_scale", "v_scale", "max_ctas", "stream", "context"},
    16, 6, 6, {NULL}};

static const scalar_keywords transfer_keywords = {
    {"src_num_slots", "dst_num_slots", "split", "pdl", "row_elements", "max_ctas"},
    {-1, -1, 0, KVJIT_PDL_AUTO, -1, 0},
    {1, 1, 0, 0, 1, 0},
    {NULL, NULL, NULL, NULL, NULL, NULL},
    &g_transfer_scalars};

static PyObject *c_transfer_kv(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  (void)self;
  PyObject *a[16];
  if (!ready() || kvjit_call_bind(&transfer_spec, args, nargs, kwnames, a)) return NULL;
  /* transfer_run reads the op's argument list: the six tensors, then k_scale, v_scale at 11, 12. */
  PyObject *op_args[14] = {a[0], a[1], a[2], a[3], a[4], a[5], Py_None, Py_None, Py_None, Py_None, Py_None,
                           a[11] ? a[11] : Py_None, a[12] ? a[12] : Py_None, Py_None};
  PyObject *const given[8] = {a[6], a[7], a[8], a[9], a[10], a[13], a[14], a[15]};
  int64_t scalars[6];
  door_extra x = {0, NULL, NULL, NULL};
  if (scalars_of(&transfer_keywords, given, scalars, &x)) return NULL;
  return transfer_run(op_args, scalars, &x, MODE_CALL);
}

/* ---- the cold path: a tensor as Python values, setup, the torch op -------------------------- */

/* describe(obj, name) -> (data, shape, strides, itemsize, dtype name, device type, device index,
 * the stream a call on it goes to by default). */
static PyObject *c_describe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "describe(obj, name)");
    return NULL;
  }
  const char *name = PyUnicode_AsUTF8(args[1]);
  if (name == NULL) return NULL;
  kvjit_door_tensor t;
  if (kvjit_door_read(args[0], name, 0, &t)) return NULL;
  const kvjit_tensor_view *v = &t.buf.view;
  PyObject *shape = PyTuple_New(v->ndim), *strides = PyTuple_New(v->ndim), *out = NULL;
  if (shape && strides) {
    int ok = 1;
    for (int64_t i = 0; i < v->ndim && ok; i++) {
      PyObject *a = PyLong_FromLongLong(v->sizes[i]), *b = PyLong_FromLongLong(v->strides[i]);
      ok = a && b;
      if (a) PyTuple_SET_ITEM(shape, i, a);
      if (b) PyTuple_SET_ITEM(strides, i, b);
    }
    void *stream = NULL;
    if (ok && (v->device_type != KVJIT_DL_CUDA || kvjit_door_default_stream(&t, &stream) == 0))
      out = Py_BuildValue("(KOOLsiiK)", (unsigned long long)v->data, shape, strides, (long long)v->itemsize,
                          kvjit_tensor_kind_name(v->kind), (int)v->device_type, (int)v->device_index,
                          (unsigned long long)(uintptr_t)stream);
  }
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  kvjit_door_release(&t);
  return out;
}

/* init(libkvjit_path, default_context, error, store_scalars, transfer_scalars, fast_cache_dtype,
 * fast_layout): resolve libkvjit (the copy the package loaded) and libcuda, once; error(status,
 * name, message) builds the exception for a library failure; the normalisers turn keywords into
 * the op's arguments, the two dicts are the spellings mapped without them. */
static PyObject *c_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 7 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[2]) || !PyCallable_Check(args[3]) ||
      !PyCallable_Check(args[4]) || !PyDict_Check(args[5]) || !PyDict_Check(args[6])) {
    PyErr_SetString(PyExc_TypeError, "init(libkvjit_path, default_context, error, store_scalars, transfer_scalars, "
                    "fast_cache_dtype, fast_layout)");
    return NULL;
  }
  void *ctx = PyLong_AsVoidPtr(args[1]);
  if (ctx == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "init: default_context is NULL");
    return NULL;
  }
  PyObject *path = PyUnicode_EncodeFSDefault(args[0]);
  if (path == NULL) return NULL;
  char msg[512];
  int failed = kvjit_door_resolve(PyBytes_AS_STRING(path), ctx, msg, sizeof msg);
  Py_DECREF(path);
  if (failed) {
    PyErr_SetString(PyExc_ImportError, msg);
    return NULL;
  }
  if (g_zero == NULL && (g_zero = PyLong_FromLong(0)) == NULL) return NULL;
  if (g_auto == NULL && (g_auto = PyUnicode_InternFromString("auto")) == NULL) return NULL;
  PyObject **keep[5] = {&g_error, &g_store_scalars, &g_transfer_scalars, &g_fast_cache_dtype, &g_fast_layout};
  for (int i = 0; i < 5; i++) {
    Py_INCREF(args[2 + i]);
    Py_XSETREF(*keep[i], args[2 + i]);
  }
  Py_RETURN_NONE;
}

/* register_torch(libtorch_cpu, libtorch_cuda or None, namespace, dispatch_key): the op kernels. */
static PyObject *c_register_torch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "register_torch(libtorch_cpu, libtorch_cuda, namespace, dispatch_key)");
    return NULL;
  }
  if (!ready()) return NULL;
  const char *text[4] = {NULL, NULL, NULL, NULL};
  for (int i = 0; i < 4; i++) {
    if (args[i] == Py_None && i == 1) continue;
    if (!PyUnicode_Check(args[i]) || (text[i] = PyUnicode_AsUTF8(args[i])) == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "register_torch: the arguments are strings");
      return NULL;
    }
  }
  kvjit_torch_setup setup = {KVJIT_TORCH_SETUP_VERSION, text[0], text[1], text[2], text[3]};
  char err[512];
  if (kvjit_torch_register(&setup, err, sizeof err) != 0) {
    PyErr_SetString(PyExc_RuntimeError, err);
    return NULL;
  }
  Py_RETURN_NONE;
}

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL
#define KEYWORDS(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL | METH_KEYWORDS

static PyMethodDef methods[] = {
    {"init", FASTCALL(c_init),
     "init(libkvjit_path, default_context, error, store_scalars, transfer_scalars, fast_cache_dtype, fast_layout)"},
    {"store_kv_cache", KEYWORDS(c_store_kv_cache), STORE_KV_CACHE_DOC},
    {"transfer_kv", KEYWORDS(c_transfer_kv), TRANSFER_KV_DOC},
    {"store_kv_cache_op", FASTCALL(c_store),
     "store_kv_cache_op(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, "
     "cache_dtype, layout, stream=None, context=None)\n--\n\nThe store with the op's arguments (the torch op's "
     "CPU path)."},
    {"store_kv_cache_prepare", FASTCALL(c_store_prepare),
     "store_kv_cache_prepare(<store_kv_cache's arguments>, stream, context, batch): load without launching."},
    {"store_kv_args", FASTCALL(c_store_args),
     "store_kv_args(<store_kv_cache's arguments>): the kvjit_store_kv_args the rules make, then the K and V "
     "kvjit_layout they point at, as bytes."},
    {"transfer_kv_op", FASTCALL(c_transfer),
     "transfer_kv_op(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots, dst_num_slots, split, "
     "pdl, row_elements, k_scale, v_scale, max_ctas, stream=None, context=None)"},
    {"transfer_kv_prepare", FASTCALL(c_transfer_prepare),
     "transfer_kv_prepare(<transfer_kv's arguments>, stream, context, batch): load without launching."},
    {"transfer_kv_args", FASTCALL(c_transfer_args),
     "transfer_kv_args(<transfer_kv's arguments>): the kvjit_transfer_kv_args the rules make, as bytes."},
    {"describe", FASTCALL(c_describe),
     "describe(obj, name) -> (data, shape, strides, itemsize, dtype, device_type, device_index, stream)"},
    {"register_torch", FASTCALL(c_register_torch),
     "register_torch(libtorch_cpu, libtorch_cuda, namespace, dispatch_key): the op kernels"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvjit._C",
                                    "kvjit's native door: tensors of any framework -> kvjit's ops.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void);
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
