/*
 * The store_kv_cache op: its descriptor (fields, rules, plan, source, geometry, key) and its
 * public entry points. Plans and sources are store_kv_plan.c; call validation store_kv_args.c.
 *
 * Hot path, once a variant is loaded: validate (arithmetic only), then the op layer's common
 * call (kvjit_op_call: current device's compute capability -> request key -> lock-free lookup ->
 * launch). No plan, no allocation, lock or compile: the plan was made on the miss that loaded it.
 */
#include <string.h>

#include "dtype.h"
#include "status.h"
#include "store_kv_op.h"
#include "variant.h"

/* ---- fields ----------------------------------------------------------------------------------- */

static const char *const index_words[] = {[KVJIT_INDEX_INT32] = "int32", [KVJIT_INDEX_INT64] = "int64"};
static const char *const pdl_words[] = {[KVJIT_PDL_AUTO] = "auto", [KVJIT_PDL_ON] = "on", [KVJIT_PDL_OFF] = "off"};
static const char *const scale_words[] = {
    [KVJIT_SCALE_NONE] = "none", [KVJIT_SCALE_PER_TENSOR] = "tensor", [KVJIT_SCALE_PER_HEAD] = "head"};
static const char *const dtype_words[] = {
    [KVJIT_DTYPE_BYTES] = "bytes", [KVJIT_DTYPE_F16] = "f16",           [KVJIT_DTYPE_BF16] = "bf16",
    [KVJIT_DTYPE_F32] = "f32",     [KVJIT_DTYPE_FP8_E4M3] = "fp8_e4m3", [KVJIT_DTYPE_FP8_E5M2] = "fp8_e5m2"};
#define WORDS(t) (t), sizeof(t) / sizeof((t)[0])

static const kvjit_op_field store_fields[STORE_F_COUNT] = {
    [STORE_F_ARCH] = {"arch", "compute capability (90 = sm_90); 0 = the current device's", KVJIT_FIELD_INT, 0, 0,
                      KVJIT_STORE_KV_MAX_ARCH, NULL, 0, 0, NULL},
    [STORE_F_K_ROW] = {"k_row_bytes", "bytes of one K row (source bytes when quantizing)", KVJIT_FIELD_INT, 0, 1,
                       KVJIT_STORE_KV_MAX_ROW_BYTES, NULL, 0, 0, NULL},
    [STORE_F_V_ROW] = {"v_row_bytes", "bytes of one V row; 0 = K only", KVJIT_FIELD_INT, 0, 0,
                       KVJIT_STORE_KV_MAX_ROW_BYTES, NULL, 0, 0, NULL},
    [STORE_F_INDEX] = {"index", "type of the slot ids", KVJIT_FIELD_WORD, 0, 0, 0, WORDS(index_words), 0,
                       "int32,int64"},
    [STORE_F_PDL] = {"pdl", "programmatic dependent launch, as asked (auto: per arch and batch class)",
                     KVJIT_FIELD_WORD, 0, 0, 0, WORDS(pdl_words), 0, "auto"},
    [STORE_F_SPLIT] = {"split", "parts each row is split into; 0 = automatic (every split it may pick)",
                       KVJIT_FIELD_INT, 0, 0, KVJIT_STORE_KV_MAX_SPLIT, NULL, 0, 0, "auto"},
    [STORE_F_VEC] = {"vec", "widest access, in bytes, the pointers and strides allow", KVJIT_FIELD_INT,
                     KVJIT_FIELD_POW2, 1, 16, NULL, 0, 16, "16"},
    [STORE_F_DTYPE] = {"dtype", "element type of the K/V rows of a store that quantizes", KVJIT_FIELD_WORD,
                       KVJIT_FIELD_OPTIONAL | KVJIT_FIELD_DTYPE, 0, 0, WORDS(dtype_words), KVJIT_DTYPE_BYTES, NULL},
    [STORE_F_CACHE_DTYPE] = {"cache_dtype", "element type of the cache: fp8_e4m3 or fp8_e5m2 to quantize",
                             KVJIT_FIELD_WORD, KVJIT_FIELD_OPTIONAL | KVJIT_FIELD_DTYPE, 0, 0, WORDS(dtype_words),
                             KVJIT_DTYPE_BYTES, NULL},
    [STORE_F_SCALE] = {"scale", "where the quantization scales come from", KVJIT_FIELD_WORD, KVJIT_FIELD_OPTIONAL,
                       0, 0, WORDS(scale_words), KVJIT_SCALE_NONE, NULL},
    [STORE_F_HEADS] = {"num_heads", "heads per K row and per V row (scale=head)", KVJIT_FIELD_INT,
                       KVJIT_FIELD_OPTIONAL, 0, KVJIT_STORE_KV_QUANT_MAX_HEADS, NULL, 0, 0, NULL},
    KVJIT_VIEW_FIELDS(STORE_F_K, "k_", "K cache"),
    KVJIT_VIEW_FIELDS(STORE_F_V, "v_", "V cache"),
    [STORE_F_V_VEC] = {"v_vec", "widest V access, in bytes, of a laid-out cache when less than K's vec; 0 = vec",
                       KVJIT_FIELD_INT, KVJIT_FIELD_OPTIONAL, 0, 16, NULL, 0, 0, "0"},
};

/* ---- descriptor hooks ------------------------------------------------------------------------ */

/* The quantization of canonical values, or NULL for a plain copy. */
static const kvjit_store_kv_quant *values_quant(const int64_t *v, kvjit_store_kv_quant *q) {
  if (v[STORE_F_CACHE_DTYPE] == KVJIT_DTYPE_BYTES) return NULL;
  q->dtype = (kvjit_dtype)v[STORE_F_DTYPE];
  q->cache_dtype = (kvjit_dtype)v[STORE_F_CACHE_DTYPE];
  q->scale_kind = (kvjit_scale_kind)v[STORE_F_SCALE];
  q->num_heads = v[STORE_F_HEADS];
  return q;
}

/* The static part of a cache view from canonical values (first: its KVJIT_VIEW_F_PAGE field), for
 * rows of @p row_bytes source bytes. */
static kvjit_status values_view(const int64_t *v, size_t first, int64_t row_bytes, const char *prefix,
                                kvjit_store_kv_plan_view *out) {
  const int elem = v[STORE_F_CACHE_DTYPE] != KVJIT_DTYPE_BYTES ? kvjit_dtype_bytes((kvjit_dtype)v[STORE_F_DTYPE]) : 1;
  kvjit_view view;
  kvjit_status st = kvjit_view_from_values(&view, v + first, row_bytes / elem, prefix);
  if (st != KVJIT_OK) return st;
  kvjit_store_kv_plan_view_of(&view, out);
  return KVJIT_OK;
}

static kvjit_status store_plan(const int64_t *v, int arch, int batch_class, void *out) {
  kvjit_store_kv_quant q;
  kvjit_store_kv_plan_view kv, vv;
  kvjit_status st = values_view(v, STORE_F_K_PAGE, v[STORE_F_K_ROW], "k_", &kv);
  if (st == KVJIT_OK && v[STORE_F_V_ROW] > 0) st = values_view(v, STORE_F_V_PAGE, v[STORE_F_V_ROW], "v_", &vv);
  if (st != KVJIT_OK) return st;
  if (v[STORE_F_V_ROW] == 0) memset(&vv, 0, sizeof vv);
  return kvjit_store_kv_plan_make_layout(out, arch, v[STORE_F_K_ROW], v[STORE_F_V_ROW], (int)v[STORE_F_VEC],
                                         (int)v[STORE_F_V_VEC], (kvjit_index_type)v[STORE_F_INDEX], (kvjit_pdl_mode)v[STORE_F_PDL],
                                         (int)v[STORE_F_SPLIT], batch_class, values_quant(v, &q), &kv, &vv);
}

static kvjit_status store_check(int64_t *v, uint64_t given) {
  if (given != KVJIT_OP_ALL_GIVEN && (given & KVJIT_OP_GIVEN(STORE_F_HEADS)) && v[STORE_F_SCALE] != KVJIT_SCALE_PER_HEAD) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: given without scale=head");
  }
  kvjit_store_kv_quant q;
  int quantize = 0;
  kvjit_status st = kvjit_store_kv_quant_resolve(&q, &quantize, (kvjit_dtype)v[STORE_F_DTYPE],
                                                 (kvjit_dtype)v[STORE_F_CACHE_DTYPE], (kvjit_scale_kind)v[STORE_F_SCALE],
                                                 v[STORE_F_HEADS]);
  if (st != KVJIT_OK) return st;
  /* A plain copy's kernel does not depend on the element type: one canonical form. */
  v[STORE_F_DTYPE] = quantize ? q.dtype : KVJIT_DTYPE_BYTES;
  v[STORE_F_CACHE_DTYPE] = quantize ? q.cache_dtype : KVJIT_DTYPE_BYTES;
  v[STORE_F_SCALE] = quantize ? q.scale_kind : KVJIT_SCALE_NONE;
  v[STORE_F_HEADS] = quantize ? q.num_heads : 0;
  if (v[STORE_F_V_VEC] == v[STORE_F_VEC] || (v[STORE_F_V_VEC] & (v[STORE_F_V_VEC] - 1)) != 0) {
    if (v[STORE_F_V_VEC] != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_vec: must be 0 (= vec) or a power of two other than vec %lld, "
                        "got %lld", (long long)v[STORE_F_VEC], (long long)v[STORE_F_V_VEC]);
    }
  }
  if (v[STORE_F_V_ROW] == 0) {
    for (size_t f = STORE_F_V_PAGE; f <= STORE_F_V_VEC; f++) {
      if (v[f] != 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: given for a K-only store", store_fields[f].name);
    }
  }
  /* The plan's own rules, for "any arch" when arch is 0. */
  kvjit_store_kv_plan plan;
  return store_plan(v, v[STORE_F_ARCH] ? (int)v[STORE_F_ARCH] : KVJIT_STORE_KV_MAX_ARCH, 0, &plan);
}

/* A quantizing store's line ends with its dtypes and scale kind, and num_heads with scale=head;
 * a cache layout's static part is written where it is not flat; plain copies of flat caches keep
 * the version-1 line. */
static int store_written(const int64_t *v, size_t field) {
  if (field == STORE_F_HEADS) return v[STORE_F_SCALE] == KVJIT_SCALE_PER_HEAD;
  if (field >= STORE_F_K_PAGE) return v[field] != 0; /* a cache layout's static part: only where it is not flat */
  return v[STORE_F_CACHE_DTYPE] != KVJIT_DTYPE_BYTES;
}

static kvjit_status store_program(const void *plan, kvjit_op_program *out) { return kvjit_store_kv_program(plan, out); }

/* The K and V caches' layouts into checked values: their views' static part, and each view's
 * widest access (source bytes) with 16-byte aligned pointers, as kvjit_store_kv_validate() keys a
 * call with them. */
static kvjit_status store_set_layouts(int64_t *v, const kvjit_layout *const *layouts, size_t count) {
  static const char *const names[2] = {"layouts[0] (K cache)", "layouts[1] (V cache)"};
  if (count != 2) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count: store_kv_cache takes 2 layouts (K cache, V cache), got %zu",
                      count);
  }
  const int quant = v[STORE_F_CACHE_DTYPE] != KVJIT_DTYPE_BYTES;
  const int shift = quant ? __builtin_ctz((unsigned)kvjit_dtype_bytes((kvjit_dtype)v[STORE_F_DTYPE])) : 0;
  const int64_t rows[2] = {v[STORE_F_K_ROW] >> shift, v[STORE_F_V_ROW] >> shift};
  kvjit_view views[2];
  for (int i = 0; i < 2; i++) {
    if (rows[i] == 0 && layouts[i] != NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: given for a K-only variant (v_row_bytes 0)", names[i]);
    }
    if (layouts[i] == NULL) {
      kvjit_view_flat(&views[i], rows[i], rows[i]);
    } else {
      kvjit_status st = kvjit_view_resolve(&views[i], names[i], layouts[i], rows[i], quant ? 1 : 0);
      if (st == KVJIT_OK) st = kvjit_view_check_slots(&views[i], names[i], views[i].page_size ? 2 * views[i].page_size : 2);
      if (st != KVJIT_OK) return st;
    }
    kvjit_view_static_values(&views[i], v + (i ? STORE_F_V_PAGE : STORE_F_K_PAGE));
  }
  const int laid_out = !kvjit_view_is_flat(&views[0]) || !kvjit_view_is_flat(&views[1]);
  int vec[2];
  for (int i = 0; i < 2; i++) {
    const int cache_vec = kvjit_rows_vec_of(kvjit_view_address_bits(&views[i]) | (uint64_t)rows[i]) << shift;
    vec[i] = cache_vec < v[STORE_F_VEC] ? cache_vec : (int)v[STORE_F_VEC];
  }
  if (!laid_out || rows[1] == 0) {
    v[STORE_F_VEC] = rows[1] == 0 || vec[0] < vec[1] ? vec[0] : vec[1];
    v[STORE_F_V_VEC] = 0;
  } else {
    v[STORE_F_VEC] = vec[0];
    v[STORE_F_V_VEC] = vec[1] != vec[0] ? vec[1] : 0;
  }
  return KVJIT_OK;
}

/* A quantizing kernel takes NVRTC about 3.5 times a plain copy's (bundles of the main prewarm set,
 * this 2-core machine, NVRTC 13.0: 68.9 vs 19.8 ms per kernel; bench/BASELINE.md, "Compile cost"). */
static unsigned store_compile_cost(const void *plan) {
  return ((const kvjit_store_kv_plan *)plan)->cache_dtype != KVJIT_DTYPE_BYTES ? 7 : 2;
}

static void store_geometry(const void *plan, kvjit_op_geometry *out) {
  const kvjit_store_kv_plan *p = plan;
  out->block = (uint32_t)p->block;
  out->group_shift = (uint32_t)__builtin_ctz((unsigned)p->lanes);
  out->split = (uint32_t)p->split;
  out->items = (uint32_t)p->items;
  out->pdl = p->pdl;
}

#ifndef KVJIT_OP_FAMILY
#error "KVJIT_OP_FAMILY: the op's line in src/ops/ops.def, set by src/ops/meson.build"
#endif

/*
 * The request key. Word a, below the family byte: quantizing 55 | arch 45..54 | k_row_bytes
 * 14..44 | batch class 12..13 | log2 vec 9..11 | int64 indices 8 | pdl mode 6..7, and quantizing
 * only: source dtype - 1 at 4..5 | fp8 kind 3 | scale kind 1..2. Word b: v_row_bytes 0..30 and
 * split 31..51 (plain copies); v_row_bytes 0..27, split 28..43 and heads 44..59 (quantizing,
 * whose rows, splits and heads are capped to fit). Validation keeps every field in its bits.
 * v_vec (log2 + 1, 0 when absent) at b 52..54 (plain) or 60..62 (quantizing).
 * Words c and d: the static parts of the K and V cache views (kvjit_view_key_word(), 0 when flat:
 * a flat store's key is the one it had before layouts).
 */
static kvjit_fast_key store_key(const int64_t *v, int batch_class) {
  const uint64_t quant = v[STORE_F_CACHE_DTYPE] != 0;
  const uint64_t v_vec = v[STORE_F_V_VEC] ? (uint64_t)__builtin_ctzll((uint64_t)v[STORE_F_V_VEC]) + 1 : 0;
  uint64_t a = quant << 55 | (uint64_t)v[STORE_F_ARCH] << 45 | (uint64_t)v[STORE_F_K_ROW] << 14 |
               (uint64_t)batch_class << 12 | (uint64_t)__builtin_ctzll((uint64_t)v[STORE_F_VEC]) << 9 |
               (uint64_t)(v[STORE_F_INDEX] == KVJIT_INDEX_INT64) << 8 | (uint64_t)v[STORE_F_PDL] << 6;
  uint64_t b;
  if (quant) {
    a |= (uint64_t)(v[STORE_F_DTYPE] - KVJIT_DTYPE_F16) << 4 |
         (uint64_t)(v[STORE_F_CACHE_DTYPE] - KVJIT_DTYPE_FP8_E4M3) << 3 | (uint64_t)v[STORE_F_SCALE] << 1;
    b = (uint64_t)v[STORE_F_V_ROW] | (uint64_t)v[STORE_F_SPLIT] << 28 | (uint64_t)v[STORE_F_HEADS] << 44 |
        (uint64_t)v_vec << 60;
  } else {
    b = (uint64_t)v[STORE_F_V_ROW] | (uint64_t)v[STORE_F_SPLIT] << 31 | (uint64_t)v_vec << 52;
  }
  return kvjit_fast_key_make_wide(KVJIT_OP_FAMILY, a, b, kvjit_view_values_word(v + STORE_F_K_PAGE),
                                  kvjit_view_values_word(v + STORE_F_V_PAGE));
}

const kvjit_op kvjit_op_store_kv = {
    .info = {"store_kv_cache", "copy each new token's K/V rows into the cache at its slot (quantizing to fp8 on the way)",
             store_fields, STORE_F_COUNT, KVJIT_STORE_KV_CLASSES},
    .family = KVJIT_OP_FAMILY,
    .plan_size = sizeof(kvjit_store_kv_plan),
    .kernel = KVJIT_STORE_KV_KERNEL,
    .oob_counter = KVJIT_STORE_KV_OOB_COUNTER,
    .max_arch = KVJIT_STORE_KV_MAX_ARCH,
    .check = store_check,
    .written = store_written,
    .plan = store_plan,
    .program = store_program,
    .compile_cost = store_compile_cost,
    .geometry = store_geometry,
    .set_layouts = store_set_layouts,
    .key = store_key,
};

/* ---- the calls ------------------------------------------------------------------------------- */

kvjit_status kvjit_store_kv_cache(kvjit_context *ctx, const kvjit_store_kv_args *args) {
  kvjit_store_kv_request r;
  kvjit_status st = kvjit_store_kv_validate(ctx, args, &r);
  if (st != KVJIT_OK) return st;
  return kvjit_op_call(ctx, &kvjit_op_store_kv, r.values, r.batch_class, args->batch, 1, 0, args->stream, &r.params);
}

kvjit_status kvjit_store_kv_cache_prepare(kvjit_context *ctx, const kvjit_store_kv_args *args) {
  kvjit_store_kv_request r;
  kvjit_status st = kvjit_store_kv_validate(ctx, args, &r);
  if (st != KVJIT_OK) return st;
  return kvjit_op_prepare_call(ctx, &kvjit_op_store_kv, r.values, r.batch_class, args->batch);
}

/* Where each version of the arguments ends: version 2 added dtype .. num_heads, 3 the layouts. */
static const size_t args_end[KVJIT_STORE_KV_ARGS_VERSION + 1] = {
    0, offsetof(kvjit_store_kv_args, dtype), offsetof(kvjit_store_kv_args, k_cache_layout), sizeof(kvjit_store_kv_args)};

kvjit_status kvjit_store_kv_args_init(kvjit_store_kv_args *out, unsigned version) {
  static const kvjit_store_kv_args defaults = KVJIT_STORE_KV_ARGS_INIT;
  return kvjit_struct_init(out, version, &defaults, args_end, KVJIT_STORE_KV_ARGS_VERSION, "kvjit_store_kv_args");
}
