/*
 * _kvjit_ext: kvjit.store_kv_cache()'s eager fast path for torch tensors, a CPython extension.
 *
 * One METH_FASTCALL function reads the tensors through PyTorch's DLPack exchange API
 * (type(t).__dlpack_c_exchange_api__: dltensor_from_py_object_no_sync fills a DLTensor without
 * allocating, current_work_stream gives torch's current stream, the capturing one inside
 * torch.cuda.graph), applies the torch op's layout rules (store_args.c) and calls kvjit: no
 * dispatcher, no Python-level argument handling. Dynamo cannot trace into it, so under
 * torch.compile the friendly entry point calls torch.ops.kvjit.store_kv_cache instead.
 *
 * It links nothing: libkvjit's entry points and cuCtxGetDevice arrive as addresses from the
 * copies the package already loaded (init()). Whatever it does not handle (another tensor type,
 * k on a device that is not current, no current context) it answers NotImplemented, and the
 * caller takes the op's path, which does.
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
} g;

static PyObject *ext_init(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "init(context, store, last_error, status_name, cuCtxGetDevice, tensor_type)");
    return NULL;
  }
  void *p[5];
  for (int i = 0; i < 5; i++) {
    p[i] = args[i] == Py_None ? NULL : PyLong_AsVoidPtr(args[i]);
    if (p[i] == NULL && PyErr_Occurred()) return NULL;
  }
  if (!p[0] || !p[1] || !p[2] || !p[3] || !PyType_Check(args[5])) {
    PyErr_SetString(PyExc_ValueError, "init: the context, the three kvjit functions and a tensor type are needed");
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
  g.ctx = p[0];
  *(void **)&g.store = p[1];
  *(void **)&g.last_error = p[2];
  *(void **)&g.status_name = p[3];
  *(void **)&g.ctx_get_device = p[4];
  g.api = api;
  Py_INCREF(args[5]);
  g.type = (PyTypeObject *)args[5];
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

/* store(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, cache_dtype):
 * the op's schema, positionally. None on success, NotImplemented to hand the call to the op. */
static PyObject *ext_store(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  static const int optional[7] = {0, 1, 0, 1, 0, 1, 1};
  static const int position[7] = {0, 1, 2, 3, 4, 9, 10};
  if (nargs != 12 || g.api == NULL) Py_RETURN_NOTIMPLEMENTED;
  bench_dl_tensor dl[7];
  bench_view views[7];
  for (int i = 0; i < 7; i++)
    if (tensor_arg(args[position[i]], optional[i], &dl[i], &views[i]) < 0) Py_RETURN_NOTIMPLEMENTED;
  kvjit_store_request req = {views[0].view, views[1].view, views[2].view, views[3].view, views[4].view,
                             views[5].view, views[6].view, 0, 0, 0, 0, 0};
  if (int_arg(args[5], &req.num_slots) || int_arg(args[6], &req.skip_slot) || int_arg(args[7], &req.split) ||
      int_arg(args[8], &req.pdl) || int_arg(args[11], &req.cache_dtype))
    Py_RETURN_NOTIMPLEMENTED;
  kvjit_store_kv_args a;
  char msg[512];
  /* Any tensor off CUDA: the op decides (its CPU implementation, or the error naming it). */
  if (kvjit_store_request_on_device(&req, BENCH_DL_CUDA, "CUDA", NULL, 0)) Py_RETURN_NOTIMPLEMENTED;
  kvjit_request_error refused = kvjit_store_request_args(&req, &a, msg, sizeof msg);
  if (refused) {
    PyErr_SetString(refused == KVJIT_REQUEST_TYPE_ERROR ? PyExc_TypeError : PyExc_ValueError, msg);
    return NULL;
  }
  /* kvjit launches in the thread's current context: it must be k's device's. */
  int current = -1;
  if (g.ctx_get_device == NULL || g.ctx_get_device(&current) != 0 || current != req.k.device_index)
    Py_RETURN_NOTIMPLEMENTED;
  void *stream = NULL;
  if (g.api->current_work_stream(BENCH_DL_CUDA, req.k.device_index, &stream) != 0) {
    PyErr_Clear();
    Py_RETURN_NOTIMPLEMENTED;
  }
  a.stream = (struct CUstream_st *)stream;
  kvjit_status s = g.store(g.ctx, &a);
  if (s != KVJIT_OK) {
    /* The same text as the op's kernel, which kvjit's Python side maps to its exception classes. */
    PyErr_Format(PyExc_RuntimeError, "kvjit %s: %s", g.status_name(s), g.last_error());
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", (PyCFunction)(void (*)(void))ext_init, METH_FASTCALL,
     "init(context, store, last_error, status_name, cuCtxGetDevice, tensor_type): addresses as ints"},
    {"store", (PyCFunction)(void (*)(void))ext_store, METH_FASTCALL,
     "store(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, cache_dtype)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kvjit_ext", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kvjit_ext(void);
PyMODINIT_FUNC PyInit__kvjit_ext(void) { return PyModule_Create(&module); }
