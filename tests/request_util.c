/* Store requests written by hand (request_util.h). */
#include "request_util.h"

#include <stdarg.h>
#include <string.h>

const int32_t codes[KVJIT_TENSOR_KIND_COUNT] = {99, 5, 15, 6, 23, 24, 0, 1, 3, 4, 7, 2, 27,
                                                28, 29, 11, 8, 9, 10, 25, 26, 44, 45};
static const int64_t itemsizes[KVJIT_TENSOR_KIND_COUNT] = {8, 2, 2, 4, 1, 1, 1, 1, 4, 8, 8, 2, 2, 4, 8, 1, 4, 8, 16,
                                                           1, 1, 1, 1};

void make(tensor *t, kvjit_tensor_kind kind, uintptr_t data, int ndim, ...) {
  memset(t, 0, sizeof *t);
  va_list ap;
  va_start(ap, ndim);
  for (int i = 0; i < ndim; i++) t->sizes[i] = va_arg(ap, int64_t);
  va_end(ap);
  int64_t step = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    t->strides[i] = step;
    step *= t->sizes[i] > 0 ? t->sizes[i] : 1;
  }
  t->view = (kvjit_tensor_view){1, data, ndim, t->sizes, t->strides, itemsizes[kind], kind, codes[kind], DEV_CUDA, 0};
}

void alias(tensor *to, const tensor *from, uintptr_t data) {
  *to = *from;
  to->view.sizes = to->sizes;
  to->view.strides = to->strides;
  to->view.data = data;
}

kvjit_request_error run(request *r) {
  r->req.k = r->k.view;
  r->req.v = r->v.view;
  r->req.k_cache = r->k_cache.view;
  r->req.v_cache = r->v_cache.view;
  r->req.indices = r->indices.view;
  r->req.k_scale = r->k_scale.view;
  r->req.v_scale = r->v_scale.view;
  return kvjit_store_request_args(&r->req, &r->args, &r->layouts, r->msg, sizeof r->msg);
}
