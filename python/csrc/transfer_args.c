/* Tensor shapes -> kvjit_transfer_kv_args, with the Python binding's rules and messages. */
#include "transfer_args.h"

#include <stdio.h>

#include "view_rules.h"

#define refuse kvjit_request_refuse
#define dims kvjit_request_dims
#define dtype_of kvjit_request_dtype
#define is_raw kvjit_tensor_kind_is_raw

typedef struct side {
  int64_t row_bytes;
  kvjit_cache_view view; /* slots, and the flat stride (bytes) or the layout */
} side;

/* The elements after @p t's first dim; refused below two dims. */
static kvjit_request_error after_first_dim(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                           int64_t *out) {
  char a[96];
  if (t->ndim < 2)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: expected [slots, ...] with at least two dims, got shape %s",
                  name, dims(a, sizeof a, t->sizes, t->ndim));
  *out = 1;
  for (int64_t i = 1; i < t->ndim; i++) *out *= t->sizes[i];
  return KVJIT_REQUEST_OK;
}

/* The element type kvjit converts from or to, or BYTES. */
static kvjit_dtype dtype_kind(const kvjit_tensor_view *t) {
  switch (t->kind) {
  case KVJIT_TENSOR_F16: return KVJIT_DTYPE_F16;
  case KVJIT_TENSOR_BF16: return KVJIT_DTYPE_BF16;
  case KVJIT_TENSOR_F32: return KVJIT_DTYPE_F32;
  case KVJIT_TENSOR_FP8_E4M3: return KVJIT_DTYPE_FP8_E4M3;
  case KVJIT_TENSOR_FP8_E5M2: return KVJIT_DTYPE_FP8_E5M2;
  default: return KVJIT_DTYPE_BYTES;
  }
}

/* Source and destination dtypes that convert on the way: fp8 <-> float16/bfloat16/float32. */
static int converts(const kvjit_tensor_view *src, const kvjit_tensor_view *dst) {
  const kvjit_dtype a = dtype_kind(src), b = dtype_kind(dst);
  const int a8 = a == KVJIT_DTYPE_FP8_E4M3 || a == KVJIT_DTYPE_FP8_E5M2, b8 = b == KVJIT_DTYPE_FP8_E4M3 || b == KVJIT_DTYPE_FP8_E5M2;
  return a != KVJIT_DTYPE_BYTES && b != KVJIT_DTYPE_BYTES && a8 != b8;
}

/* Both caches read for rows of @p s_row source bytes: the source's view, then the destination's
 * (rows of the destination's own type when converting). */
static kvjit_request_error views_of(kvjit_request_msg *e, const char *src_name, const kvjit_tensor_view *src,
                                    const char *dst_name, const kvjit_tensor_view *dst, int64_t s_row, int conv,
                                    const char *what, side *s, side *d) {
  kvjit_request_error r;
  s->row_bytes = s_row;
  d->row_bytes = conv ? s_row / src->itemsize * dst->itemsize : s_row;
  if ((r = kvjit_request_cache_view(e, src_name, src, s->row_bytes, what, KVJIT_CACHE_FORM_VIEW, &s->view)))
    return r;
  return kvjit_request_cache_view(e, dst_name, dst, d->row_bytes, what, KVJIT_CACHE_FORM_VIEW, &d->view);
}

/* One cache pair's K or V side: rows of the source (and, converting, of the destination in its
 * own type), slots and views of both. A row is @p row_elements source elements, or (-1)
 * everything after the source's first dim; when the destination has less there and cannot
 * hold that, everything after its first dim instead: a paged or per-layer host view
 * ([pages, page_size, H, D]) loaded into a device pool ([size, H, D]) moves [H, D] rows, as the
 * other direction does. */
static kvjit_request_error pair_of(kvjit_request_msg *e, const char *src_name, const kvjit_tensor_view *src,
                                   const char *dst_name, const kvjit_tensor_view *dst, int64_t row_elements,
                                   const char *what, side *s, side *d) {
  kvjit_request_error r;
  if (src->code != dst->code && !is_raw(src->kind) && !is_raw(dst->kind) && !converts(src, dst))
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "%s: dtype %s differs from %s's %s (view both as uint8 to move raw "
                  "bytes; fp8 and float16/bfloat16/float32 convert)", dst_name, dtype_of(dst).text, src_name,
                  dtype_of(src).text);
  const int conv = converts(src, dst);
  int64_t src_after = 0, dst_after = 0; /* set on success; -O3 cannot see it through after_first_dim */
  if ((r = after_first_dim(e, src_name, src, &src_after)) || (r = after_first_dim(e, dst_name, dst, &dst_after)))
    return r;
  if (row_elements != -1) {
    if (row_elements < 1 || row_elements > ((int64_t)1 << 31))
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "row_elements: must be None or 1..2**31, got %lld",
                    (long long)row_elements);
    return views_of(e, src_name, src, dst_name, dst, row_elements * src->itemsize, conv, what, s, d);
  }
  r = views_of(e, src_name, src, dst_name, dst, src_after * src->itemsize, conv, what, s, d);
  /* The destination's row, in source bytes (converting: its elements; raw views: its bytes). */
  int64_t dst_row = conv ? dst_after * src->itemsize : dst_after * dst->itemsize;
  /* Only a source with more dims than the destination (a paged or per-layer host view) falls back
   * to the destination's row: two views of one rank must agree on the row as they are. */
  if (r == KVJIT_REQUEST_OK || src->ndim <= dst->ndim || dst_row >= src_after * src->itemsize) return r;
  char other[256];
  kvjit_request_msg quiet = {other, sizeof other};
  side s2, d2;
  if (views_of(&quiet, src_name, src, dst_name, dst, dst_row, conv, what, &s2, &d2) != KVJIT_REQUEST_OK)
    return r; /* today's message: the destination cannot hold the source's rows */
  *s = s2;
  *d = d2;
  return KVJIT_REQUEST_OK;
}

/* A side's view into the args' stride (flat) or layout pointer (strided, its stride then 0). */
static void set_view(const side *s, kvjit_layout *storage, int64_t *stride, const kvjit_layout **layout) {
  *stride = s->view.strided ? 0 : s->view.slot_stride;
  if (s->view.strided) *storage = s->view.layout;
  *layout = s->view.strided ? storage : NULL;
}

static kvjit_request_error indices_of(kvjit_request_msg *e, const char *name, const kvjit_tensor_view *t,
                                      int64_t *stride) {
  char a[96];
  if (t->ndim != 1)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: expected shape [B], got %s", name,
                  dims(a, sizeof a, t->sizes, t->ndim));
  if (t->kind != KVJIT_TENSOR_I32 && t->kind != KVJIT_TENSOR_I64)
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "%s: dtype must be int32 or int64, got %s", name, dtype_of(t).text);
  *stride = t->sizes[0] > 1 ? t->strides[0] : 1;
  if (*stride < 1)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: stride must be >= 1 element, got %lld", name, (long long)*stride);
  if (t->data % (uintptr_t)t->itemsize)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: pointer %#llx is not aligned to its %lld-byte elements", name,
                  (unsigned long long)t->data, (long long)t->itemsize);
  return KVJIT_REQUEST_OK;
}

static kvjit_request_error num_slots_of(kvjit_request_msg *e, const char *name, int64_t given, int64_t slots,
                                        int64_t *out) {
  if (given == -1) {
    *out = slots;
    return KVJIT_REQUEST_OK;
  }
  if (given < 1 || given > slots)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: must be 1..%lld, got %lld", name, (long long)slots,
                  (long long)given);
  *out = given;
  return KVJIT_REQUEST_OK;
}

/* A conversion's scales: none, per tensor (1 each) or per head (H each, dividing both rows). */
static kvjit_request_error scales_of(kvjit_request_msg *e, const kvjit_transfer_request *req, int64_t k_elems,
                                     int64_t v_elems, kvjit_transfer_kv_args *args) {
  const kvjit_tensor_view *ks = &req->k_scale, *vs = &req->v_scale;
  const int has_v = req->src_v.present;
  kvjit_request_error r;
  if (!ks->present && !vs->present) return KVJIT_REQUEST_OK;
  if (args->dst_dtype == KVJIT_DTYPE_BYTES)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: scales need a conversion (an fp8 source into a float16/bfloat16/"
                  "float32 destination, or the other way)", ks->present ? "k_scale" : "v_scale");
  if (!ks->present) return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "k_scale: None while v_scale is given");
  if (vs->present != has_v)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, has_v ? "v_scale: None while k_scale is given" :
                  "v_scale: given without src_v");
  int64_t count = 0, v_count = 0;
  if ((r = kvjit_request_scale(e, "k_scale", ks, &args->k_scale, &count))) return r;
  if (has_v && (r = kvjit_request_scale(e, "v_scale", vs, &args->v_scale, &v_count))) return r;
  if (has_v && v_count != count)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v_scale: %lld scales, k_scale has %lld (both per tensor or both per "
                  "head)", (long long)v_count, (long long)count);
  if (count == 1) {
    args->scale_kind = KVJIT_SCALE_PER_TENSOR;
    return KVJIT_REQUEST_OK;
  }
  if (k_elems % count || (has_v && v_elems % count))
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "k_scale: %lld heads do not divide rows of %lld (K) and %lld (V) "
                  "elements", (long long)count, (long long)k_elems, (long long)v_elems);
  args->scale_kind = KVJIT_SCALE_PER_HEAD;
  args->num_heads = count;
  return KVJIT_REQUEST_OK;
}

static kvjit_location where(const kvjit_tensor_view *t, int32_t device_type) {
  return t->device_type == device_type ? KVJIT_LOCATION_DEVICE : KVJIT_LOCATION_HOST;
}

/* Every device tensor on one device: the first one's. */
static kvjit_request_error one_device(kvjit_request_msg *e, const kvjit_transfer_request *req, int32_t device_type,
                                      int32_t *device) {
  const kvjit_tensor_view *t[] = {&req->src_k, &req->dst_k,       &req->src_v,   &req->dst_v,
                                  &req->src_indices, &req->dst_indices, &req->k_scale, &req->v_scale};
  static const char *names[] = {"src_k", "dst_k", "src_v", "dst_v", "src_indices", "dst_indices", "k_scale",
                                "v_scale"};
  *device = -1;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    if (!t[i]->present || t[i]->device_type != device_type) continue;
    if (*device < 0)
      *device = t[i]->device_index;
    else if (t[i]->device_index != *device)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: on cuda:%d, the transfer runs on cuda:%d", names[i],
                    (int)t[i]->device_index, (int)*device);
  }
  return KVJIT_REQUEST_OK;
}

kvjit_request_error kvjit_transfer_request_args(const kvjit_transfer_request *req, int32_t device_type,
                                                kvjit_transfer_kv_args *args, kvjit_transfer_layouts *layouts,
                                                int32_t *device, char *msg, size_t msg_size) {
  kvjit_request_msg e = {msg, msg_size};
  if (msg_size) msg[0] = '\0';
  *args = (kvjit_transfer_kv_args)KVJIT_TRANSFER_KV_ARGS_INIT;
  kvjit_request_error r;
  if (!req->src_k.present) return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "src_k: expected a tensor, got None");
  if (!req->dst_k.present) return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "dst_k: expected a tensor, got None");
  side sk, dk, sv, dv; /* V's are filled when V is given; without it only its row_bytes (0) is read */
  sv.row_bytes = 0;
  if ((r = pair_of(&e, "src_k", &req->src_k, "dst_k", &req->dst_k, req->row_elements, "K", &sk, &dk))) return r;
  int64_t src_slots = sk.view.slots, dst_slots = dk.view.slots;
  if (req->src_v.present != req->dst_v.present)
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "%s: None while the other is given (pass both, or neither to move K "
                  "only)", req->src_v.present ? "dst_v" : "src_v");
  kvjit_location src = where(&req->src_k, device_type), dst = where(&req->dst_k, device_type);
  if (req->src_v.present) {
    if (where(&req->src_v, device_type) != src)
      return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "src_v: on the other side of the link from src_k");
    if (where(&req->dst_v, device_type) != dst)
      return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "dst_v: on the other side of the link from dst_k");
    if ((r = pair_of(&e, "src_v", &req->src_v, "dst_v", &req->dst_v, req->row_elements, "V", &sv, &dv))) return r;
    if (sv.view.slots < src_slots) src_slots = sv.view.slots;
    if (dv.view.slots < dst_slots) dst_slots = dv.view.slots;
  }
  const kvjit_tensor_view *si = &req->src_indices, *di = &req->dst_indices;
  if (!si->present) return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "src_indices: expected a tensor, got None");
  if (!di->present) return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "dst_indices: expected a tensor, got None");
  if ((r = indices_of(&e, "src_indices", si, &args->src_index_stride))) return r;
  if (di->ndim == 1 && si->ndim == 1 && di->sizes[0] != si->sizes[0])
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "dst_indices: %lld slot ids, src_indices has %lld",
                  (long long)di->sizes[0], (long long)si->sizes[0]);
  if ((r = indices_of(&e, "dst_indices", di, &args->dst_index_stride))) return r;
  if (di->kind != si->kind)
    return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "dst_indices: dtype %s differs from src_indices' %s",
                  dtype_of(di).text, dtype_of(si).text);
  if ((r = one_device(&e, req, device_type, device))) return r;
  if ((r = num_slots_of(&e, "src_num_slots", req->src_num_slots, src_slots, &args->src_num_slots)) ||
      (r = num_slots_of(&e, "dst_num_slots", req->dst_num_slots, dst_slots, &args->dst_num_slots)))
    return r;
  if (req->split < 0 || req->split > INT32_MAX)
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "split: must be 0..%d, got %lld", INT32_MAX, (long long)req->split);
  if (req->pdl != KVJIT_PDL_AUTO && req->pdl != KVJIT_PDL_ON && req->pdl != KVJIT_PDL_OFF)
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "pdl: must be %d (auto), %d (on) or %d (off), got %lld",
                  KVJIT_PDL_AUTO, KVJIT_PDL_ON, KVJIT_PDL_OFF, (long long)req->pdl);
  args->src_k = (const void *)req->src_k.data;
  args->dst_k = (void *)req->dst_k.data;
  args->src_v = req->src_v.present ? (const void *)req->src_v.data : NULL;
  args->dst_v = req->dst_v.present ? (void *)req->dst_v.data : NULL;
  args->src_indices = (const void *)si->data;
  args->dst_indices = (const void *)di->data;
  args->index_type = si->kind == KVJIT_TENSOR_I32 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
  args->batch = si->sizes[0];
  args->k_row_bytes = sk.row_bytes;
  args->v_row_bytes = sv.row_bytes;
  set_view(&sk, &layouts->src_k, &args->src_k_stride, &args->src_k_layout);
  set_view(&dk, &layouts->dst_k, &args->dst_k_stride, &args->dst_k_layout);
  if (req->src_v.present) {
    set_view(&sv, &layouts->src_v, &args->src_v_stride, &args->src_v_layout);
    set_view(&dv, &layouts->dst_v, &args->dst_v_stride, &args->dst_v_layout);
  }
  args->src = src;
  args->dst = dst;
  args->split = (int)req->split;
  args->pdl = (kvjit_pdl_mode)req->pdl;
  if (req->max_ctas < KVJIT_TRANSFER_KV_ALL_CTAS || req->max_ctas > INT32_MAX)
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "max_ctas: must be 0 (the plan's), N >= 1 or -1 (every SM), got %lld",
                  (long long)req->max_ctas);
  args->max_ctas = (int)req->max_ctas; /* the library checks its upper bound */
  if (converts(&req->src_k, &req->dst_k)) {
    if (req->src_v.present && (dtype_kind(&req->src_v) != dtype_kind(&req->src_k) ||
                               dtype_kind(&req->dst_v) != dtype_kind(&req->dst_k)))
      return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "src_v: %s -> %s while K converts %s -> %s (one conversion for both)",
                    dtype_of(&req->src_v).text, dtype_of(&req->dst_v).text, dtype_of(&req->src_k).text,
                    dtype_of(&req->dst_k).text);
    args->src_dtype = dtype_kind(&req->src_k);
    args->dst_dtype = dtype_kind(&req->dst_k);
  } else if (req->src_v.present && converts(&req->src_v, &req->dst_v)) {
    return refuse(&e, KVJIT_REQUEST_TYPE_ERROR, "src_v: %s -> %s converts while K is copied as it is",
                  dtype_of(&req->src_v).text, dtype_of(&req->dst_v).text);
  }
  return scales_of(&e, req, sk.row_bytes / req->src_k.itemsize,
                   req->src_v.present ? sv.row_bytes / req->src_v.itemsize : 0, args);
}

int64_t kvjit_tensor_view_extent(const kvjit_tensor_view *t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t->ndim; i++) {
    if (t->sizes[i] == 0) return 0;
    last += (t->sizes[i] - 1) * (t->strides[i] < 0 ? -t->strides[i] : t->strides[i]);
  }
  return (last + 1) * t->itemsize;
}
