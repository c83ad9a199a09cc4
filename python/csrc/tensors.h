/*
 * Python objects -> kvjit_tensor_view, for the native module (module.c): a torch.Tensor through
 * its type's DLPack exchange API, else __cuda_array_interface__, else __dlpack__. Every size a
 * producer gives is checked before it is used (dlpack_view.h).
 */
#ifndef KVJIT_TENSORS_H
#define KVJIT_TENSORS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dlpack_view.h"

/** What must outlive a tensor argument's view, for the call. */
typedef struct kvjit_door_tensor {
  kvjit_dl_dims dims;         /**< the view's sizes and strides, unless the producer's own outlive the call */
  PyObject *keep;             /**< a __dlpack__ capsule (its deleter runs at release), or NULL */
  const void *exchange_api;   /**< the producer's DLPack exchange API (torch), or NULL */
  void *stream_hint;          /**< __cuda_array_interface__'s stream */
} kvjit_door_tensor;

/**
 * Read @p obj into @p view (None allowed when @p optional: view->present 0), keeping in @p out
 * what the view needs. 0, or -1 with TypeError / ValueError naming @p name set (@p out is then
 * still to be released).
 */
int kvjit_door_read(PyObject *obj, const char *name, int optional, kvjit_tensor_view *view, kvjit_door_tensor *out);

/** Release what kvjit_door_read() kept. */
void kvjit_door_release(kvjit_door_tensor *t);

/**
 * Read a call's @p n tensors (kvjit_door_read() each, torch's inline), then name the device a
 * protocol left unnamed (__cuda_array_interface__) after the other CUDA tensors'. *@p n_kept: how
 * many of @p t to release (each read when one keeps a __dlpack__ capsule, else none). 0, or -1
 * with an exception set.
 */
int kvjit_door_read_all(PyObject *const *objs, const char *const *names, const int *optional, int n,
                        kvjit_tensor_view *const *views, kvjit_door_tensor *t, int *n_kept);

/**
 * The stream a call on @p t's framework goes to: torch's current stream of @p device (the
 * capturing one inside torch.cuda.graph), the __cuda_array_interface__ stream, else the legacy
 * default stream (NULL). 0, or -1 with an exception set.
 */
int kvjit_door_default_stream(const kvjit_door_tensor *t, int32_t device, void **stream);

#endif
