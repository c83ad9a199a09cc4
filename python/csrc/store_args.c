/* Tensor shapes -> kvjit_store_kv_args, with the Python binding's rules and messages. */
#include "store_args.h"

#include <stddef.h>
#include <stdio.h>

#include "view_rules.h"

/* Short names for the shared rules (view_rules.h). */
#define refuse kvjit_request_refuse
#define dims kvjit_request_dims
#define dtype_of kvjit_request_dtype
#define is_raw kvjit_tensor_kind_is_raw
typedef kvjit_request_msg request_error;

const char *kvjit_tensor_kind_name(kvjit_tensor_kind kind) {
  switch (kind) {
  case KVJIT_TENSOR_F16: return "f16";
  case KVJIT_TENSOR_BF16: return "bf16";
  case KVJIT_TENSOR_F32: return "f32";
  case KVJIT_TENSOR_FP8_E4M3: return "fp8_e4m3";
  case KVJIT_TENSOR_FP8_E5M2: return "fp8_e5m2";
  case KVJIT_TENSOR_U8: return "u8";
  case KVJIT_TENSOR_I8: return "i8";
  case KVJIT_TENSOR_I32: return "i32";
  case KVJIT_TENSOR_I64: return "i64";
  case KVJIT_TENSOR_F64: return "f64";
  case KVJIT_TENSOR_I16: return "i16";
  case KVJIT_TENSOR_U16: return "u16";
  case KVJIT_TENSOR_U32: return "u32";
  case KVJIT_TENSOR_U64: return "u64";
  case KVJIT_TENSOR_BOOL: return "bool";
  case KVJIT_TENSOR_C32: return "complex32";
  case KVJIT_TENSOR_C64: return "complex64";
  case KVJIT_TENSOR_C128: return "complex128";
  case KVJIT_TENSOR_FP8_E4M3FNUZ: return "float8_e4m3fnuz";
  case KVJIT_TENSOR_FP8_E5M2FNUZ: return "float8_e5m2fnuz";
  case KVJIT_TENSOR_FP8_E8M0FNU: return "float8_e8m0fnu";
  case KVJIT_TENSOR_FP4_E2M1FN_X2: return "float4_e2m1fn_x2";
  case KVJIT_TENSOR_OTHER:
  case KVJIT_TENSOR_KIND_COUNT: break;
  }
  return "other";
}

static int is_fp8(kvjit_tensor_kind kind) { return kind == KVJIT_TENSOR_FP8_E4M3 || kind == KVJIT_TENSOR_FP8_E5M2; }
static int is_source(kvjit_tensor_kind kind) {
  return kind == KVJIT_TENSOR_F16 || kind == KVJIT_TENSOR_BF16 || kind == KVJIT_TENSOR_F32;
}
static int same_dtype(const kvjit_tensor_view *a, const kvjit_tensor_view *b) { return a->code == b->code; }

/* k or v: [B, H, D] or [B, H*D], each token's row contiguous. */
typedef struct input_rows {
  int64_t batch, row, stride, heads; /* elements; heads 0 for [B, H*D] */
} input_rows;

static kvjit_request_error input_rows_of(request_error *e, const char *name, const kvjit_tensor_view *t,
                                         input_rows *out) {
  char a[96], b[96];
  const int64_t *s = t->sizes, *st = t->strides;
  if (t->ndim == 3) {
    if ((s[2] != 1 && st[2] != 1) || (s[1] != 1 && st[1] != s[2]))
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR,
                    "%s: each token's [H, D] = %s must be contiguous (strides %s, expected [%lld, 1]); only the "
                    "token stride may differ",
                    name, dims(a, sizeof a, s + 1, 2), dims(b, sizeof b, st + 1, 2), (long long)s[2]);
    out->row = s[1] * s[2];
    out->heads = s[1];
  } else if (t->ndim == 2) {
    if (s[1] != 1 && st[1] != 1)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: each token's row must be contiguous (element stride %lld, "
                    "expected 1)", name, (long long)st[1]);
    out->row = s[1];
    out->heads = 0;
  } else {
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: expected shape [B, H, D] or [B, H*D], got %s", name,
                  dims(a, sizeof a, s, t->ndim));
  }
  if (out->row == 0)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: empty rows (shape %s)", name, dims(a, sizeof a, s, t->ndim));
  out->batch = s[0];
  out->stride = out->row;
  if (out->batch > 1) {
    out->stride = st[0];
    if (out->stride < out->row)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: token stride %lld elements is less than a row (%lld "
                    "elements); rows may not overlap or broadcast", name, (long long)out->stride,
                    (long long)out->row);
  }
  return KVJIT_REQUEST_OK;
}

static kvjit_request_error same_device(request_error *e, const char *name, const kvjit_tensor_view *t,
                                       const kvjit_tensor_view *k) {
  if (t->device_type != k->device_type)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: on device type %d, k on device type %d", name,
                  (int)t->device_type, (int)k->device_type);
  /* Of one type, only CUDA devices differ (the callers check that first): named as the Python
   * binding names them. */
  if (t->device_index != k->device_index)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: on cuda:%d, k is on cuda:%d", name, (int)t->device_index,
                  (int)k->device_index);
  return KVJIT_REQUEST_OK;
}

/* An fp32 scale tensor beside k: its pointer and element count (view_rules.h). */
static kvjit_request_error scale_of(request_error *e, const char *name, const kvjit_tensor_view *t,
                                    const kvjit_tensor_view *k, const float **ptr, int64_t *count) {
  kvjit_request_error r = kvjit_request_scale(e, name, t, ptr, count);
  return r ? r : same_device(e, name, t, k);
}

/* The fp8 cache type a request stores into, or BYTES for a plain copy. */
static kvjit_request_error cache_kind_of(request_error *e, const kvjit_store_request *req, kvjit_tensor_kind *out) {
  *out = req->k_cache.kind;
  if (req->cache_dtype == 0) return KVJIT_REQUEST_OK;
  kvjit_tensor_kind wanted;
  if (req->cache_dtype == KVJIT_DTYPE_FP8_E4M3)
    wanted = KVJIT_TENSOR_FP8_E4M3;
  else if (req->cache_dtype == KVJIT_DTYPE_FP8_E5M2)
    wanted = KVJIT_TENSOR_FP8_E5M2;
  else
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "cache_dtype: must be 0 (the caches' own), %d (fp8_e4m3) or %d "
                  "(fp8_e5m2), got %lld", KVJIT_DTYPE_FP8_E4M3, KVJIT_DTYPE_FP8_E5M2, (long long)req->cache_dtype);
  if (*out != wanted && !is_raw(*out))
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "k_cache: dtype %s does not hold cache_dtype %s (use a uint8 or %s "
                  "cache)", dtype_of(&req->k_cache).text, kvjit_tensor_kind_name(wanted),
                  kvjit_tensor_kind_name(wanted));
  *out = wanted;
  return KVJIT_REQUEST_OK;
}

static kvjit_dtype source_dtype(kvjit_tensor_kind kind) {
  return kind == KVJIT_TENSOR_F16 ? KVJIT_DTYPE_F16 : kind == KVJIT_TENSOR_BF16 ? KVJIT_DTYPE_BF16 : KVJIT_DTYPE_F32;
}

/* The V side: rows, caches and their pairing with K's. */
/* A cache's view into args' pointer and stride (flat) or layout (strided). */
static void set_cache(const kvjit_cache_view *view, kvjit_layout *storage, int64_t *stride,
                      const kvjit_layout **layout) {
  if (view->strided) {
    *storage = view->layout;
    *layout = storage;
    *stride = 0;
  } else {
    *stride = view->slot_stride;
    *layout = NULL;
  }
}

static kvjit_cache_form cache_form(const kvjit_store_request *req, int is_v) {
  if (req->layout != KVJIT_STORE_LAYOUT_VLLM_PAGED) return KVJIT_CACHE_FORM_AUTO;
  return is_v ? KVJIT_CACHE_FORM_VLLM_V : KVJIT_CACHE_FORM_VLLM_K;
}

static kvjit_request_error v_side(request_error *e, const kvjit_store_request *req, const input_rows *k_rows,
                                  int quant, kvjit_tensor_kind cache_kind, int64_t *slots, kvjit_store_kv_args *args,
                                  kvjit_store_layouts *layouts, int k_five_dims, int64_t *v_row_elems) {
  const kvjit_tensor_view *v = &req->v, *vc = &req->v_cache, *k = &req->k;
  if (!v->present || !vc->present) {
    if (v->present || vc->present) {
      const char *missing = vc->present ? "v" : "v_cache", *given = vc->present ? "v_cache" : "v";
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "%s: None while %s is given (pass both, or neither to store K "
                    "only)", missing, given);
    }
    *v_row_elems = 0;
    return KVJIT_REQUEST_OK;
  }
  input_rows rows;
  kvjit_request_error r = input_rows_of(e, "v", v, &rows);
  if (r) return r;
  if (rows.batch != k_rows->batch)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v: %lld tokens, k has %lld", (long long)rows.batch,
                  (long long)k_rows->batch);
  if ((r = same_device(e, "v", v, k)) || (r = same_device(e, "v_cache", vc, k))) return r;
  if (quant) {
    if (!same_dtype(v, k))
      return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "v: dtype %s differs from k's %s (quantizing, both need the same)",
                    dtype_of(v).text, dtype_of(k).text);
    if (vc->kind != cache_kind && !(req->cache_dtype != 0 && is_raw(vc->kind)))
      return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "v_cache: dtype %s differs from k_cache's %s", dtype_of(vc).text,
                    kvjit_tensor_kind_name(cache_kind));
  } else if (!same_dtype(v, vc) && !is_raw(v->kind) && !is_raw(vc->kind)) {
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "v_cache: dtype %s differs from v's %s (kvjit copies bytes; view both "
                  "as uint8 to store raw bytes)", dtype_of(vc).text, dtype_of(v).text);
  }
  if (k_five_dims && req->layout == KVJIT_STORE_LAYOUT_AUTO)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v_cache: k_cache is vLLM's 5-D [blocks, H, D/x, block_size, x]: pass "
                  "layout='vllm_paged' to read v_cache as [blocks, H, D, block_size] (a 4-D shape alone reads as "
                  "[blocks, block_size, H, D])");
  kvjit_cache_view view;
  args->v_row_bytes = rows.row * v->itemsize;
  args->v_stride = rows.stride * v->itemsize;
  if ((r = kvjit_request_cache_view(e, "v_cache", vc, quant ? rows.row : args->v_row_bytes, "v",
                                    cache_form(req, 1), &view)))
    return r;
  if (view.slots < *slots) *slots = view.slots;
  set_cache(&view, &layouts->v, &args->v_cache_stride, &args->v_cache_layout);
  args->v = (const void *)v->data;
  args->v_cache = (void *)vc->data;
  /* An empty tensor may have a NULL pointer, which would read as "K only": with no rows nothing
   * is read, and prepare looks only at alignment, so any aligned stand-in does. */
  if (!v->data && k_rows->batch == 0) args->v = (const void *)(uintptr_t)256;
  *v_row_elems = rows.row;
  return KVJIT_REQUEST_OK;
}

static kvjit_request_error store_indices_of(request_error *e, const kvjit_store_request *req, int64_t batch,
                                      kvjit_store_kv_args *args) {
  char a[96];
  const kvjit_tensor_view *t = &req->indices;
  if (t->ndim != 1)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "indices: expected shape [B], got %s",
                  dims(a, sizeof a, t->sizes, t->ndim));
  if (t->sizes[0] != batch)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "indices: %lld slot ids for %lld tokens of k", (long long)t->sizes[0],
                  (long long)batch);
  if (t->kind != KVJIT_TENSOR_I32 && t->kind != KVJIT_TENSOR_I64)
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "indices: dtype must be int32 or int64, got %s", dtype_of(t).text);
  args->index_type = t->kind == KVJIT_TENSOR_I32 ? KVJIT_INDEX_INT32 : KVJIT_INDEX_INT64;
  args->index_stride = batch > 1 ? t->strides[0] : 1;
  if (args->index_stride < 1)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "indices: stride must be >= 1 element, got %lld",
                  (long long)args->index_stride);
  if (t->data % (uintptr_t)t->itemsize)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "indices: pointer %#llx is not aligned to its %lld-byte elements",
                  (unsigned long long)t->data, (long long)t->itemsize);
  args->indices = (const void *)t->data;
  return same_device(e, "indices", t, &req->k);
}

/* Scales of a quantizing store: none, per tensor (1 each) or per head (H each). */
static kvjit_request_error store_scales_of(request_error *e, const kvjit_store_request *req, const input_rows *k_rows,
                                     int64_t v_row_elems, kvjit_store_kv_args *args) {
  const kvjit_tensor_view *ks = &req->k_scale, *vs = &req->v_scale;
  int has_v = req->v.present;
  if (!ks->present) {
    if (vs->present) return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "k_scale: None while v_scale is given (pass both or "
                                   "neither)");
    args->scale_kind = KVJIT_SCALE_NONE;
    return KVJIT_REQUEST_OK;
  }
  int64_t count, v_count;
  kvjit_request_error r = scale_of(e, "k_scale", ks, &req->k, &args->k_scale, &count);
  if (r) return r;
  if (has_v) {
    if (!vs->present)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v_scale: None while k_scale is given (pass both or neither)");
    if ((r = scale_of(e, "v_scale", vs, &req->k, &args->v_scale, &v_count))) return r;
    if (v_count != count)
      return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v_scale: %lld scales, k_scale has %lld (both per tensor or both "
                    "per head)", (long long)v_count, (long long)count);
  } else if (vs->present) {
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v_scale: given without v");
  }
  if (count == 1) {
    args->scale_kind = KVJIT_SCALE_PER_TENSOR;
    return KVJIT_REQUEST_OK;
  }
  if (k_rows->heads && count != k_rows->heads)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "k_scale: %lld scales for k's %lld heads (1 per tensor or H per head)",
                  (long long)count, (long long)k_rows->heads);
  if (k_rows->row % count)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "k_scale: %lld heads do not divide k's rows of %lld elements",
                  (long long)count, (long long)k_rows->row);
  if (has_v && v_row_elems % count)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "v_scale: %lld heads do not divide v's rows of %lld elements",
                  (long long)count, (long long)v_row_elems);
  args->scale_kind = KVJIT_SCALE_PER_HEAD;
  args->num_heads = count;
  return KVJIT_REQUEST_OK;
}

static kvjit_request_error check_present(request_error *e, const kvjit_store_request *req) {
  if (!req->k.present) return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "k: expected a tensor, got None");
  if (!req->k_cache.present) return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "k_cache: expected a tensor, got None");
  if (!req->indices.present) return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "indices: expected a tensor, got None");
  return KVJIT_REQUEST_OK;
}

/* The dtype pairing of k and k_cache; sets *quant. */
static kvjit_request_error k_dtypes(request_error *e, const kvjit_store_request *req, kvjit_tensor_kind cache_kind,
                                    int *quant) {
  const kvjit_tensor_view *k = &req->k, *kc = &req->k_cache;
  *quant = is_fp8(cache_kind) && is_source(k->kind);
  if (is_fp8(cache_kind) && !*quant && k->kind != cache_kind && !is_raw(k->kind))
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "k: dtype %s cannot be stored into an %s cache (float16, bfloat16 or "
                  "float32 are quantized; %s or uint8 rows are copied)", dtype_of(k).text,
                  kvjit_tensor_kind_name(cache_kind), kvjit_tensor_kind_name(cache_kind));
  if (!*quant && !same_dtype(k, kc) && !is_raw(k->kind) && !is_raw(kc->kind))
    return refuse(e, KVJIT_REQUEST_TYPE_ERROR, "k_cache: dtype %s differs from k's %s (kvjit copies bytes; view both "
                  "as uint8 to store raw bytes)", dtype_of(kc).text, dtype_of(k).text);
  return KVJIT_REQUEST_OK;
}

/* num_slots, skip_slot, split and pdl against the caches' @p slots. */
static kvjit_request_error store_scalars_of(request_error *e, const kvjit_store_request *req, int64_t slots,
                                      kvjit_store_kv_args *args) {
  if (req->num_slots == -1)
    args->num_slots = slots;
  else if (req->num_slots < 1 || req->num_slots > slots)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "num_slots: must be 1..%lld (the cache's slots) or -1, got %lld",
                  (long long)slots, (long long)req->num_slots);
  else
    args->num_slots = req->num_slots;
  if (req->skip_slot != -1 && (req->skip_slot < 0 || req->skip_slot >= args->num_slots))
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "skip_slot: must be -1 (none) or a slot 0..%lld, got %lld",
                  (long long)(args->num_slots - 1), (long long)req->skip_slot);
  args->skip_slot = req->skip_slot == -1 ? KVJIT_NO_SKIP_SLOT : req->skip_slot;
  if (req->split < 0 || req->split > INT32_MAX)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "split: must be an int >= 0 (0: automatic), got %lld",
                  (long long)req->split);
  args->split = (int)req->split;
  if (req->pdl != KVJIT_PDL_AUTO && req->pdl != KVJIT_PDL_ON && req->pdl != KVJIT_PDL_OFF)
    return refuse(e, KVJIT_REQUEST_VALUE_ERROR, "pdl: must be %d (auto), %d (on) or %d (off), got %lld", KVJIT_PDL_AUTO,
                  KVJIT_PDL_ON, KVJIT_PDL_OFF, (long long)req->pdl);
  args->pdl = (kvjit_pdl_mode)req->pdl;
  return KVJIT_REQUEST_OK;
}

kvjit_request_error kvjit_store_request_args(const kvjit_store_request *req, kvjit_store_kv_args *args,
                                             kvjit_store_layouts *layouts, char *msg, size_t msg_size) {
  request_error e = {msg, msg_size};
  if (msg_size) msg[0] = '\0';
  *args = (kvjit_store_kv_args)KVJIT_STORE_KV_ARGS_INIT;
  kvjit_request_error r = check_present(&e, req);
  if (r) return r;
  input_rows k_rows;
  kvjit_tensor_kind cache_kind;
  int quant;
  if ((r = input_rows_of(&e, "k", &req->k, &k_rows)) || (r = cache_kind_of(&e, req, &cache_kind)) ||
      (r = k_dtypes(&e, req, cache_kind, &quant)) || (r = same_device(&e, "k_cache", &req->k_cache, &req->k)))
    return r;
  args->k = (const void *)req->k.data;
  args->k_cache = (void *)req->k_cache.data;
  args->batch = k_rows.batch;
  args->k_row_bytes = k_rows.row * req->k.itemsize;
  args->k_stride = k_rows.stride * req->k.itemsize;
  if (req->layout != KVJIT_STORE_LAYOUT_AUTO && req->layout != KVJIT_STORE_LAYOUT_VLLM_PAGED)
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "layout: must be %d (from the tensors) or %d ('vllm_paged'), got %lld",
                  KVJIT_STORE_LAYOUT_AUTO, KVJIT_STORE_LAYOUT_VLLM_PAGED, (long long)req->layout);
  int64_t v_row_elems = 0;
  kvjit_cache_view k_view;
  if ((r = kvjit_request_cache_view(&e, "k_cache", &req->k_cache, quant ? k_rows.row : args->k_row_bytes, "k",
                                    cache_form(req, 0), &k_view)))
    return r;
  set_cache(&k_view, &layouts->k, &args->k_cache_stride, &args->k_cache_layout);
  int64_t slots = k_view.slots;
  if ((r = v_side(&e, req, &k_rows, quant, cache_kind, &slots, args, layouts, k_view.five_dims, &v_row_elems)) ||
      (r = store_indices_of(&e, req, k_rows.batch, args)) || (r = store_scalars_of(&e, req, slots, args)))
    return r;
  if (quant) {
    args->dtype = source_dtype(req->k.kind);
    args->cache_dtype = cache_kind == KVJIT_TENSOR_FP8_E4M3 ? KVJIT_DTYPE_FP8_E4M3 : KVJIT_DTYPE_FP8_E5M2;
    return store_scales_of(&e, req, &k_rows, v_row_elems, args);
  }
  if (req->k_scale.present || req->v_scale.present)
    return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "%s: scales need an fp8 cache (float8 k_cache, or cache_dtype= with a "
                  "uint8 one) fed from float16, bfloat16 or float32", req->k_scale.present ? "k_scale" : "v_scale");
  return KVJIT_REQUEST_OK;
}

/* The request's tensors in argument order (a table: nothing is built per call). */
static const struct {
  size_t offset;
  const char *name;
} kStoreTensors[] = {{offsetof(kvjit_store_request, k), "k"},
                     {offsetof(kvjit_store_request, v), "v"},
                     {offsetof(kvjit_store_request, k_cache), "k_cache"},
                     {offsetof(kvjit_store_request, v_cache), "v_cache"},
                     {offsetof(kvjit_store_request, indices), "indices"},
                     {offsetof(kvjit_store_request, k_scale), "k_scale"},
                     {offsetof(kvjit_store_request, v_scale), "v_scale"}};

kvjit_request_error kvjit_store_request_on_device(const kvjit_store_request *req, int32_t device_type,
                                                  const char *device_name, char *msg, size_t msg_size) {
  for (size_t i = 0; i < sizeof kStoreTensors / sizeof kStoreTensors[0]; i++) {
    const kvjit_tensor_view *t = (const kvjit_tensor_view *)((const char *)req + kStoreTensors[i].offset);
    if (t->present && t->device_type != device_type) {
      request_error e = {msg, msg_size};
      return refuse(&e, KVJIT_REQUEST_VALUE_ERROR, "%s: must be a %s tensor, got one on device type %d",
                    kStoreTensors[i].name, device_name, (int)t->device_type);
    }
  }
  return KVJIT_REQUEST_OK;
}
