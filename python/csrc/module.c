/*
 * kvjit._C: the one native door from Python into kvjit's ops.
 *
 * Any tensor a framework hands over -- a torch.Tensor through PyTorch's DLPack exchange API
 * (no allocation, torch's current stream), anything with __cuda_array_interface__ (CuPy,
 * Numba) or __dlpack__ (JAX, CuPy, NumPy) -- becomes a kvjit_tensor_view (tensors.c), then the
 * one copy of the layout rules (store_args.c, transfer_args.c) makes the library's request, and
 * the library runs it (requests.c). Exceptions are raised in C, naming the argument: ValueError /
 * TypeError for what the rules refuse, kvjit.Error (built by the package's factory) for library
 * failures.
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
#include "keywords.h"
#include "kvjit.h"
#include "requests.h"
#include "tensors.h"
#include "torch_op.h"

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
  return door_int_arg(code, k->names[i], out) ? -1 : 1;
}

/*
 * The op's six scalars and the door's stream and context from a call's keywords (@p given: the
 * six scalars' keywords, stream, context; NULL: left out). The common call costs no Python;
 * anything else goes through the package's one normaliser, which returns the six ints, the
 * stream handle and the context handle (or None), or raises naming the keyword.
 */
static int keyword_scalars(const scalar_keywords *k, PyObject *const given[8], int64_t scalars[6], door_extra *x) {
  int plain = (given[6] == NULL || given[6] == Py_None) && (given[7] == NULL || given[7] == Py_None);
  for (int i = 0; i < 6 && plain > 0; i++) plain = plain_scalar(k, i, given[i], &scalars[i]);
  if (plain < 0) return -1;
  if (plain) return door_stream_and_context(NULL, NULL, x);
  PyObject *argv[8];
  for (int i = 0; i < 8; i++)
    argv[i] = given[i] != NULL ? given[i] : i < 6 && k->defaults[i] == 0 && !k->none_is_default[i] ? g_zero : Py_None;
  if (given[3] == NULL) argv[3] = g_auto; /* pdl */
  PyObject *r = PyObject_Vectorcall(*k->normalise, argv, 8, NULL);
  if (r == NULL) return -1;
  int failed = !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 8;
  if (failed) PyErr_SetString(PyExc_SystemError, "kvjit._C: a normaliser returned no 8-tuple");
  for (int i = 0; i < 6 && !failed; i++) failed = door_int_arg(PyTuple_GET_ITEM(r, i), k->names[i], &scalars[i]) != 0;
  failed = failed || door_stream_and_context(PyTuple_GET_ITEM(r, 6), PyTuple_GET_ITEM(r, 7), x) != 0;
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
  if (!door_ready()) return NULL;
  door_extra x = {0, NULL, kvjit_door.ctx, NULL};
  /* The common call: the tensors by position, every keyword left to its default. */
  if (nargs == store_spec.required && kwnames == NULL) {
    PyObject *const objs[7] = {args[0], args[1], args[2], args[3], args[4], Py_None, Py_None};
    return door_store_run(objs, store_keywords.defaults, &x, MODE_CALL);
  }
  PyObject *a[15];
  if (kvjit_call_bind(&store_spec, args, nargs, kwnames, a)) return NULL;
  PyObject *const objs[7] = {a[0], a[1], a[2], a[3], a[4], a[9] ? a[9] : Py_None, a[10] ? a[10] : Py_None};
  PyObject *const given[8] = {a[5], a[6], a[7], a[8], a[11], a[12], a[13], a[14]};
  int64_t scalars[6];
  if (keyword_scalars(&store_keywords, given, scalars, &x)) return NULL;
  return door_store_run(objs, scalars, &x, MODE_CALL);
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
  if (!door_ready()) return NULL;
  door_extra x = {0, NULL, kvjit_door.ctx, NULL};
  /* transfer_run reads the op's argument list: the six tensors, then k_scale, v_scale at 11, 12. The
   * common call: the tensors by position, every keyword left to its default. */
  if (nargs == transfer_spec.required && kwnames == NULL) {
    PyObject *const op_args[14] = {args[0], args[1], args[2],  args[3], args[4], args[5], Py_None,
                                   Py_None, Py_None, Py_None, Py_None, Py_None, Py_None, Py_None};
    return door_transfer_run(op_args, transfer_keywords.defaults, &x, MODE_CALL);
  }
  PyObject *a[16];
  if (kvjit_call_bind(&transfer_spec, args, nargs, kwnames, a)) return NULL;
  PyObject *op_args[14] = {a[0], a[1], a[2], a[3], a[4], a[5], Py_None, Py_None, Py_None, Py_None, Py_None,
                           a[11] ? a[11] : Py_None, a[12] ? a[12] : Py_None, Py_None};
  PyObject *const given[8] = {a[6], a[7], a[8], a[9], a[10], a[13], a[14], a[15]};
  int64_t scalars[6];
  if (keyword_scalars(&transfer_keywords, given, scalars, &x)) return NULL;
  return door_transfer_run(op_args, scalars, &x, MODE_CALL);
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
  kvjit_tensor_view view, *v = &view;
  if (kvjit_door_read(args[0], name, 0, v, &t)) {
    kvjit_door_release(&t);
    return NULL;
  }
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
    if (ok && (v->device_type != KVJIT_DL_CUDA || kvjit_door_default_stream(&t, v->device_index, &stream) == 0))
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
  PyObject **keep[5] = {&door_error_factory, &g_store_scalars, &g_transfer_scalars, &g_fast_cache_dtype,
                        &g_fast_layout};
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
  if (!door_ready()) return NULL;
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

/* Each docstring starts with the call's signature (inspect.signature reads it; a test compares it
 * with _C.pyi). The op-argument calls take their arguments by position only. */
#define OP_STORE \
  "k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, cache_dtype, layout"
#define OP_TRANSFER                                                                                           \
  "src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots, dst_num_slots, split, pdl, row_elements, " \
  "k_scale, v_scale, max_ctas"

static PyMethodDef methods[] = {
    {"init", FASTCALL(c_init),
     "init($module, libkvjit_path, default_context, error, store_scalars, transfer_scalars, fast_cache_dtype, "
     "fast_layout, /)\n--\n\nResolve libkvjit (the copy the package loaded) and libcuda; keep the package's error "
     "factory, keyword normalisers and fast spellings."},
    {"store_kv_cache", KEYWORDS(c_store_kv_cache), STORE_KV_CACHE_DOC},
    {"transfer_kv", KEYWORDS(c_transfer_kv), TRANSFER_KV_DOC},
    {"store_kv_cache_op", FASTCALL(door_store_op),
     "store_kv_cache_op($module, " OP_STORE ", stream=None, context=None, /)\n--\n\n"
     "The store with the op's arguments (the torch op's CPU path)."},
    {"store_kv_cache_prepare", FASTCALL(door_store_prepare),
     "store_kv_cache_prepare($module, " OP_STORE ", stream=None, context=None, batch=None, /)\n--\n\n"
     "Load the store's variant without launching."},
    {"store_kv_args", FASTCALL(door_store_args),
     "store_kv_args($module, " OP_STORE ", stream=None, /)\n--\n\n"
     "The kvjit_store_kv_args the rules make, then the K and V kvjit_layout they point at, as bytes."},
    {"transfer_kv_op", FASTCALL(door_transfer_op),
     "transfer_kv_op($module, " OP_TRANSFER ", stream=None, context=None, /)\n--\n\n"
     "The transfer with the op's arguments (the torch op's CPU path)."},
    {"transfer_kv_prepare", FASTCALL(door_transfer_prepare),
     "transfer_kv_prepare($module, " OP_TRANSFER ", stream=None, context=None, batch=None, /)\n--\n\n"
     "Load the transfer's variant without launching."},
    {"transfer_kv_args", FASTCALL(door_transfer_args),
     "transfer_kv_args($module, " OP_TRANSFER ", stream=None, /)\n--\n\n"
     "The kvjit_transfer_kv_args the rules make, then the four kvjit_layout they point at, as bytes."},
    {"describe", FASTCALL(c_describe),
     "describe($module, obj, name, /)\n--\n\n"
     "(data, shape, strides, itemsize, dtype, device_type, device_index, stream) of a tensor as the door reads it."},
    {"register_torch", FASTCALL(c_register_torch),
     "register_torch($module, libtorch_cpu, libtorch_cuda, namespace, dispatch_key, /)\n--\n\n"
     "Register the torch op kernels (their schemas defined) on a dispatch key."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "kvjit._C",
                                    "kvjit's native door: tensors of any framework -> kvjit's ops.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void);
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
