/*
 * The op's requests from Python objects, for the native module (module.c): the store and the
 * transfer with the op's arguments (tensors as Python objects, scalars as ints), run, prepared or
 * returned as the library's args; and the argument helpers the public calls share.
 */
#ifndef KVJIT_REQUESTS_H
#define KVJIT_REQUESTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "kvjit.h"

/* What a call gives beside the op's arguments: stream, context, batch (prepare). */
typedef struct door_extra {
  int has_stream;
  void *stream;
  kvjit_context *ctx;
  PyObject *batch; /* prepare's batch, or NULL / None */
} door_extra;

enum door_mode { MODE_CALL, MODE_PREPARE, MODE_ARGS };

/** error(status, name, message) -> the kvjit.Error to raise; set once by init() under the GIL. */
extern PyObject *door_error_factory;

/** 1 once init() resolved the library; else 0 with RuntimeError set. */
int door_ready(void);

/** An int argument of the op (int64); TypeError / ValueError naming @p name otherwise. */
int door_int_arg(PyObject *obj, const char *name, int64_t *out);

/** stream (NULL / None or an int CUstream handle) and context (NULL / None or an int kvjit_context handle). */
int door_stream_and_context(PyObject *stream, PyObject *context, door_extra *x);

/** The store of @p objs (k, v, k_cache, v_cache, indices, k_scale, v_scale; None: absent) with the
 *  op's scalars (num_slots, skip_slot, split, pdl, cache_dtype, layout). */
PyObject *door_store_run(PyObject *const objs[7], const int64_t scalars[6], const door_extra *x,
                         enum door_mode mode);

/** The transfer of @p args (the op's 14 arguments, in order; only the tensors are read) with the
 *  op's scalars (src_num_slots, dst_num_slots, split, pdl, row_elements, max_ctas). */
PyObject *door_transfer_run(PyObject *const *args, const int64_t scalars[6], const door_extra *x,
                            enum door_mode mode);

/* The op-argument calls (METH_FASTCALL): the op's arguments, then stream, context, batch. */
PyObject *door_store_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *door_store_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *door_store_args(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *door_transfer_op(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *door_transfer_prepare(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *door_transfer_args(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
