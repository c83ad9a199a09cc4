/*
 * The store_kv_cache op: argument validation, variant choice, loading through the generic loader,
 * the lock-free hot path, the out-of-range counter, prewarm and the manifest line format.
 *
 * Hot path, once a variant is loaded: validate (arithmetic only) -> current device's compute
 * capability (cuCtxGetDevice + a per-device cache) -> plan (arithmetic) -> kvjit_fast_lookup
 * (lock-free) -> kvjit_launch. No allocation, lock or compile.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "driver.h"
#include "jit.h"
#include "kvjit.h"
#include "status.h"

/* ---- arguments ------------------------------------------------------------------------------- */

/** Arguments after validation, with every "0 means ..." default applied. */
typedef struct store_call {
  int has_v;
  int64_t k_row, v_row; /* source bytes; v_row 0 when K only */
  int64_t k_stride, v_stride, k_cache_stride, v_cache_stride, index_stride;
  int vec; /* widest access (source bytes) the pointers, strides and rows allow */
  int quantize; /* 1: fp8 cache, see quant */
  kvjit_store_kv_quant quant;
  const float *k_scale, *v_scale;
} store_call;

/* The version-2 fields of @p a, or their defaults for a version-1 caller (whose struct ends
 * before them: they must not be read). */
static void quant_fields(const kvjit_store_kv_args *a, kvjit_dtype *dtype, kvjit_dtype *cache_dtype,
                         kvjit_scale_kind *scale_kind, const float **k_scale, const float **v_scale,
                         int64_t *num_heads) {
  if (a->version >= 2) {
    *dtype = a->dtype;
    *cache_dtype = a->cache_dtype;
    *scale_kind = a->scale_kind;
    *k_scale = a->k_scale;
    *v_scale = a->v_scale;
    *num_heads = a->num_heads;
  } else {
    *dtype = *cache_dtype = KVJIT_DTYPE_BYTES;
    *scale_kind = KVJIT_SCALE_NONE;
    *k_scale = *v_scale = NULL;
    *num_heads = 0;
  }
}

/* a * b + c <= INT64_MAX for a, b, c >= 0 */
static int extent_fits(int64_t a, int64_t b, int64_t c) {
  int64_t prod;
  if (__builtin_mul_overflow(a, b, &prod)) return 0;
  int64_t sum;
  return !__builtin_add_overflow(prod, c, &sum);
}

static kvjit_status check_stride(const char *name, int64_t *stride, int64_t row, const char *row_name) {
  if (*stride == 0) {
    *stride = row;
    return KVJIT_OK;
  }
  if (*stride < row) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: must be 0 (= %s) or >= %s %lld, got %lld", name, row_name,
                      row_name, (long long)row, (long long)*stride);
  }
  return KVJIT_OK;
}

/* Everything that can be checked without a driver. Device pointers must be non-NULL only when
 * batch > 0; their alignment always counts (it picks the vector width). */
static kvjit_status validate(const kvjit_context *ctx, const kvjit_store_kv_args *a, store_call *c) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (a == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "args: NULL");
  if (a->version < 1 || a->version > KVJIT_STORE_KV_ARGS_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "args->version: must be 1..KVJIT_STORE_KV_ARGS_VERSION (%d), got %u", KVJIT_STORE_KV_ARGS_VERSION,
                      a->version);
  }
  kvjit_dtype dtype, cache_dtype;
  kvjit_scale_kind scale_kind;
  int64_t num_heads;
  quant_fields(a, &dtype, &cache_dtype, &scale_kind, &c->k_scale, &c->v_scale, &num_heads);
  kvjit_status qst = kvjit_store_kv_quant_resolve(&c->quant, &c->quantize, dtype, cache_dtype, scale_kind, num_heads);
  if (qst != KVJIT_OK) return qst;
  if (a->batch < 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: must be >= 0, got %lld", (long long)a->batch);
  if (a->k_row_bytes <= 0 || a->k_row_bytes > KVJIT_STORE_KV_MAX_ROW_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_row_bytes: must be 1..%lld, got %lld",
                      (long long)KVJIT_STORE_KV_MAX_ROW_BYTES, (long long)a->k_row_bytes);
  }
  if ((a->v == NULL) != (a->v_cache == NULL)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "v, v_cache: both NULL (store K only) or both set, got v=%p v_cache=%p", a->v,
                      a->v_cache);
  }
  c->has_v = a->v != NULL;
  c->k_row = a->k_row_bytes;
  c->v_row = 0;
  if (c->has_v) {
    if (a->v_row_bytes < 0 || a->v_row_bytes > KVJIT_STORE_KV_MAX_ROW_BYTES) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_row_bytes: must be 0 (= k_row_bytes) or 1..%lld, got %lld",
                        (long long)KVJIT_STORE_KV_MAX_ROW_BYTES, (long long)a->v_row_bytes);
    }
    c->v_row = a->v_row_bytes ? a->v_row_bytes : a->k_row_bytes;
  }
  if (a->index_type != KVJIT_INDEX_INT32 && a->index_type != KVJIT_INDEX_INT64) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "index_type: must be KVJIT_INDEX_INT32 (1) or KVJIT_INDEX_INT64 (2), got %d", (int)a->index_type);
  }
  if (a->index_stride < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "index_stride: must be >= 1 (0 means 1), got %lld",
                      (long long)a->index_stride);
  }
  c->index_stride = a->index_stride ? a->index_stride : 1;
  c->k_stride = a->k_stride;
  c->k_cache_stride = a->k_cache_stride;
  c->v_stride = a->v_stride;
  c->v_cache_stride = a->v_cache_stride;
  /* Quantizing, a cache row holds one byte per source element. */
  int elem = c->quantize ? kvjit_dtype_bytes(c->quant.dtype) : 1;
  if (c->quantize) {
    /* The plan's own rules (whole elements, heads, limits), here so that they fail before any
     * driver is needed; the vector is narrowed later, by the plan. */
    int any_vec = 16;
    kvjit_status rule = kvjit_store_kv_quant_check(&c->quant, c->k_row, c->v_row, a->split, &any_vec);
    if (rule != KVJIT_OK) return rule;
  }
  int64_t k_cache_row = c->k_row / elem, v_cache_row = c->v_row / elem;
  kvjit_status st = check_stride("k_stride", &c->k_stride, c->k_row, "k_row_bytes");
  if (st == KVJIT_OK) {
    st = check_stride("k_cache_stride", &c->k_cache_stride, k_cache_row, c->quantize ? "a K cache row" : "k_row_bytes");
  }
  if (st == KVJIT_OK && c->has_v) st = check_stride("v_stride", &c->v_stride, c->v_row, "v_row_bytes");
  if (st == KVJIT_OK && c->has_v) {
    st = check_stride("v_cache_stride", &c->v_cache_stride, v_cache_row, c->quantize ? "a V cache row" : "v_row_bytes");
  }
  if (st != KVJIT_OK) return st;
  if (c->quantize && c->quant.scale_kind != KVJIT_SCALE_NONE) {
    if (a->batch > 0 && c->k_scale == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_scale: NULL with scale_kind %d and batch %lld",
                        (int)c->quant.scale_kind, (long long)a->batch);
    }
    if (a->batch > 0 && c->has_v && c->v_scale == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_scale: NULL with scale_kind %d and batch %lld",
                        (int)c->quant.scale_kind, (long long)a->batch);
    }
    if ((uintptr_t)c->k_scale % sizeof(float) != 0 || (uintptr_t)c->v_scale % sizeof(float) != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p is not aligned to 4 bytes (fp32 scales)",
                        (uintptr_t)c->k_scale % sizeof(float) != 0 ? "k_scale" : "v_scale",
                        (uintptr_t)c->k_scale % sizeof(float) != 0 ? (const void *)c->k_scale : (const void *)c->v_scale);
    }
  } else if (c->k_scale != NULL || c->v_scale != NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %p given, but nothing is scaled (scale_kind %d, cache_dtype %d)",
                      c->k_scale != NULL ? "k_scale" : "v_scale",
                      c->k_scale != NULL ? (const void *)c->k_scale : (const void *)c->v_scale, (int)scale_kind,
                      (int)cache_dtype);
  }
  if (!c->has_v) c->v_scale = NULL;
  if (!c->has_v) c->v_stride = c->v_cache_stride = 0;
  if (a->num_slots <= 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_slots: must be > 0, got %lld", (long long)a->num_slots);
  }
  if (a->skip_slot != KVJIT_NO_SKIP_SLOT && (a->skip_slot < 0 || a->skip_slot >= a->num_slots)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "skip_slot: must be KVJIT_NO_SKIP_SLOT (-1) or a slot 0..%lld, got %lld",
                      (long long)(a->num_slots - 1), (long long)a->skip_slot);
  }
  if (a->split < 0 || a->split > KVJIT_STORE_KV_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be 0 (automatic) or 1..%d, got %d",
                      KVJIT_STORE_KV_MAX_SPLIT, a->split);
  }
  if (a->split > 0 && c->k_row % a->split != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide k_row_bytes %lld", a->split,
                      (long long)c->k_row);
  }
  if (a->split > 0 && c->v_row % a->split != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide v_row_bytes %lld", a->split,
                      (long long)c->v_row);
  }
  if (a->pdl != KVJIT_PDL_AUTO && a->pdl != KVJIT_PDL_ON && a->pdl != KVJIT_PDL_OFF) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "pdl: must be KVJIT_PDL_AUTO (0), _ON (1) or _OFF (2), got %d",
                      (int)a->pdl);
  }
  if (a->batch > 0) {
    if (a->k == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k: NULL with batch %lld", (long long)a->batch);
    if (a->k_cache == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_cache: NULL with batch %lld", (long long)a->batch);
    }
    if (a->indices == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "indices: NULL with batch %lld", (long long)a->batch);
    }
  }
  uintptr_t index_bytes = a->index_type == KVJIT_INDEX_INT64 ? 8 : 4;
  if ((uintptr_t)a->indices % index_bytes != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "indices: %p is not aligned to the %u bytes of an %s index",
                      a->indices, (unsigned)index_bytes, index_bytes == 8 ? "int64" : "int32");
  }
  /* Every byte offset the kernel forms must fit in 64 bits. */
  int64_t last_item = a->batch > 0 ? a->batch - 1 : 0;
  if (!extent_fits(last_item, c->k_stride, c->k_row) || !extent_fits(last_item, c->v_stride, c->v_row)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->batch, (long long)(c->k_stride > c->v_stride ? c->k_stride : c->v_stride));
  }
  if (!extent_fits(last_item, c->index_stride, 1) ||
      !extent_fits(last_item * c->index_stride, (int64_t)index_bytes, (int64_t)index_bytes)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "index_stride: %lld x batch %lld overflows a 64-bit offset",
                      (long long)c->index_stride, (long long)a->batch);
  }
  if (!extent_fits(a->num_slots - 1, c->k_cache_stride, k_cache_row) ||
      !extent_fits(a->num_slots - 1, c->v_cache_stride, v_cache_row)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_slots: %lld rows of stride %lld overflow a 64-bit offset",
                      (long long)a->num_slots,
                      (long long)(c->k_cache_stride > c->v_cache_stride ? c->k_cache_stride : c->v_cache_stride));
  }
  /* The widest access every address can take: OR everything that shifts an address. */
  uint64_t src_bits = (uint64_t)(uintptr_t)a->k | (uint64_t)(uintptr_t)a->v | (uint64_t)c->k_row |
                      (uint64_t)c->v_row | (uint64_t)c->k_stride | (uint64_t)c->v_stride;
  uint64_t cache_bits = (uint64_t)(uintptr_t)a->k_cache | (uint64_t)(uintptr_t)a->v_cache | (uint64_t)k_cache_row |
                        (uint64_t)v_cache_row | (uint64_t)c->k_cache_stride | (uint64_t)c->v_cache_stride;
  if (!c->quantize) {
    c->vec = kvjit_store_kv_vec_of(src_bits | cache_bits);
    return KVJIT_OK;
  }
  /* Quantizing: an access of vec source bytes writes vec / elem cache bytes. */
  int src_vec = kvjit_store_kv_vec_of(src_bits);
  if (src_vec < elem) {
    const char *what = (uintptr_t)a->k % (uintptr_t)elem ? "k" : (uintptr_t)a->v % (uintptr_t)elem ? "v"
                       : c->k_stride % elem                   ? "k_stride"
                                                              : "v_stride";
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: not aligned to the %d bytes of one %s element", what, elem,
                      kvjit_dtype_name(c->quant.dtype));
  }
  int cache_vec = kvjit_store_kv_vec_of(cache_bits);
  c->vec = src_vec < cache_vec * elem ? src_vec : cache_vec * elem;
  return KVJIT_OK;
}

/* ---- current device -------------------------------------------------------------------------- */

#define KVJIT_STORE_KV_MAX_DEVICES 64
/* Compute capability per device ordinal, 0 until first asked: a device's capability never
 * changes, so a relaxed load suffices and a race only repeats the query. */
static _Atomic int device_sm[KVJIT_STORE_KV_MAX_DEVICES];

static kvjit_status current_sm(const kvjit_driver *drv, int *sm) {
  CUdevice dev = 0;
  CUresult res = drv->cuCtxGetDevice(&dev);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "store_kv_cache: cuCtxGetDevice (no current CUDA context?)");
  if (dev >= 0 && dev < KVJIT_STORE_KV_MAX_DEVICES) {
    int known = atomic_load_explicit(&device_sm[dev], memory_order_relaxed);
    if (known > 0) {
      *sm = known;
      return KVJIT_OK;
    }
  }
  int major = 0, minor = 0;
  res = drv->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  if (res == CUDA_SUCCESS) res = drv->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuDeviceGetAttribute(COMPUTE_CAPABILITY)");
  *sm = major * 10 + minor;
  if (dev >= 0 && dev < KVJIT_STORE_KV_MAX_DEVICES) atomic_store_explicit(&device_sm[dev], *sm, memory_order_relaxed);
  return KVJIT_OK;
}

/* ---- loading --------------------------------------------------------------------------------- */

/* Appends @p bits bits of @p value to a 128-bit key, low bits first. */
typedef struct key_packer {
  kvjit_fast_key key;
  unsigned used;
} key_packer;

static void put_bits(key_packer *k, uint64_t value, unsigned bits) {
  for (unsigned i = 0; i < bits; i++, k->used++) {
    uint64_t bit = (value >> i) & 1u;
    if (k->used < 64) {
      k->key.a |= bit << k->used;
    } else {
      k->key.b |= bit << (k->used - 64);
    }
  }
}

/* Fast-table marker of a variant already written to the manifest (tag 0x52; the kernels use 0x51
 * and 0x53). Exact: each field gets the bits its validated range needs (quantizing variants have
 * smaller rows and splits, which leaves room for the dtypes and the head count): 123 bits at most. */
static kvjit_fast_key record_key(const kvjit_store_kv_variant *v) {
  key_packer k = {{0, 0}, 0};
  int quantize = v->cache_dtype != KVJIT_DTYPE_BYTES;
  put_bits(&k, 0x52u + (unsigned)quantize, 8);
  put_bits(&k, (uint64_t)v->arch, 10);
  put_bits(&k, (uint64_t)v->k_row_bytes, quantize ? 28 : 31);
  put_bits(&k, (uint64_t)v->v_row_bytes, quantize ? 28 : 31);
  put_bits(&k, (uint64_t)v->index_type, 2);
  put_bits(&k, (uint64_t)v->pdl, 2);
  put_bits(&k, (uint64_t)v->split, quantize ? 16 : 21);
  put_bits(&k, (uint64_t)v->vector_bytes, 5);
  if (quantize) {
    put_bits(&k, (uint64_t)v->dtype, 3);
    put_bits(&k, (uint64_t)v->cache_dtype, 3);
    put_bits(&k, (uint64_t)v->scale_kind, 2);
    put_bits(&k, (uint64_t)v->num_heads, 16);
  }
  return k.key;
}

/* Compile or fetch, load, and publish the kernel of @p plan. @p request: the manifest form. */
static kvjit_status load_plan(kvjit_context *ctx, const kvjit_store_kv_plan *plan, const kvjit_store_kv_variant *request,
                              const kvjit_kernel **out) {
  char *source = kvjit_store_kv_source(plan);
  if (source == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "store_kv_cache: generating the source");
  kvjit_program_desc desc;
  kvjit_store_kv_desc(plan, source, &desc);
  kvjit_program *program = NULL;
  kvjit_status st = kvjit_program_get(ctx, &program, NULL, &desc);
  free(source);
  if (st != KVJIT_OK) return st;
  kvjit_kernel *kernel = NULL;
  st = kvjit_program_kernel(program, &kernel, KVJIT_STORE_KV_KERNEL, 0);
  if (st != KVJIT_OK) return st;
  /* A full table is not an error: the kernel still launches, later calls just come back here. */
  (void)kvjit_fast_insert(ctx, kvjit_store_kv_plan_key(plan), kernel);
  kvjit_fast_key marker = record_key(request);
  if (kvjit_fast_lookup(ctx, marker) == NULL && kvjit_fast_insert(ctx, marker, kernel) == KVJIT_OK) {
    char line[256];
    if (kvjit_store_kv_variant_format(request, line, sizeof line) == KVJIT_OK) kvjit_context_record(ctx, line);
  }
  *out = kernel;
  return KVJIT_OK;
}

static void request_of(kvjit_store_kv_variant *v, int sm, const store_call *c, const kvjit_store_kv_args *a) {
  memset(v, 0, sizeof *v);
  v->version = KVJIT_STORE_KV_VARIANT_VERSION;
  v->arch = sm;
  v->k_row_bytes = c->k_row;
  v->v_row_bytes = c->v_row;
  v->index_type = a->index_type;
  v->pdl = a->pdl;
  v->split = a->split;
  v->vector_bytes = c->vec;
  if (c->quantize) {
    v->dtype = c->quant.dtype;
    v->cache_dtype = c->quant.cache_dtype;
    v->scale_kind = c->quant.scale_kind;
    v->num_heads = c->quant.num_heads;
  }
}

/* Resolve the plan of one batch class and make sure its kernel is loaded. */
static kvjit_status plan_and_load(kvjit_context *ctx, int sm, const store_call *c, const kvjit_store_kv_args *a,
                                  int batch_class, kvjit_store_kv_plan *plan, const kvjit_kernel **kernel) {
  kvjit_status st = kvjit_store_kv_plan_make_quant(plan, sm, c->k_row, c->v_row, c->vec, a->index_type, a->pdl,
                                                   a->split, batch_class, c->quantize ? &c->quant : NULL);
  if (st != KVJIT_OK) return st;
  *kernel = kvjit_fast_lookup(ctx, kvjit_store_kv_plan_key(plan));
  if (*kernel != NULL) return KVJIT_OK;
  kvjit_store_kv_variant request;
  request_of(&request, sm, c, a);
  return load_plan(ctx, plan, &request, kernel);
}

/* ---- public entry points --------------------------------------------------------------------- */

kvjit_status kvjit_store_kv_cache(kvjit_context *ctx, const kvjit_store_kv_args *args) {
  store_call c;
  kvjit_status st = validate(ctx, args, &c);
  if (st != KVJIT_OK) return st;
  if (args->batch == 0) return KVJIT_OK;
  const kvjit_driver *drv;
  st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  int sm = 0;
  st = current_sm(drv, &sm);
  if (st != KVJIT_OK) return st;
  kvjit_store_kv_plan plan;
  const kvjit_kernel *kernel = NULL;
  st = plan_and_load(ctx, sm, &c, args, kvjit_store_kv_batch_class(args->batch), &plan, &kernel);
  if (st != KVJIT_OK) return st;
  uint64_t blocks = kvjit_store_kv_blocks(&plan, args->batch);
  if (blocks == 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: %lld items x split %d need more than 2^31-1 blocks",
                      (long long)args->batch, plan.split);
  }
  kvjit_store_kv_params params = {
      .k = args->k,
      .v = args->v,
      .k_cache = args->k_cache,
      .v_cache = args->v_cache,
      .indices = args->indices,
      .k_stride = c.k_stride,
      .v_stride = c.v_stride,
      .k_cache_stride = c.k_cache_stride,
      .v_cache_stride = c.v_cache_stride,
      .index_stride = c.index_stride,
      .batch = args->batch,
      .num_slots = args->num_slots,
      .skip_slot = args->skip_slot,
      .k_scale = c.k_scale,
      .v_scale = c.v_scale,
  };
  void *kernel_args[] = {&params};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)blocks;
  cfg.block[0] = (unsigned)plan.block;
  cfg.stream = args->stream;
  /* Tied to the compiled-in wait/trigger: the attribute without the wait would be a race. */
  cfg.programmatic_serialization = plan.pdl;
  return kvjit_launch(kernel, &cfg, kernel_args);
}

kvjit_status kvjit_store_kv_cache_prepare(kvjit_context *ctx, const kvjit_store_kv_args *args) {
  store_call c;
  kvjit_status st = validate(ctx, args, &c);
  if (st != KVJIT_OK) return st;
  const kvjit_driver *drv;
  st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  /* Loading needs no context (cuLibraryLoadData): without one, prepare for device 0. */
  int sm = 0;
  st = kvjit_driver_current_sm(drv, &sm, NULL);
  if (st != KVJIT_OK) return st;
  /* batch 0: every class, for callers that do not know their batch sizes before capture. */
  int first = args->batch > 0 ? kvjit_store_kv_batch_class(args->batch) : 0;
  int last = args->batch > 0 ? first : KVJIT_STORE_KV_CLASSES - 1;
  for (int cls = first; cls <= last; cls++) {
    kvjit_store_kv_plan plan;
    const kvjit_kernel *kernel = NULL;
    st = plan_and_load(ctx, sm, &c, args, cls, &plan, &kernel);
    if (st != KVJIT_OK) return st;
    if (args->batch > 0 && kvjit_store_kv_blocks(&plan, args->batch) == 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: %lld items x split %d need more than 2^31-1 blocks",
                        (long long)args->batch, plan.split);
    }
  }
  kvjit_clear_error();
  return KVJIT_OK;
}

typedef struct oob_programs {
  const kvjit_program **items;
  size_t count, capacity;
  int sm;
  int failed;
} oob_programs;

static void collect_program(const kvjit_kernel *kernel, void *user) {
  oob_programs *list = user;
  if (kernel->name == NULL || strcmp(kernel->name, KVJIT_STORE_KV_KERNEL) != 0) return;
  /* A program built for another arch is not loaded in this device's context. */
  if (kvjit_program_arch(kernel->program) != list->sm) return;
  for (size_t i = 0; i < list->count; i++) {
    if (list->items[i] == kernel->program) return;
  }
  if (list->count == list->capacity) {
    size_t cap = list->capacity ? list->capacity * 2 : 16;
    const kvjit_program **grown = realloc(list->items, cap * sizeof *grown);
    if (grown == NULL) {
      list->failed = 1;
      return;
    }
    list->items = grown;
    list->capacity = cap;
  }
  list->items[list->count++] = kernel->program;
}

kvjit_status kvjit_store_kv_cache_oob_count(kvjit_context *ctx, uint64_t *count, int reset) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (count == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count: NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  oob_programs list = {NULL, 0, 0, 0, 0};
  st = current_sm(drv, &list.sm);
  if (st != KVJIT_OK) return st;
  CUresult res = drv->cuCtxSynchronize();
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxSynchronize");
  kvjit_fast_foreach(ctx, collect_program, &list);
  if (list.failed) {
    free(list.items);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "store_kv_cache_oob_count: listing the loaded variants");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < list.count && st == KVJIT_OK; i++) {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    st = kvjit_program_global(list.items[i], &ptr, &bytes, KVJIT_STORE_KV_OOB_COUNTER);
    if (st != KVJIT_OK) break;
    if (bytes != sizeof(uint64_t)) {
      st = kvjit_fail(KVJIT_ERR_INTERNAL, "%s: %zu bytes, expected 8", KVJIT_STORE_KV_OOB_COUNTER, bytes);
      break;
    }
    uint64_t value = 0;
    res = drv->cuMemcpyDtoH(&value, ptr, sizeof value);
    if (res != CUDA_SUCCESS) {
      st = kvjit_cuda_fail(drv, res, "cuMemcpyDtoH(oob counter)");
      break;
    }
    total += value;
    if (reset) {
      res = drv->cuMemsetD32(ptr, 0, 2);
      if (res != CUDA_SUCCESS) st = kvjit_cuda_fail(drv, res, "cuMemsetD32(oob counter)");
    }
  }
  free(list.items);
  if (st != KVJIT_OK) return st;
  if (reset) {
    res = drv->cuCtxSynchronize();
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxSynchronize");
  }
  *count = total;
  kvjit_clear_error();
  return KVJIT_OK;
}

/* The struct has grown before (the quantizing fields): a caller built against another layout is
 * refused instead of read past its end. */
static kvjit_status check_variant_version(const kvjit_store_kv_variant *v) {
  if (v->version != KVJIT_STORE_KV_VARIANT_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "variant->version: must be KVJIT_STORE_KV_VARIANT_VERSION (%d), got %u (initialise with "
                      "KVJIT_STORE_KV_VARIANT_INIT)",
                      KVJIT_STORE_KV_VARIANT_VERSION, v->version);
  }
  return KVJIT_OK;
}

/* The plan of @p v for @p arch (0: any arch, for checks without a device) and batch class; with
 * @p quant (optional) receiving the resolved quantization and @p quantize whether there is one. */
static kvjit_status variant_plan(const kvjit_store_kv_variant *v, int arch, int batch_class, kvjit_store_kv_plan *plan,
                                 kvjit_store_kv_quant *quant, int *quantize) {
  kvjit_status st =
      kvjit_store_kv_quant_resolve(quant, quantize, v->dtype, v->cache_dtype, v->scale_kind, v->num_heads);
  if (st != KVJIT_OK) return st;
  return kvjit_store_kv_plan_make_quant(plan, arch ? arch : KVJIT_STORE_KV_MAX_ARCH, v->k_row_bytes, v->v_row_bytes,
                                        v->vector_bytes ? v->vector_bytes : 16, v->index_type, v->pdl, v->split,
                                        batch_class, *quantize ? quant : NULL);
}

kvjit_status kvjit_store_kv_cache_prewarm(kvjit_context *ctx, const kvjit_store_kv_variant *variant,
                                          unsigned *compiled, unsigned *cached) {
  if (compiled) *compiled = 0;
  if (cached) *cached = 0;
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (variant == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "variant: NULL");
  kvjit_status vst = check_variant_version(variant);
  if (vst != KVJIT_OK) return vst;
  int arch = variant->arch;
  if (arch < 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "arch: must be >= 0 (0 = current device), got %d", arch);
  kvjit_store_kv_quant quant;
  int quantize = 0;
  /* Validate everything before asking for a driver (the loop repeats it with the real arch). */
  kvjit_store_kv_plan plan;
  kvjit_status st = variant_plan(variant, arch, 0, &plan, &quant, &quantize);
  if (st != KVJIT_OK) return st;
  if (arch == 0) {
    const kvjit_driver *drv;
    st = kvjit_driver_get(&drv);
    if (st != KVJIT_OK) return st;
    st = kvjit_driver_current_sm(drv, &arch, NULL);
    if (st != KVJIT_OK) return st;
  }
  /* Every kernel the automatic choice may pick: one plan per batch class, duplicates once. */
  kvjit_fast_key done[KVJIT_STORE_KV_CLASSES];
  int num_done = 0;
  for (int cls = 0; cls < KVJIT_STORE_KV_CLASSES; cls++) {
    st = variant_plan(variant, arch, cls, &plan, &quant, &quantize);
    if (st != KVJIT_OK) return st;
    kvjit_fast_key key = kvjit_store_kv_plan_key(&plan);
    int seen = 0;
    for (int i = 0; i < num_done; i++) seen |= done[i].a == key.a && done[i].b == key.b;
    if (seen) continue;
    done[num_done++] = key;
    char *source = kvjit_store_kv_source(&plan);
    if (source == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "store_kv_cache: generating the source");
    kvjit_program_desc desc;
    kvjit_store_kv_desc(&plan, source, &desc);
    kvjit_origin origin = KVJIT_FROM_COMPILE;
    st = kvjit_program_compile(ctx, &origin, &desc);
    free(source);
    if (st != KVJIT_OK) return st;
    if (origin == KVJIT_FROM_COMPILE) {
      if (compiled) (*compiled)++;
    } else if (cached) {
      (*cached)++;
    }
  }
  kvjit_clear_error();
  return KVJIT_OK;
}

/* ---- manifest lines (cache/MANIFEST.md) -------------------------------------------------------- */

#define KVJIT_MANIFEST_OP "store_kv_cache"

/* The keyword of each value of the enum fields of a line, indexed by the value; formatting and
 * parsing both read these. */
static const char *const index_words[] = {[KVJIT_INDEX_INT32] = "int32", [KVJIT_INDEX_INT64] = "int64"};
static const char *const pdl_words[] = {[KVJIT_PDL_AUTO] = "auto", [KVJIT_PDL_ON] = "on", [KVJIT_PDL_OFF] = "off"};
static const char *const scale_words[] = {
    [KVJIT_SCALE_NONE] = "none", [KVJIT_SCALE_PER_TENSOR] = "tensor", [KVJIT_SCALE_PER_HEAD] = "head"};
#define WORDS(table) (table), sizeof(table) / sizeof((table)[0])

/* The keyword of @p value (a validated enum value). */
static const char *word_of(const char *const *words, size_t count, int value) {
  return value >= 0 && (size_t)value < count && words[value] != NULL ? words[value] : "?";
}

/* The value whose keyword is @p text; 0 when there is none. */
static int value_of(const char *const *words, size_t count, const char *text, int *value) {
  for (size_t i = 0; i < count; i++) {
    if (words[i] != NULL && strcmp(words[i], text) == 0) {
      *value = (int)i;
      return 1;
    }
  }
  return 0;
}

kvjit_status kvjit_store_kv_variant_format(const kvjit_store_kv_variant *variant, char *out, size_t capacity) {
  if (variant == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "variant: NULL");
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  const kvjit_store_kv_variant *v = variant;
  kvjit_status vst = check_variant_version(v);
  if (vst != KVJIT_OK) return vst;
  if (v->arch < 0 || v->arch > KVJIT_STORE_KV_MAX_ARCH) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "arch: must be 0..%d, got %d", KVJIT_STORE_KV_MAX_ARCH, v->arch);
  }
  int vec = v->vector_bytes ? v->vector_bytes : 16;
  kvjit_store_kv_quant quant;
  int quantize = 0;
  kvjit_store_kv_plan plan;
  /* The same checks a prewarm makes (arch 0 stands for "some arch" here). */
  kvjit_status st = variant_plan(v, v->arch, 0, &plan, &quant, &quantize);
  if (st != KVJIT_OK) return st;
  /* Plain copies keep the version-1 line: the dtype does not change their kernel. */
  char quant_text[128] = "";
  if (quantize) {
    snprintf(quant_text, sizeof quant_text, " dtype=%s cache_dtype=%s scale=%s", kvjit_dtype_name(quant.dtype),
             kvjit_dtype_name(quant.cache_dtype), word_of(WORDS(scale_words), (int)quant.scale_kind));
    if (quant.scale_kind == KVJIT_SCALE_PER_HEAD) {
      size_t used = strlen(quant_text);
      snprintf(quant_text + used, sizeof quant_text - used, " num_heads=%lld", (long long)quant.num_heads);
    }
  }
  int n = snprintf(out, capacity,
                   KVJIT_MANIFEST_OP " arch=%d k_row_bytes=%lld v_row_bytes=%lld index=%s pdl=%s split=%d vec=%d%s",
                   v->arch, (long long)v->k_row_bytes, (long long)v->v_row_bytes,
                   word_of(WORDS(index_words), (int)v->index_type), word_of(WORDS(pdl_words), (int)v->pdl), v->split,
                   vec, quant_text);
  if (n < 0 || (size_t)n >= capacity) {
    if (capacity > 0) out[0] = '\0';
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "capacity: %zu bytes, the line needs %d", capacity, n + 1);
  }
  return KVJIT_OK;
}

/* Strict decimal: digits only (no sign, no spaces), value in [lo, hi]. */
static int parse_int(const char *text, long long lo, long long hi, long long *out) {
  if (text[0] < '0' || text[0] > '9') return 0;
  for (const char *p = text; *p; p++) {
    if (*p < '0' || *p > '9') return 0;
  }
  errno = 0;
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* F_DTYPE and after are optional (quantizing variants only; absent: a plain copy). */
enum { F_ARCH, F_K_ROW, F_V_ROW, F_INDEX, F_PDL, F_SPLIT, F_VEC, F_DTYPE, F_CACHE_DTYPE, F_SCALE, F_HEADS, F_COUNT };
#define F_REQUIRED F_DTYPE
static const char *const field_names[F_COUNT] = {"arch",  "k_row_bytes", "v_row_bytes", "index",
                                                 "pdl",   "split",       "vec",         "dtype",
                                                 "cache_dtype", "scale",  "num_heads"};

kvjit_status kvjit_store_kv_variant_parse(kvjit_store_kv_variant *out, const char *line) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  if (line == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: NULL");
  char buf[512];
  /* cache/MANIFEST.md: at most 511 characters, a comment included. */
  if (strcspn(line, "\n\r") >= sizeof buf) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: longer than %zu characters", sizeof buf - 1);
  }
  size_t len = strcspn(line, "#\n\r");
  if (line[len] == '\r' || line[len] == '\n') {
    /* Only a line ending may follow: "a\nb" is two lines. */
    const char *rest = line + len;
    while (*rest == '\r' || *rest == '\n') rest++;
    if (*rest != '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: more than one line");
  }
  if (len >= sizeof buf) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: longer than %zu characters", sizeof buf - 1);
  }
  memcpy(buf, line, len);
  buf[len] = '\0';
  char *save = NULL;
  char *tok = strtok_r(buf, " \t", &save);
  if (tok == NULL) return kvjit_fail(KVJIT_ERR_NOT_FOUND, "line: blank or comment only, no variant");
  if (strcmp(tok, KVJIT_MANIFEST_OP) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: must start with \"" KVJIT_MANIFEST_OP "\", got \"%.64s\"", tok);
  }
  kvjit_store_kv_variant v;
  memset(&v, 0, sizeof v);
  v.version = KVJIT_STORE_KV_VARIANT_VERSION;
  int seen[F_COUNT] = {0};
  while ((tok = strtok_r(NULL, " \t", &save)) != NULL) {
    char *eq = strchr(tok, '=');
    if (eq == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: \"%.64s\" is not key=value", tok);
    *eq = '\0';
    const char *value = eq + 1;
    int f = 0;
    while (f < F_COUNT && strcmp(tok, field_names[f]) != 0) f++;
    if (f == F_COUNT) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: unknown key \"%.64s\"", tok);
    if (seen[f]) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: given twice", field_names[f]);
    seen[f] = 1;
    long long n = 0;
    int word = 0;
    switch (f) {
    case F_ARCH:
      if (!parse_int(value, 0, KVJIT_STORE_KV_MAX_ARCH, &n)) goto bad_value;
      v.arch = (int)n;
      break;
    case F_K_ROW:
      if (!parse_int(value, 1, KVJIT_STORE_KV_MAX_ROW_BYTES, &n)) goto bad_value;
      v.k_row_bytes = n;
      break;
    case F_V_ROW:
      if (!parse_int(value, 0, KVJIT_STORE_KV_MAX_ROW_BYTES, &n)) goto bad_value;
      v.v_row_bytes = n;
      break;
    case F_INDEX:
      if (!value_of(WORDS(index_words), value, &word)) goto bad_value;
      v.index_type = (kvjit_index_type)word;
      break;
    case F_PDL:
      if (!value_of(WORDS(pdl_words), value, &word)) goto bad_value;
      v.pdl = (kvjit_pdl_mode)word;
      break;
    case F_SPLIT:
      if (!parse_int(value, 0, KVJIT_STORE_KV_MAX_SPLIT, &n)) goto bad_value;
      v.split = (int)n;
      break;
    case F_VEC:
      if (!parse_int(value, 1, 16, &n) || (n & (n - 1)) != 0) goto bad_value;
      v.vector_bytes = (int)n;
      break;
    case F_DTYPE:
      if (!kvjit_dtype_parse(value, &v.dtype)) goto bad_value;
      break;
    case F_CACHE_DTYPE:
      if (!kvjit_dtype_parse(value, &v.cache_dtype)) goto bad_value;
      break;
    case F_SCALE:
      if (!value_of(WORDS(scale_words), value, &word)) goto bad_value;
      v.scale_kind = (kvjit_scale_kind)word;
      break;
    case F_HEADS:
      if (!parse_int(value, 1, KVJIT_STORE_KV_QUANT_MAX_HEADS, &n)) goto bad_value;
      v.num_heads = n;
      break;
    default:
      break;
    }
    continue;
  bad_value:
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: bad value \"%.64s\" (see cache/MANIFEST.md)", field_names[f],
                      value);
  }
  for (int f = 0; f < F_REQUIRED; f++) {
    if (!seen[f]) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "line: missing %s=", field_names[f]);
  }
  if (seen[F_HEADS] && v.scale_kind != KVJIT_SCALE_PER_HEAD) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: given without scale=head");
  }
  /* Cross-field rules (split divides the rows, PDL on needs sm_90, dtypes): the same as format's. */
  kvjit_store_kv_quant quant;
  int quantize = 0;
  kvjit_store_kv_plan plan;
  kvjit_status st = variant_plan(&v, v.arch, 0, &plan, &quant, &quantize);
  if (st != KVJIT_OK) return st;
  /* cache/MANIFEST.md: the optional keys only when quantizing (a plain line never has them, so a
   * line that has them on a plain copy would not survive a format/parse round trip). */
  for (int f = F_REQUIRED; f < F_COUNT && !quantize; f++) {
    if (seen[f]) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: only for a store that quantizes (a float dtype and an fp8 "
                        "cache_dtype)", field_names[f]);
    }
  }
  *out = v;
  kvjit_clear_error();
  return KVJIT_OK;
}
