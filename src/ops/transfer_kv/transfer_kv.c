/*
 * The transfer_kv op: its descriptor and its public entry points. Plans and programs are
 * transfer_kv_plan.c; call validation transfer_kv_args.c. The hot path is the store's: validate
 * -> current device's arch -> request key -> lock-free lookup -> launch (grid.y = layers).
 */
#include <stddef.h>

#include "driver.h"
#include "dtype.h"
#include "peer.h"
#include "status.h"
#include "transfer_kv_op.h"

static const char *const index_words[] = {[KVJIT_INDEX_INT32] = "int32", [KVJIT_INDEX_INT64] = "int64"};
static const char *const location_words[] = {[KVJIT_LOCATION_DEVICE] = "device", [KVJIT_LOCATION_HOST] = "host"};
static const char *const layers_words[] = {"one", "table"};
static const char *const pdl_words[] = {[KVJIT_PDL_AUTO] = "auto", [KVJIT_PDL_ON] = "on", [KVJIT_PDL_OFF] = "off"};
static const char *const dtype_words[] = {
    [KVJIT_DTYPE_BYTES] = "bytes", [KVJIT_DTYPE_F16] = "f16",           [KVJIT_DTYPE_BF16] = "bf16",
    [KVJIT_DTYPE_F32] = "f32",     [KVJIT_DTYPE_FP8_E4M3] = "fp8_e4m3", [KVJIT_DTYPE_FP8_E5M2] = "fp8_e5m2"};
static const char *const scale_words[] = {
    [KVJIT_SCALE_NONE] = "none", [KVJIT_SCALE_PER_TENSOR] = "tensor", [KVJIT_SCALE_PER_HEAD] = "head"};
static const char *const ctas_words[] = {
    [KVJIT_TRANSFER_KV_CTAS_AUTO] = "auto", [KVJIT_TRANSFER_KV_CTAS_FEW] = "few", [KVJIT_TRANSFER_KV_CTAS_ALL] = "all"};
#define WORDS(t) (t), sizeof(t) / sizeof((t)[0])

static const kvjit_op_field transfer_fields[TRANSFER_F_COUNT] = {
    [TRANSFER_F_ARCH] = {"arch", "compute capability (90 = sm_90); 0 = the current device's", KVJIT_FIELD_INT, 0, 0,
                         KVJIT_TRANSFER_KV_MAX_ARCH, NULL, 0, 0, NULL},
    [TRANSFER_F_K_ROW] = {"k_row_bytes", "bytes of one K row", KVJIT_FIELD_INT, 0, 1, KVJIT_TRANSFER_KV_MAX_ROW_BYTES,
                          NULL, 0, 0, NULL},
    [TRANSFER_F_V_ROW] = {"v_row_bytes", "bytes of one V row; 0 = K only", KVJIT_FIELD_INT, 0, 0,
                          KVJIT_TRANSFER_KV_MAX_ROW_BYTES, NULL, 0, 0, NULL},
    [TRANSFER_F_INDEX] = {"index", "type of the slot ids (both arrays)", KVJIT_FIELD_WORD, 0, 0, 0, WORDS(index_words),
                          0, "int64"},
    [TRANSFER_F_SRC] = {"src", "where the source caches are: device memory or pinned host memory", KVJIT_FIELD_WORD, 0,
                        0, 0, WORDS(location_words), 0, "device,host"},
    [TRANSFER_F_DST] = {"dst", "where the destination caches are", KVJIT_FIELD_WORD, 0, 0, 0, WORDS(location_words), 0,
                        "device,host"},
    [TRANSFER_F_LAYERS] = {"layers", "one layer per call, or a table of per-layer pointers (all layers at once)",
                           KVJIT_FIELD_WORD, 0, 0, 0, WORDS(layers_words), 0, "one,table"},
    [TRANSFER_F_PDL] = {"pdl", "programmatic dependent launch, as asked (auto: on from sm_90)", KVJIT_FIELD_WORD, 0, 0,
                        0, WORDS(pdl_words), 0, "auto"},
    [TRANSFER_F_SPLIT] = {"split", "parts each row is split into; 0 = automatic", KVJIT_FIELD_INT, 0, 0,
                          KVJIT_TRANSFER_KV_MAX_SPLIT, NULL, 0, 0, "auto"},
    [TRANSFER_F_VEC] = {"vec", "widest access, in bytes, the strides (and one layer's pointers) allow",
                        KVJIT_FIELD_INT, KVJIT_FIELD_POW2, 1, 16, NULL, 0, 16, "16"},
    [TRANSFER_F_SRC_DTYPE] = {"src_dtype", "element type of the source rows of a converting copy", KVJIT_FIELD_WORD,
                              KVJIT_FIELD_OPTIONAL | KVJIT_FIELD_DTYPE, 0, 0, WORDS(dtype_words), KVJIT_DTYPE_BYTES,
                              "bytes"},
    [TRANSFER_F_DST_DTYPE] = {"dst_dtype",
                              "element type of the destination: fp8 <-> f16/bf16/f32 converts, bytes copies",
                              KVJIT_FIELD_WORD, KVJIT_FIELD_OPTIONAL | KVJIT_FIELD_DTYPE, 0, 0, WORDS(dtype_words),
                              KVJIT_DTYPE_BYTES, "bytes"},
    /* scale_kind, not the store's `scale`: kvjit prewarm's --scale is the model options' (store). */
    [TRANSFER_F_SCALE] = {"scale_kind", "where a conversion's scales come from", KVJIT_FIELD_WORD,
                          KVJIT_FIELD_OPTIONAL, 0, 0, WORDS(scale_words), KVJIT_SCALE_NONE, "none"},
    [TRANSFER_F_HEADS] = {"num_heads", "heads per K row and per V row (scale_kind=head)", KVJIT_FIELD_INT,
                          KVJIT_FIELD_OPTIONAL, 0, KVJIT_TRANSFER_KV_MAX_HEADS, NULL, 0, 0, "0"},
    KVJIT_VIEW_FIELDS(TRANSFER_F_SRC, "src_", "source caches' view"),
    KVJIT_VIEW_FIELDS(TRANSFER_F_DST, "dst_", "destination caches' view"),
    [TRANSFER_F_CTAS] = {"ctas", "SMs a copy takes: few CTAs striding over the batch, or all the batch needs (auto: "
                         "few over the host link)", KVJIT_FIELD_WORD, KVJIT_FIELD_OPTIONAL, 0, 0, WORDS(ctas_words),
                         KVJIT_TRANSFER_KV_CTAS_AUTO, "auto"},
};

kvjit_status kvjit_transfer_kv_shape_of(const int64_t *v, kvjit_transfer_kv_shape *out) {
  kvjit_transfer_kv_shape_plain(out, v[TRANSFER_F_K_ROW], v[TRANSFER_F_V_ROW], (kvjit_location)v[TRANSFER_F_SRC],
                                (kvjit_location)v[TRANSFER_F_DST]);
  out->vec = (int)v[TRANSFER_F_VEC];
  out->index_type = (kvjit_index_type)v[TRANSFER_F_INDEX];
  out->pdl = (kvjit_pdl_mode)v[TRANSFER_F_PDL];
  out->split = (int)v[TRANSFER_F_SPLIT];
  out->table = (int)v[TRANSFER_F_LAYERS];
  out->src_dtype = (kvjit_dtype)v[TRANSFER_F_SRC_DTYPE];
  out->dst_dtype = (kvjit_dtype)v[TRANSFER_F_DST_DTYPE];
  out->scale_kind = (kvjit_scale_kind)v[TRANSFER_F_SCALE];
  out->num_heads = v[TRANSFER_F_HEADS];
  out->ctas = (kvjit_transfer_kv_ctas)v[TRANSFER_F_CTAS];
  /* The views' static parts for their rows: the source's in source bytes, the destination's in
   * its own (converting: the source's elements in the destination's type). */
  const int es = out->src_dtype == KVJIT_DTYPE_BYTES ? 1 : kvjit_dtype_bytes(out->src_dtype);
  const int ed = out->dst_dtype == KVJIT_DTYPE_BYTES ? 1 : kvjit_dtype_bytes(out->dst_dtype);
  kvjit_status st = kvjit_view_from_values(&out->src_view, v + TRANSFER_F_SRC_PAGE, out->k_row_bytes, "src_");
  if (st == KVJIT_OK)
    st = kvjit_view_from_values(&out->dst_view, v + TRANSFER_F_DST_PAGE, out->k_row_bytes / es * ed, "dst_");
  return st;
}

/* What `ctas=auto` means for a direction: few CTAs over the host link. */
static int64_t auto_ctas(const int64_t *v) {
  return v[TRANSFER_F_SRC] == KVJIT_LOCATION_HOST || v[TRANSFER_F_DST] == KVJIT_LOCATION_HOST
             ? KVJIT_TRANSFER_KV_CTAS_FEW
             : KVJIT_TRANSFER_KV_CTAS_ALL;
}

static kvjit_status transfer_plan(const int64_t *v, int arch, int batch_class, void *out) {
  kvjit_transfer_kv_shape shape;
  kvjit_status st = kvjit_transfer_kv_shape_of(v, &shape);
  return st != KVJIT_OK ? st : kvjit_transfer_kv_plan_make(out, arch, &shape, batch_class);
}

static kvjit_status transfer_check(int64_t *v, uint64_t given) {
  if (given != KVJIT_OP_ALL_GIVEN && (given & KVJIT_OP_GIVEN(TRANSFER_F_HEADS)) &&
      v[TRANSFER_F_SCALE] != KVJIT_SCALE_PER_HEAD) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: given without scale_kind=head");
  }
  kvjit_transfer_kv_shape shape;
  kvjit_transfer_kv_shape_plain(&shape, v[TRANSFER_F_K_ROW], v[TRANSFER_F_V_ROW], (kvjit_location)v[TRANSFER_F_SRC],
                                (kvjit_location)v[TRANSFER_F_DST]);
  shape.src_dtype = (kvjit_dtype)v[TRANSFER_F_SRC_DTYPE];
  shape.dst_dtype = (kvjit_dtype)v[TRANSFER_F_DST_DTYPE];
  shape.scale_kind = (kvjit_scale_kind)v[TRANSFER_F_SCALE];
  shape.num_heads = v[TRANSFER_F_HEADS];
  kvjit_status st = kvjit_transfer_kv_convert_resolve(&shape);
  if (st != KVJIT_OK) return st;
  v[TRANSFER_F_SRC_DTYPE] = shape.src_dtype;
  v[TRANSFER_F_DST_DTYPE] = shape.dst_dtype;
  v[TRANSFER_F_SCALE] = shape.scale_kind;
  v[TRANSFER_F_HEADS] = shape.num_heads;
  if (v[TRANSFER_F_CTAS] == KVJIT_TRANSFER_KV_CTAS_AUTO) v[TRANSFER_F_CTAS] = auto_ctas(v);
  kvjit_transfer_kv_plan plan;
  return transfer_plan(v, v[TRANSFER_F_ARCH] ? (int)v[TRANSFER_F_ARCH] : KVJIT_TRANSFER_KV_MAX_ARCH, 0, &plan);
}

/* A plain copy of flat caches on the direction's CTAs keeps its version-1 line; a conversion ends
 * with its dtypes and scale kind (num_heads with scale_kind=head), a budget other than the
 * direction's with it, a laid-out side with the fields of its view that are not 0. */
static int transfer_written(const int64_t *v, size_t field) {
  if (field == TRANSFER_F_HEADS) return v[TRANSFER_F_SCALE] == KVJIT_SCALE_PER_HEAD;
  if (field == TRANSFER_F_CTAS) return v[TRANSFER_F_CTAS] != auto_ctas(v);
  if (field >= TRANSFER_F_SRC_PAGE) return v[field] != 0;
  return v[TRANSFER_F_DST_DTYPE] != KVJIT_DTYPE_BYTES;
}

static kvjit_status transfer_program(const void *plan, kvjit_op_program *out) {
  return kvjit_transfer_kv_program(plan, out);
}

static void transfer_geometry(const void *plan, kvjit_op_geometry *out) {
  const kvjit_transfer_kv_plan *p = plan;
  out->block = (uint32_t)p->block;
  out->group_shift = (uint32_t)__builtin_ctz((unsigned)p->lanes);
  out->split = (uint32_t)p->split;
  out->items = (uint32_t)p->items;
  out->pdl = p->pdl != 0;
  out->loops = p->loop != 0;
}

/* A side's stand-in slot count: two pages of its paged caches (two slots flat), as many as its
 * views must hold. */
static int64_t side_slots(const kvjit_layout *k, const kvjit_layout *v) {
  int64_t slots = 2;
  if (k != NULL && 2 * k->page_size > slots) slots = 2 * k->page_size;
  if (v != NULL && 2 * v->page_size > slots) slots = 2 * v->page_size;
  return slots;
}

/*
 * kvjit_variant_set_layouts(): layouts[0..3] are the source's K and V caches', then the
 * destination's (NULL: flat rows). The call's own validation keys them (no second copy of its
 * rules): stand-in arguments with the variant's fields, 16-byte aligned pointers far apart that
 * nothing dereferences (batch 0), give the views' fields and the widest access a call with
 * these layouts gets.
 */
static kvjit_status transfer_set_layouts(int64_t *v, const kvjit_layout *const *layouts, size_t count) {
  if (count != 4) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count: transfer_kv takes 4 layouts (source K, source V, "
                      "destination K, destination V), got %zu", count);
  }
  const int has_v = v[TRANSFER_F_V_ROW] != 0;
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  const uintptr_t apart = (uintptr_t)1 << 44;
  a.src_k = (const void *)apart;
  a.dst_k = (void *)(3 * apart);
  a.src_v = has_v ? (const void *)(2 * apart) : NULL;
  a.dst_v = has_v ? (void *)(4 * apart) : NULL;
  a.src_indices = a.dst_indices = (const void *)(5 * apart);
  a.index_type = (kvjit_index_type)v[TRANSFER_F_INDEX];
  a.k_row_bytes = v[TRANSFER_F_K_ROW];
  a.v_row_bytes = v[TRANSFER_F_V_ROW];
  a.src_num_slots = side_slots(layouts[0], layouts[1]);
  a.dst_num_slots = side_slots(layouts[2], layouts[3]);
  a.num_layers = v[TRANSFER_F_LAYERS] ? 1 : 0;
  a.src = (kvjit_location)v[TRANSFER_F_SRC];
  a.dst = (kvjit_location)v[TRANSFER_F_DST];
  a.split = (int)v[TRANSFER_F_SPLIT];
  a.pdl = (kvjit_pdl_mode)v[TRANSFER_F_PDL];
  a.src_dtype = (kvjit_dtype)v[TRANSFER_F_SRC_DTYPE];
  a.dst_dtype = (kvjit_dtype)v[TRANSFER_F_DST_DTYPE];
  a.scale_kind = (kvjit_scale_kind)v[TRANSFER_F_SCALE];
  a.k_scale = a.v_scale = (const float *)(6 * apart);
  a.num_heads = v[TRANSFER_F_HEADS];
  a.src_k_layout = layouts[0];
  a.src_v_layout = layouts[1];
  a.dst_k_layout = layouts[2];
  a.dst_v_layout = layouts[3];
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(&a, &r);
  if (st != KVJIT_OK) return st;
  for (size_t f = TRANSFER_F_SRC_PAGE; f < TRANSFER_F_COUNT; f++) v[f] = r.values[f];
  if (r.values[TRANSFER_F_VEC] < v[TRANSFER_F_VEC]) v[TRANSFER_F_VEC] = r.values[TRANSFER_F_VEC];
  return KVJIT_OK;
}

#ifndef KVJIT_OP_FAMILY
#error "KVJIT_OP_FAMILY: the op's line in src/ops/ops.def, set by src/ops/meson.build"
#endif

/*
 * The request key. Word a, below the family byte: arch 46..55 | k_row_bytes 15..45 | batch class
 * 13..14 | log2 vec 10..12 | int64 indices 9 | source on the host 8 | destination on the host 7 |
 * layer tables 6 | pdl mode 4..5 | scale kind 2..3 | converting 1 | few CTAs 0. Word b: plain
 * copies v_row_bytes 0..30 | split 31..51; converting v_row_bytes 0..23 | split 24..44 | heads
 * 45..57 | source dtype 58..60 | destination dtype 61..63 (validation keeps each in its bits).
 */
static kvjit_fast_key transfer_key(const int64_t *v, int batch_class) {
  const uint64_t convert = v[TRANSFER_F_DST_DTYPE] != KVJIT_DTYPE_BYTES;
  const uint64_t a = (uint64_t)v[TRANSFER_F_ARCH] << 46 | (uint64_t)v[TRANSFER_F_K_ROW] << 15 |
                     (uint64_t)batch_class << 13 | (uint64_t)__builtin_ctzll((uint64_t)v[TRANSFER_F_VEC]) << 10 |
                     (uint64_t)(v[TRANSFER_F_INDEX] == KVJIT_INDEX_INT64) << 9 | (uint64_t)v[TRANSFER_F_SRC] << 8 |
                     (uint64_t)v[TRANSFER_F_DST] << 7 | (uint64_t)v[TRANSFER_F_LAYERS] << 6 |
                     (uint64_t)v[TRANSFER_F_PDL] << 4 | (uint64_t)v[TRANSFER_F_SCALE] << 2 | convert << 1 |
                     (uint64_t)(v[TRANSFER_F_CTAS] == KVJIT_TRANSFER_KV_CTAS_FEW);
  uint64_t b;
  if (convert) {
    b = (uint64_t)v[TRANSFER_F_V_ROW] | (uint64_t)v[TRANSFER_F_SPLIT] << 24 | (uint64_t)v[TRANSFER_F_HEADS] << 45 |
        (uint64_t)v[TRANSFER_F_SRC_DTYPE] << 58 | (uint64_t)v[TRANSFER_F_DST_DTYPE] << 61;
  } else {
    b = (uint64_t)v[TRANSFER_F_V_ROW] | (uint64_t)v[TRANSFER_F_SPLIT] << 31;
  }
  /* Words c and d: the static parts of the source's and the destination's views (0: flat). */
  return kvjit_fast_key_make_wide(KVJIT_OP_FAMILY, a, b, kvjit_view_values_word(v + TRANSFER_F_SRC_PAGE),
                                  kvjit_view_values_word(v + TRANSFER_F_DST_PAGE));
}

const kvjit_op kvjit_op_transfer_kv = {
    .info = {"transfer_kv", "copy K/V rows from slots of one cache to slots of another (device or pinned host memory)",
             transfer_fields, TRANSFER_F_COUNT, KVJIT_TRANSFER_KV_CLASSES},
    .family = KVJIT_OP_FAMILY,
    .plan_size = sizeof(kvjit_transfer_kv_plan),
    .kernel = KVJIT_TRANSFER_KV_KERNEL,
    .oob_counter = KVJIT_TRANSFER_KV_OOB_COUNTER,
    .max_arch = KVJIT_TRANSFER_KV_MAX_ARCH,
    .check = transfer_check,
    .written = transfer_written,
    .plan = transfer_plan,
    .program = transfer_program,
    .geometry = transfer_geometry,
    .set_layouts = transfer_set_layouts,
    .key = transfer_key,
};

kvjit_status kvjit_transfer_kv(kvjit_context *ctx, const kvjit_transfer_kv_args *args) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(args, &r);
  if (st != KVJIT_OK) return st;
  return kvjit_op_call(ctx, &kvjit_op_transfer_kv, r.values, r.batch_class, args->batch, r.layers, r.max_blocks,
                       args->stream, &r.params);
}

kvjit_status kvjit_transfer_kv_prepare(kvjit_context *ctx, const kvjit_transfer_kv_args *args) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(args, &r);
  if (st != KVJIT_OK) return st;
  return kvjit_op_prepare_call(ctx, &kvjit_op_transfer_kv, r.values, r.batch_class, args->batch);
}

kvjit_status kvjit_transfer_kv_check_devices(kvjit_context *ctx, const kvjit_transfer_kv_args *args, unsigned flags) {
  if ((flags & ~KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "flags: unknown bits 0x%x (KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS: 0x%x)",
                      flags & ~KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS, KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS);
  }
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(args, &r);
  /* The rules between the variant's fields too (a call checks them on its miss): what this
   * check passes, the call does not refuse for an argument. */
  if (st == KVJIT_OK) st = kvjit_op_variant_error_or(&kvjit_op_transfer_kv, r.values, KVJIT_OK);
  if (st != KVJIT_OK) return st;
  const kvjit_driver *drv;
  if ((st = kvjit_driver_get(&drv)) != KVJIT_OK) return st;
  /* Host caches are reached through unified addressing from every device: only device ones. */
  const int src_dev = args->src == KVJIT_LOCATION_DEVICE, dst_dev = args->dst == KVJIT_LOCATION_DEVICE;
  const int v2 = args->version >= 2;
  const kvjit_peer_pointer all[] = {
      {"src_k", src_dev ? args->src_k : NULL},   {"src_v", src_dev ? args->src_v : NULL},
      {"dst_k", dst_dev ? args->dst_k : NULL},   {"dst_v", dst_dev ? args->dst_v : NULL},
      {"src_indices", args->src_indices},        {"dst_indices", args->dst_indices},
      {"k_scale", v2 ? args->k_scale : NULL},    {"v_scale", v2 ? args->v_scale : NULL}};
  kvjit_peer_pointer used[sizeof all / sizeof all[0]];
  size_t n = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i].ptr != NULL) used[n++] = all[i];
  if (n == 0) return KVJIT_OK; /* batch 0 with no pointers: nothing to reach */
  /* A thread with no context takes the stream's, as a call does (kvjit_peer_check() names the
   * failure when there is none); a context of the thread's own is kept. */
  (void)kvjit_driver_adopt_context(drv, args->stream);
  return kvjit_peer_check(drv, args->stream, used, n, (flags & KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS) != 0);
}

kvjit_status kvjit_transfer_kv_args_init(kvjit_transfer_kv_args *out, unsigned version) {
  static const kvjit_transfer_kv_args defaults = KVJIT_TRANSFER_KV_ARGS_INIT;
  static const size_t ends[] = {0, offsetof(kvjit_transfer_kv_args, src_dtype), sizeof defaults};
  return kvjit_struct_init(out, version, &defaults, ends, KVJIT_TRANSFER_KV_ARGS_VERSION, "kvjit_transfer_kv_args");
}
