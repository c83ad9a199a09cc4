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
 * The keywords arrive normalised (python/kvjit/_ops.py): the op's ints, None for an absent
 * tensor, stream an int handle or None, context an int handle or None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "door.h"
#include "dlpack_view.h"
#include "host_copy.h"
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

/* stream (None or an int CUstream handle) and context (None or an int kvjit_context handle). */
static int stream_and_context(PyObject *stream, PyObject *context, int *has_stream, void **stream_out,
                              kvjit_context **ctx_out) {
  *has_stream = stream != NULL && stream != Py_None;
  *ctx_out = kvjit_door.ctx;
  if (*has_stream) {
    *stream_out = PyLong_AsVoidPtr(stream);
    if (*stream_out == NULL && PyErr_Occurred()) return -1;
  }
  if (context != NULL && context != Py_None) {
    *ctx_out = PyLong_AsVoidPtr(context);
    if (*ctx_out == NULL) {
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

/* store_kv_cache(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale,
 * v_scale, cache_dtype, layout[, stream[, context[, batch]]]): the op's arguments, then the door's. */
static PyObject *store(PyObject *const *args, Py_ssize_t nargs, enum door_mode mode) {
  if (nargs < 13 || nargs > 16) {
    PyErr_SetString(PyExc_TypeError, "store_kv_cache takes the op's 13 arguments, then stream, context, batch");
    return NULL;
  }
  if (!ready()) return NULL;
  PyObject *const objs[7] = {args[0], args[1], args[2], args[3], args[4], args[9], args[10]};
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
  if (int_arg(args[5], "num_slots", &req.num_slots) || int_arg(args[6], "skip_slot", &req.skip_slot) ||
      int_arg(args[7], "split", &req.split) || int_arg(args[8], "pdl", &req.pdl) ||
      int_arg(args[11], "cache_dtype", &req.cache_dtype) || int_arg(args[12], "layout", &req.layout))
    goto done;
  int has_stream;
  void *stream = NULL;
  kvjit_context *ctx;
  if (stream_and_context(nargs > 13 ? args[13] : NULL, nargs > 14 ? args[14] : NULL, &has_stream, &stream, &ctx))
    goto done;
  char msg[512];
  kvjit_store_kv_args a;
  kvjit_store_layouts layouts; /* what a's layout pointers point at */
  /* On CUDA, or all on the CPU (a plain loop there; the rules are the same). */
  kvjit_request_error refused = kvjit_store_request_on_device(&req, KVJIT_DL_CUDA, "CUDA", msg, sizeof msg);
  int on_cuda = !refused;
  if (refused && mode != MODE_ARGS && kvjit_store_request_on_device(&req, KVJIT_DL_CPU, "CPU", NULL, 0)) {
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
  if (has_stream)
    a.stream = stream;
  else if (on_cuda && kvjit_door_default_stream(&t[0], &stream))
    goto done;
  else
    a.stream = stream;
  if (mode == MODE_PREPARE && nargs > 15 && args[15] != Py_None && int_arg(args[15], "batch", &a.batch)) goto done;
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

/* transfer_kv(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots, dst_num_slots,
 * split, pdl, row_elements, k_scale, v_scale, max_ctas[, stream[, context[, batch]]]). */
static PyObject *transfer(PyObject *const *args, Py_ssize_t nargs, enum door_mode mode) {
  if (nargs < 14 || nargs > 17) {
    PyErr_SetString(PyExc_TypeError, "transfer_kv takes the op's 14 arguments, then stream, context, batch");
    return NULL;
  }
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
  if (int_arg(args[6], "src_num_slots", &req.src_num_slots) ||
      int_arg(args[7], "dst_num_slots", &req.dst_num_slots) || int_arg(args[8], "split", &req.split) ||
      int_arg(args[9], "pdl", &req.pdl) || int_arg(args[10], "row_elements", &req.row_elements) ||
      int_arg(args[13], "max_ctas", &req.max_ctas))
    goto done;
  int has_stream;
  void *stream = NULL;
  kvjit_context *ctx;
  if (stream_and_context(nargs > 14 ? args[14] : NULL, nargs > 15 ? args[15] : NULL, &has_stream, &stream, &ctx))
    goto done;
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
  if (has_stream)
    a.stream = stream;
  else if (first >= 0 && kvjit_door_default_stream(&t[first], &stream))
    goto done;
  else
    a.stream = stream;
  if (mode == MODE_PREPARE && nargs > 16 && args[16] != Py_None && int_arg(args[16], "batch", &a.batch)) goto done;
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

/* init(libkvjit_path, default_context, error): resolve libkvjit (the copy the package loaded)
 * and libcuda, once; error(status, name, message) builds the exception for a library failure. */
static PyObject *c_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3 || !PyUnicode_Check(args[0]) || !PyCallable_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "init(libkvjit_path, default_context, error)");
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
  Py_INCREF(args[2]);
  Py_XSETREF(g_error, args[2]);
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

static PyMethodDef methods[] = {
    {"init", FASTCALL(c_init), "init(libkvjit_path, default_context, error)"},
    {"store_kv_cache", FASTCALL(c_store),
     "store_kv_cache(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, "
     "cache_dtype, layout, stream=None, context=None)\n--\n\nThe store with the op's arguments (kvjit.store_kv_cache "
     "normalises the keywords)."},
    {"store_kv_cache_prepare", FASTCALL(c_store_prepare),
     "store_kv_cache_prepare(<store_kv_cache's arguments>, stream, context, batch): load without launching."},
    {"store_kv_args", FASTCALL(c_store_args),
     "store_kv_args(<store_kv_cache's arguments>): the kvjit_store_kv_args the rules make, then the K and V "
     "kvjit_layout they point at, as bytes."},
    {"transfer_kv", FASTCALL(c_transfer),
     "transfer_kv(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots, dst_num_slots, split, "
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
