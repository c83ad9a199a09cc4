/* Python objects -> kvjit_tensor_view: the DLPack exchange API, __cuda_array_interface__, __dlpack__. */
#include "tensors.h"

#include <stdio.h>
#include <string.h>

/* ---- the DLPack exchange API (type(t).__dlpack_c_exchange_api__, DLPack 1.x) ----------------- */

typedef struct dl_api_header {
  struct {
    uint32_t major, minor;
  } version;
  struct dl_api_header *prev_api;
} dl_api_header;

typedef struct {
  dl_api_header header;
  void *managed_tensor_allocator;
  void *managed_tensor_from_py_object_no_sync;
  void *managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void *py_object, kvjit_dl_tensor *out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} dl_exchange_api;

/* Types seen, with their API or NULL (none): one pointer compare per tensor once warm. Filled
 * under the GIL; a type stays referenced for the process's life. */
enum { API_CACHE = 8 };
static struct {
  PyTypeObject *type;
  const dl_exchange_api *api;
} g_apis[API_CACHE];

/* A type not seen yet: its API (or none), remembered (out of line: the call after is a compare). */
__attribute__((noinline)) static const dl_exchange_api *first_exchange_api_of(PyTypeObject *type) {
  const dl_exchange_api *api = NULL;
  PyObject *capsule = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
  if (capsule != NULL) {
    api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);
    if (api != NULL && (api->header.version.major != 1 || api->dltensor_from_py_object_no_sync == NULL ||
                        api->current_work_stream == NULL))
      api = NULL;
  }
  PyErr_Clear();
  for (int i = 0; i < API_CACHE; i++) {
    if (g_apis[i].type == NULL) {
      Py_INCREF(type);
      g_apis[i].type = type;
      g_apis[i].api = api;
      break;
    }
  }
  return api;
}

static const dl_exchange_api *exchange_api_of(PyTypeObject *type) {
  for (int i = 0; i < API_CACHE && g_apis[i].type; i++)
    if (g_apis[i].type == type) return g_apis[i].api;
  return first_exchange_api_of(type);
}

static int read_dl(const kvjit_dl_tensor *dl, const char *name, int trusted, kvjit_tensor_view *view,
                   kvjit_door_tensor *out) {
  char msg[256];
  if (kvjit_dl_view(dl, name, trusted, view, &out->dims, msg, sizeof msg)) {
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
  }
  return 0;
}

/* ---- __cuda_array_interface__ ---------------------------------------------------------------- */

/* Interned once (under the GIL): dict lookups and attribute probes by pointer, no string made per call. */
static PyObject *s_cai, *s_shape, *s_typestr, *s_data, *s_strides, *s_mask, *s_stream;

static int intern_names(void) {
  if (s_cai != NULL) return 0;
  const char *text[7] = {"__cuda_array_interface__", "shape", "typestr", "data", "strides", "mask", "stream"};
  PyObject **out[7] = {&s_cai, &s_shape, &s_typestr, &s_data, &s_strides, &s_mask, &s_stream};
  for (int i = 6; i >= 0; i--) /* s_cai last: it marks the set complete */
    if (*out[i] == NULL && (*out[i] = PyUnicode_InternFromString(text[i])) == NULL) return -1;
  return 0;
}

/* obj.name into *out (NULL when absent), without building an AttributeError: -1 on another error. */
static int optional_attr(PyObject *obj, PyObject *name, PyObject **out) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyObject_GetOptionalAttr(obj, name, out);
#else
  return _PyObject_LookupAttr(obj, name, out);
#endif
}

static PyObject *item(PyObject *dict, PyObject *key) { return PyDict_GetItemWithError(dict, key); }

/* A typestr's kind ('<f2' ...); its own code, so equal typestrs are equal types. */
static int cai_type(const char *typestr, const char *name, kvjit_tensor_view *v) {
  size_t n = strlen(typestr);
  if (n >= 1 && typestr[0] == '>') {
    PyErr_Format(PyExc_TypeError, "%s: big-endian data ('%s') is not supported", name, typestr);
    return -1;
  }
  int itemsize = 0;
  for (size_t i = 2; i < n && i < 5 && typestr[i] >= '0' && typestr[i] <= '9'; i++)
    itemsize = itemsize * 10 + (typestr[i] - '0');
  int digits_only = n == 3 || n == 4; /* "<f2" ... "<c16" */
  for (size_t i = 2; i < n; i++) digits_only &= typestr[i] >= '0' && typestr[i] <= '9';
  if (!digits_only || itemsize <= 0 || itemsize > 16) {
    PyErr_Format(PyExc_TypeError, "%s: unknown typestr '%s' in __cuda_array_interface__", name, typestr);
    return -1;
  }
  static const struct {
    const char *text;
    kvjit_tensor_kind kind;
  } kinds[] = {{"f2", KVJIT_TENSOR_F16}, {"f4", KVJIT_TENSOR_F32},   {"f8", KVJIT_TENSOR_F64},
               {"u1", KVJIT_TENSOR_U8},  {"i1", KVJIT_TENSOR_I8},    {"b1", KVJIT_TENSOR_BOOL},
               {"i2", KVJIT_TENSOR_I16}, {"u2", KVJIT_TENSOR_U16},   {"i4", KVJIT_TENSOR_I32},
               {"u4", KVJIT_TENSOR_U32}, {"i8", KVJIT_TENSOR_I64},   {"u8", KVJIT_TENSOR_U64},
               {"c8", KVJIT_TENSOR_C64}, {"c16", KVJIT_TENSOR_C128}};
  v->kind = KVJIT_TENSOR_OTHER;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(typestr + 1, kinds[i].text) == 0) v->kind = kinds[i].kind;
  int32_t code = 0x40000000;
  for (size_t i = 1; i < n; i++) code = code * 31 + (unsigned char)typestr[i];
  v->code = code;
  v->itemsize = itemsize;
  return 0;
}

/* An int item of a CAI sequence into @p out, within [low, high]; -1 (no exception) when not. */
static int cai_int(PyObject *item, long long low, unsigned long long high, unsigned long long *out) {
  if (!PyLong_Check(item) || PyBool_Check(item)) return -1;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(item);
    if (PyErr_Occurred()) {
      PyErr_Clear();
      return -1;
    }
    if (u > high) return -1;
    *out = u;
    return 0;
  }
  if (overflow < 0 || (v == -1 && PyErr_Occurred()) || v < low || (v > 0 && (unsigned long long)v > high)) {
    PyErr_Clear();
    return -1;
  }
  *out = (unsigned long long)v;
  return 0;
}

static int read_cai(PyObject *cai, const char *name, kvjit_tensor_view *v, kvjit_door_tensor *out) {
  memset(v, 0, sizeof *v);
  PyObject *shape = PyDict_Check(cai) ? item(cai, s_shape) : NULL;
  PyObject *typestr = PyDict_Check(cai) ? item(cai, s_typestr) : NULL;
  PyObject *data = PyDict_Check(cai) ? item(cai, s_data) : NULL;
  if (PyErr_Occurred()) return -1;
  if (shape == NULL || !PyTuple_Check(shape) || typestr == NULL || !PyUnicode_Check(typestr) || data == NULL ||
      !PyTuple_Check(data) || PyTuple_GET_SIZE(data) < 1) {
    PyErr_Format(PyExc_TypeError, "%s: malformed __cuda_array_interface__ (shape, typestr and data are needed)",
                 name);
    return -1;
  }
  unsigned long long ptr = 0;
  PyObject *p = PyTuple_GET_ITEM(data, 0);
  if (p != Py_None && cai_int(p, 0, UINT64_MAX, &ptr)) {
    PyErr_Format(PyExc_ValueError, "%s: data pointer must be an int 0..2**64-1, got %R", name, p);
    return -1;
  }
  Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (ndim > KVJIT_DL_MAX_DIMS) {
    PyErr_Format(PyExc_ValueError, "%s: %zd dims, at most %d are supported", name, ndim, KVJIT_DL_MAX_DIMS);
    return -1;
  }
  for (Py_ssize_t i = 0; i < ndim; i++) {
    unsigned long long size;
    if (cai_int(PyTuple_GET_ITEM(shape, i), 0, INT64_MAX, &size)) {
      PyErr_Format(PyExc_ValueError, "%s: shape %R: each size must be an int 0..2**63-1", name, shape);
      return -1;
    }
    out->dims.sizes[i] = (int64_t)size;
  }
  const char *ts = PyUnicode_AsUTF8(typestr);
  if (ts == NULL || cai_type(ts, name, v)) return -1;
  PyObject *mask = item(cai, s_mask);
  if (mask != NULL && mask != Py_None) {
    PyErr_Format(PyExc_TypeError, "%s: masked arrays are not supported", name);
    return -1;
  }
  PyObject *strides = item(cai, s_strides);
  if (strides == NULL || strides == Py_None) {
    int64_t step = 1;
    for (Py_ssize_t i = ndim - 1; i >= 0; i--) {
      out->dims.strides[i] = step;
      if (out->dims.sizes[i] > 1 && __builtin_mul_overflow(step, out->dims.sizes[i], &step)) step = INT64_MAX;
    }
  } else {
    if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != ndim) {
      PyErr_Format(PyExc_TypeError, "%s: %zd strides for %zd dims", name,
                   PyTuple_Check(strides) ? PyTuple_GET_SIZE(strides) : (Py_ssize_t)-1, ndim);
      return -1;
    }
    for (Py_ssize_t i = 0; i < ndim; i++) {
      PyObject *item = PyTuple_GET_ITEM(strides, i);
      int overflow = 0;
      long long s = PyLong_Check(item) && !PyBool_Check(item) ? PyLong_AsLongLongAndOverflow(item, &overflow) : 0;
      if (!PyLong_Check(item) || PyBool_Check(item) || overflow || (s == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: strides %R: each must be an int of 64 bits", name, strides);
        return -1;
      }
      if (s % v->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: stride %lld bytes is not a multiple of the %lld-byte element", name, s,
                     (long long)v->itemsize);
        return -1;
      }
      out->dims.strides[i] = s / v->itemsize;
    }
  }
  PyObject *stream = item(cai, s_stream);
  if (stream != NULL && stream != Py_None) {
    out->stream_hint = PyLong_AsVoidPtr(stream);
    if (out->stream_hint == NULL && PyErr_Occurred()) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "%s: __cuda_array_interface__ stream %R is not a handle", name, stream);
      return -1;
    }
  }
  v->present = 1;
  v->data = (uintptr_t)ptr;
  v->ndim = ndim;
  v->sizes = out->dims.sizes;
  v->strides = out->dims.strides;
  v->device_type = KVJIT_DL_CUDA;
  v->device_index = -1; /* the protocol does not say: the other tensors' device */
  char msg[256];
  if (kvjit_view_check_extent(v, name, msg, sizeof msg)) {
    PyErr_SetString(PyExc_ValueError, msg);
    return -1;
  }
  return 0;
}

/* ---- __dlpack__ ----------------------------------------------------------------------------- */

static int read_dlpack(PyObject *obj, const char *name, kvjit_tensor_view *view, kvjit_door_tensor *out) {
  /* The capsule is not consumed (not renamed "used_dltensor"): releasing it runs the producer's
   * deleter, while obj itself keeps the memory alive for the call. */
  PyObject *capsule = PyObject_CallMethod(obj, "__dlpack__", NULL);
  if (capsule == NULL) return -1;
  out->keep = capsule;
  const kvjit_dl_tensor *dl = NULL;
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    const kvjit_dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
    dl = m ? &m->dl_tensor : NULL;
  } else if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    const kvjit_dl_managed_versioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (m && m->major != 1) {
      PyErr_Format(PyExc_TypeError, "%s: DLPack %u.%u is not supported (1.x is)", name, m->major, m->minor);
      return -1;
    }
    dl = m ? &m->dl_tensor : NULL;
  }
  if (dl == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s: __dlpack__() returned %s, not a DLPack capsule", name,
                 Py_TYPE(capsule)->tp_name);
    return -1;
  }
  if (dl->dtype.lanes != 1 || dl->dtype.bits % 8) {
    PyErr_Format(PyExc_TypeError, "%s: DLPack dtype code %d bits %d lanes %d is not supported", name,
                 (int)dl->dtype.code, (int)dl->dtype.bits, (int)dl->dtype.lanes);
    return -1;
  }
  return read_dl(dl, name, 0, view, out);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

/* The exchange API failed to read a tensor of its own type: its error, as a TypeError naming it. */
__attribute__((noinline)) static int exchange_failed(const char *name) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_Format(PyExc_TypeError, "%s: cannot be read through DLPack (%S)", name, value ? value : Py_None);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return -1;
}

/* An object of a type without the exchange API: __cuda_array_interface__, else __dlpack__. */
__attribute__((noinline)) static int read_protocol(PyObject *obj, const char *name, kvjit_tensor_view *view,
                                                   kvjit_door_tensor *out) {
  PyObject *cai = NULL;
  if (intern_names() || optional_attr(obj, s_cai, &cai) < 0) return -1;
  if (cai != NULL) {
    int r = read_cai(cai, name, view, out);
    Py_DECREF(cai);
    return r;
  }
  if (PyObject_HasAttrString(obj, "__dlpack__")) return read_dlpack(obj, name, view, out);
  PyErr_Format(PyExc_TypeError,
               "%s: expected a CUDA tensor (torch.Tensor, or an object with __cuda_array_interface__ or "
               "__dlpack__), got %s",
               name, Py_TYPE(obj)->tp_name);
  return -1;
}

/* One tensor argument: a torch tensor through its exchange API inline (most of a call's reading),
 * None and the protocols out of line. */
__attribute__((always_inline)) static inline int read_one(PyObject *obj, const char *name, int optional,
                                                          kvjit_tensor_view *view, kvjit_door_tensor *out) {
  out->keep = NULL;
  out->stream_hint = NULL;
  const dl_exchange_api *api = obj != Py_None ? exchange_api_of(Py_TYPE(obj)) : NULL;
  out->exchange_api = api;
  if (api == NULL) {
    if (obj != Py_None || !optional) return read_protocol(obj, name, view, out);
    memset(view, 0, sizeof *view);
    return 0;
  }
  kvjit_dl_tensor dl;
  if (api->dltensor_from_py_object_no_sync(obj, &dl) != 0) return exchange_failed(name);
  if (kvjit_dl_view_borrowed(&dl, view)) return 0;
  return read_dl(&dl, name, 1, view, out);
}

int kvjit_door_read(PyObject *obj, const char *name, int optional, kvjit_tensor_view *view, kvjit_door_tensor *out) {
  return read_one(obj, name, optional, view, out);
}

void kvjit_door_release(kvjit_door_tensor *t) { Py_CLEAR(t->keep); }

/* A CUDA tensor whose protocol names no device (__cuda_array_interface__) is on the others' one. */
static void fill_devices(kvjit_tensor_view *const *views, int n) {
  int32_t known = -1;
  int unknown = 0; /* only __cuda_array_interface__ leaves a device unnamed: most calls stop after one pass */
  for (int i = 0; i < n; i++) {
    if (!views[i]->present || views[i]->device_type != KVJIT_DL_CUDA) continue;
    if (views[i]->device_index < 0) unknown = 1;
    else if (known < 0) known = views[i]->device_index;
  }
  for (int i = 0; i < n && unknown; i++)
    if (views[i]->present && views[i]->device_type == KVJIT_DL_CUDA && views[i]->device_index < 0)
      views[i]->device_index = known;
}

int kvjit_door_read_all(PyObject *const *objs, const char *const *names, const int *optional, int n,
                        kvjit_tensor_view *const *views, kvjit_door_tensor *t, int *n_kept) {
  int unnamed = 0, kept = 0, i;
  for (i = 0; i < n; i++) {
    if (read_one(objs[i], names[i], optional[i], views[i], &t[i])) break;
    unnamed |= views[i]->device_index < 0;
    kept |= t[i].keep != NULL;
  }
  *n_kept = i < n ? i + 1 : kept ? n : 0; /* a failed read may have kept its capsule too */
  if (i < n) return -1;
  if (unnamed) fill_devices(views, n);
  return 0;
}

int kvjit_door_default_stream(const kvjit_door_tensor *t, int32_t device, void **stream) {
  *stream = t->stream_hint;
  const dl_exchange_api *api = t->exchange_api;
  if (api != NULL && api->current_work_stream(KVJIT_DL_CUDA, device, stream) != 0) return -1;
  return 0;
}
