/*
 * _kvjit_ext: kvjit.store_kv_cache()'s eager fast path for torch tensors, a CPython extension.
 *
 * METH_FASTCALL functions read the tensors through PyTorch's DLPack exchange API
 * (type(t).__dlpack_c_exchange_api__: dltensor_from_py_object_no_sync fills a DLTensor without
 * allocating, current_work_stream gives torch's current stream, the capturing one inside
 * torch.cuda.graph), apply the torch op's layout rules (store_args.c) and call kvjit: no
 * dispatcher, no Python-level argument handling. Dynamo cannot trace into them, so under
 * torch.compile the friendly entry point calls torch.ops.kvjit.store_kv_cache instead.
 *
 * It links nothing: libkvjit's entry points and cuCtxGetDevice arrive as addresses from the
 * copies the package already loaded (init()).
 *
 *   store(...)           the op's 12 arguments, positionally; NotImplemented for what it leaves to
 *                        the op (another tensor type, k on a device that is not current, ...)
 *   store_kv_cache(...)  kvjit.store_kv_cache()'s own arguments (the friendly keywords); what it
 *                        does not handle it hands, arguments untouched, to the Python
 *                        implementation given to init(), which does
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dlpack_view.h"
#include "kvjit.h"
#include "store_args.h"

typedef struct {
  uint32_t major, minor;
} dl_version;

typedef struct dl_api_header {
  dl_version version;
  struct dl_api_header *prev_api;
} dl_api_header;

typedef struct {
  dl_api_header header;
  void *managed_tensor_allocator;
  void *managed_tensor_from_py_object_no_sync;
  void *managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void *py_object, bench_dl_tensor *out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} dl_exchange_api; /* DLPackExchangeAPI, DLPack 1.x */

/* Set once by init() (under the GIL), read under the GIL. */
static struct {
  kvjit_context *ctx;
  kvjit_status (*store)(kvjit_context *, const kvjit_store_kv_args *);
  const char *(*last_error)(void);
  const char *(*status_name)(kvjit_status);
  int (*ctx_get_device)(int *); /* cuCtxGetDevice */
  PyTypeObject *type;           /* the tensor type the API below belongs to */
  const dl_exchange_api *api;
  PyObject *fallback;           /* the Python store_kv_cache(), same signature */
  PyObject *error;              /* error(status, message) -> the kvjit.Error to raise */
  PyObject *names[9];           /* interned keyword names, in kFriendlyNames order */
  PyObject *pdl_auto, *pdl_on, *pdl_off, *fp8_e4m3, *fp8_e5m2;
  unsigned long long fallbacks; /* store_kv_cache calls handed to Python (tests and the bench read it) */
} g;

static const char *const kFriendlyNames[9] = {"num_slots", "skip_slot", "split", "pdl", "k_scale", "v_scale",
                                              "cache_dtype", "stream", "context"};

static int intern(PyObject **out, const char *text) {
  *out = PyUnicode_InternFromString(text);
  return *out ? 0 : -1;
}

static PyObject *ext_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError,
                    "init(context, store, last_error, status_name, cuCtxGetDevice, tensor_type, fallback, error)");
    return NULL;
  }
  void *p[5];
  for (int i = 0; i < 5; i++) {
    p[i] = args[i] == Py_None ? NULL : PyLong_AsVoidPtr(args[i]);
    if (p[i] == NULL && PyErr_Occurred()) return NULL;
  }
  if (!p[0] || !p[1] || !p[2] || !p[3] || !PyType_Check(args[5]) || !PyCallable_Check(args[6]) ||
      !PyCallable_Check(args[7])) {
    PyErr_SetString(PyExc_ValueError, "init: the context, the three kvjit functions, a tensor type and two "
                                      "callables are needed");
    return NULL;
  }
  PyObject *capsule = PyObject_GetAttrString(args[5], "__dlpack_c_exchange_api__");
  if (capsule == NULL) return NULL;
  const dl_exchange_api *api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  Py_DECREF(capsule);
  if (api == NULL) return NULL;
  if (api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync || !api->current_work_stream) {
    PyErr_Format(PyExc_ValueError, "init: DLPack exchange API %u.%u lacks dltensor_from_py_object_no_sync",
                 api->header.version.major, api->header.version.minor);
    return NULL;
  }
  for (int i = 0; i < 9; i++)
    if (!g.names[i] && intern(&g.names[i], kFriendlyNames[i])) return NULL;
  if ((!g.pdl_auto && intern(&g.pdl_auto, "auto")) || (!g.pdl_on && intern(&g.pdl_on, "on")) ||
      (!g.pdl_off && intern(&g.pdl_off, "off")) || (!g.fp8_e4m3 && intern(&g.fp8_e4m3, "fp8_e4m3")) ||
      (!g.fp8_e5m2 && intern(&g.fp8_e5m2, "fp8_e5m2")))
    return NULL;
  g.ctx = p[0];
  *(void **)&g.store = p[1];
  *(void **)&g.last_error = p[2];
  *(void **)&g.status_name = p[3];
  *(void **)&g.ctx_get_device = p[4];
  g.api = api;
  Py_INCREF(args[5]);
  Py_XSETREF(g.type, (PyTypeObject *)args[5]);
  Py_INCREF(args[6]);
  Py_XSETREF(g.fallback, args[6]);
  Py_INCREF(args[7]);
  Py_XSETREF(g.error, args[7]);
  Py_RETURN_NONE;
}

/* A tensor argument (None allowed where @p optional). 1: filled, 0: None, -1: not ours. */
static int tensor_arg(PyObject *obj, int optional, bench_dl_tensor *dl, bench_view *view) {
  if (obj == Py_None && optional) {
    memset(view, 0, sizeof *view);
    return 0;
  }
  if (Py_TYPE(obj) != g.type) return -1;
  if (g.api->dltensor_from_py_object_no_sync(obj, dl) != 0) {
    PyErr_Clear(); /* the op's path reports what is wrong with it */
    return -1;
  }
  return bench_dl_view(dl, view) == 0 ? 1 : -1;
}

static int int_arg(PyObject *obj, int64_t *out) {
  if (!PyLong_CheckExact(obj)) return -1;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return -1;
  }
  *out = (int64_t)v;
  return 0;
}

/* The tensors of a store, in kvjit_store_request order (k, v, k_cache, v_cache, indices, k_scale,
 * v_scale), into @p req; a view's strides may point into @p views (a DLTensor without strides),
 * which must outlive @p req's use. 0, or -1 when one is not a tensor this path reads. */
static int read_tensors(PyObject *const tensors[7], bench_view views[7], kvjit_store_request *req) {
  static const int optional[7] = {0, 1, 0, 1, 0, 1, 1};
  bench_dl_tensor dl;
  kvjit_tensor_view *dst[7] = {&req->k, &req->v, &req->k_cache, &req->v_cache, &req->indices, &req->k_scale,
                               &req->v_scale};
  for (int i = 0; i < 7; i++) {
    if (tensor_arg(tensors[i], optional[i], &dl, &views[i]) < 0) return -1;
    *dst[i] = views[i].view;
  }
  return 0;
}

enum { STORE_DONE = 0, STORE_FAILED = -1, STORE_DEFER = 1 };

/* Raise the kvjit.Error for @p status (error() builds it, so its class is the package's). */
static void raise_status(kvjit_status s) {
  PyObject *exc = PyObject_CallFunction(g.error, "is", (int)s, g.last_error());
  if (exc != NULL) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  }
}

/* Check @p req and store: DONE, FAILED (an exception is set) or DEFER (the caller's slower path
 * handles it: a tensor off CUDA, k's device not the current context's, no stream). An empty
 * store reads and writes nothing, so it is checked and done wherever its tensors live. */
static int store_request(const kvjit_store_request *req) {
  kvjit_store_kv_args a;
  char msg[512];
  int on_cuda = kvjit_store_request_on_device(req, BENCH_DL_CUDA, "CUDA", NULL, 0) == KVJIT_REQUEST_OK;
  if (!on_cuda) {
    int empty = req->k.present && req->k.ndim >= 1 && req->k.sizes[0] == 0;
    if (!empty || kvjit_store_request_on_device(req, BENCH_DL_CPU, "CPU", NULL, 0) != KVJIT_REQUEST_OK)
      return STORE_DEFER; /* the op decides: its CPU implementation, or the error naming the tensor */
  }
  kvjit_request_error refused = kvjit_store_request_args(req, &a, msg, sizeof msg);
  if (refused) {
    PyErr_SetString(refused == KVJIT_REQUEST_TYPE_ERROR ? PyExc_TypeError : PyExc_ValueError, msg);
    return STORE_FAILED;
  }
  if (on_cuda) {
    /* kvjit launches in the thread's current context: it must be k's device's. */
    int current = -1;
    if (g.ctx_get_device == NULL || g.ctx_get_device(&current) != 0 || current != req->k.device_index)
      return STORE_DEFER;
    void *stream = NULL;
    if (g.api->current_work_stream(BENCH_DL_CUDA, req->k.device_index, &stream) != 0) {
      PyErr_Clear();
      return STORE_DEFER;
    }
    a.stream = (struct CUstream_st *)stream;
  } else if (a.batch != 0) {
    return STORE_DEFER;
  }
  kvjit_status s = g.store(g.ctx, &a);
  if (s != KVJIT_OK) {
    raise_status(s);
    return STORE_FAILED;
  }
  return STORE_DONE;
}

/* store(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, cache_dtype):
 * the op's schema, positionally. None on success, NotImplemented to hand the call to the op. */
static PyObject *ext_store(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 12 || g.api == NULL) Py_RETURN_NOTIMPLEMENTED;
  PyObject *const tensors[7] = {args[0], args[1], args[2], args[3], args[4], args[9], args[10]};
  kvjit_store_request req;
  bench_view views[7];
  memset(&req, 0, sizeof req);
  if (read_tensors(tensors, views, &req) || int_arg(args[5], &req.num_slots) || int_arg(args[6], &req.skip_slot) ||
      int_arg(args[7], &req.split) || int_arg(args[8], &req.pdl) || int_arg(args[11], &req.cache_dtype))
    Py_RETURN_NOTIMPLEMENTED;
  int r = store_request(&req);
  if (r == STORE_FAILED) return NULL;
  if (r == STORE_DEFER) Py_RETURN_NOTIMPLEMENTED;
  Py_RETURN_NONE;
}

/* A friendly keyword as the op's int: None -> @p none; an int >= @p low; else -1 (the Python
 * implementation words the error). */
static int friendly_int(PyObject *obj, int64_t none, int64_t low, int64_t *out) {
  if (obj == Py_None) {
    *out = none;
    return 0;
  }
  return int_arg(obj, out) == 0 && *out >= low ? 0 : -1;
}

static int friendly_pdl(PyObject *obj, int64_t *out) {
  if (obj == g.pdl_auto || obj == Py_None) *out = KVJIT_PDL_AUTO;
  else if (obj == g.pdl_on || obj == Py_True) *out = KVJIT_PDL_ON;
  else if (obj == g.pdl_off || obj == Py_False) *out = KVJIT_PDL_OFF;
  else if (PyUnicode_CheckExact(obj) && PyUnicode_Compare(obj, g.pdl_auto) == 0) *out = KVJIT_PDL_AUTO;
  else if (PyUnicode_CheckExact(obj) && PyUnicode_Compare(obj, g.pdl_on) == 0) *out = KVJIT_PDL_ON;
  else if (PyUnicode_CheckExact(obj) && PyUnicode_Compare(obj, g.pdl_off) == 0) *out = KVJIT_PDL_OFF;
  else return -1;
  return 0;
}

static int friendly_cache_dtype(PyObject *obj, int64_t *out) {
  if (obj == Py_None) *out = 0;
  else if (PyUnicode_CheckExact(obj) && PyUnicode_Compare(obj, g.fp8_e4m3) == 0) *out = KVJIT_DTYPE_FP8_E4M3;
  else if (PyUnicode_CheckExact(obj) && PyUnicode_Compare(obj, g.fp8_e5m2) == 0) *out = KVJIT_DTYPE_FP8_E5M2;
  else return -1; /* torch dtypes, aliases: the Python implementation reads them */
  return 0;
}

/* Which friendly keyword @p name is (0..8), or -1. */
static int keyword_index(PyObject *name) {
  for (int i = 0; i < 9; i++)
    if (name == g.names[i]) return i;
  for (int i = 0; i < 9; i++)
    if (PyUnicode_Compare(name, g.names[i]) == 0) return i;
  PyErr_Clear();
  return -1;
}

/* store_kv_cache(k, v, k_cache, v_cache, indices, *, num_slots=None, skip_slot=None, split=0,
 * pdl="auto", k_scale=None, v_scale=None, cache_dtype=None, stream=None, context=None); the
 * Python wrapper passes the keywords positionally, in that order. */
static PyObject *ext_store_kv_cache(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  (void)self;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (g.api == NULL || nargs < 5 || nargs > 14) goto fallback;
  /* Not given: NULL (split 0, pdl "auto"); given None where None is not allowed goes to Python. */
  PyObject *kw[9] = {Py_None, Py_None, NULL, NULL, Py_None, Py_None, Py_None, Py_None, Py_None};
  for (Py_ssize_t i = 5; i < nargs; i++) kw[i - 5] = args[i];
  for (Py_ssize_t i = 0; i < nkw; i++) {
    int at = keyword_index(PyTuple_GET_ITEM(kwnames, i));
    if (at < 0 || at < nargs - 5) goto fallback; /* unknown, or given twice: Python says so */
    kw[at] = args[nargs + i];
  }
  if (kw[7] != Py_None || kw[8] != Py_None) goto fallback; /* stream=, context=: the ctypes path */
  kvjit_store_request req;
  bench_view views[7];
  memset(&req, 0, sizeof req);
  req.pdl = KVJIT_PDL_AUTO;
  PyObject *const tensors[7] = {args[0], args[1], args[2], args[3], args[4], kw[4], kw[5]};
  if (friendly_int(kw[0], -1, 1, &req.num_slots) || friendly_int(kw[1], -1, 0, &req.skip_slot) ||
      (kw[2] && (kw[2] == Py_None || friendly_int(kw[2], 0, 0, &req.split))) ||
      (kw[3] && friendly_pdl(kw[3], &req.pdl)) || friendly_cache_dtype(kw[6], &req.cache_dtype) ||
      read_tensors(tensors, views, &req))
    goto fallback;
  int r = store_request(&req);
  if (r == STORE_FAILED) return NULL;
  if (r == STORE_DONE) Py_RETURN_NONE;
fallback:
  g.fallbacks++;
  if (g.fallback == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "kvjit._kvjit_ext: store_kv_cache before init()");
    return NULL;
  }
  return PyObject_Vectorcall(g.fallback, args, nargsf, kwnames);
}

static PyObject *ext_fallbacks(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromUnsignedLongLong(g.fallbacks);
}

static PyMethodDef methods[] = {
    {"fallbacks", ext_fallbacks, METH_NOARGS, "fallbacks(): how many store_kv_cache calls went to Python"},
    {"init", (PyCFunction)(void (*)(void))ext_init, METH_FASTCALL,
     "init(context, store, last_error, status_name, cuCtxGetDevice, tensor_type, fallback, error)"},
    {"store", (PyCFunction)(void (*)(void))ext_store, METH_FASTCALL,
     "store(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, cache_dtype)"},
    {"store_kv_cache", (PyCFunction)(void (*)(void))ext_store_kv_cache, METH_FASTCALL | METH_KEYWORDS,
     "store_kv_cache($module, /, k, v, k_cache, v_cache, indices, num_slots=None, skip_slot=None, split=0, "
     "pdl='auto', k_scale=None, v_scale=None, cache_dtype=None, stream=None, context=None)\n--\n\n"
     "k_cache[indices] = k; v_cache[indices] = v in one kernel, on the current stream: kvjit.store_kv_cache "
     "in C (see kvjit._torch_op.store_kv_cache for the arguments)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kvjit_ext", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kvjit_ext(void);
PyMODINIT_FUNC PyInit__kvjit_ext(void) { return PyModule_Create(&module); }
