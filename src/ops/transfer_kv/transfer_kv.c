/*
 * The transfer_kv op: its descriptor and its public entry points. Plans and programs are
 * transfer_kv_plan.c; call validation transfer_kv_args.c. The hot path is the store's: validate
 * -> current device's arch -> request key -> lock-free lookup -> launch (grid.y = layers).
 */
#include "status.h"
#include "transfer_kv_op.h"

static const char *const index_words[] = {[KVJIT_INDEX_INT32] = "int32", [KVJIT_INDEX_INT64] = "int64"};
static const char *const location_words[] = {[KVJIT_LOCATION_DEVICE] = "device", [KVJIT_LOCATION_HOST] = "host"};
static const char *const layers_words[] = {"one", "table"};
static const char *const pdl_words[] = {[KVJIT_PDL_AUTO] = "auto", [KVJIT_PDL_ON] = "on", [KVJIT_PDL_OFF] = "off"};
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
};

static kvjit_status transfer_plan(const int64_t *v, int arch, int batch_class, void *out) {
  return kvjit_transfer_kv_plan_make(out, arch, v[TRANSFER_F_K_ROW], v[TRANSFER_F_V_ROW], (int)v[TRANSFER_F_VEC],
                                     (kvjit_index_type)v[TRANSFER_F_INDEX], (kvjit_pdl_mode)v[TRANSFER_F_PDL],
                                     (int)v[TRANSFER_F_SPLIT], (kvjit_location)v[TRANSFER_F_SRC],
                                     (kvjit_location)v[TRANSFER_F_DST], (int)v[TRANSFER_F_LAYERS], batch_class);
}

static kvjit_status transfer_check(int64_t *v, uint64_t given) {
  (void)given;
  kvjit_transfer_kv_plan plan;
  return transfer_plan(v, v[TRANSFER_F_ARCH] ? (int)v[TRANSFER_F_ARCH] : KVJIT_TRANSFER_KV_MAX_ARCH, 0, &plan);
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
  out->pdl = p->pdl;
}

#ifndef KVJIT_OP_FAMILY
#error "KVJIT_OP_FAMILY: the op's line in src/ops/ops.def, set by src/ops/meson.build"
#endif

/*
 * The request key. Word a, below the family byte: arch 46..55 | k_row_bytes 15..45 | batch class
 * 13..14 | log2 vec 10..12 | int64 indices 9 | source on the host 8 | destination on the host 7 |
 * layer tables 6 | pdl mode 4..5. Word b: v_row_bytes 0..30 | split 31..51.
 */
static kvjit_fast_key transfer_key(const int64_t *v, int batch_class) {
  const uint64_t a = (uint64_t)v[TRANSFER_F_ARCH] << 46 | (uint64_t)v[TRANSFER_F_K_ROW] << 15 |
                     (uint64_t)batch_class << 13 | (uint64_t)__builtin_ctzll((uint64_t)v[TRANSFER_F_VEC]) << 10 |
                     (uint64_t)(v[TRANSFER_F_INDEX] == KVJIT_INDEX_INT64) << 9 | (uint64_t)v[TRANSFER_F_SRC] << 8 |
                     (uint64_t)v[TRANSFER_F_DST] << 7 | (uint64_t)v[TRANSFER_F_LAYERS] << 6 |
                     (uint64_t)v[TRANSFER_F_PDL] << 4;
  const uint64_t b = (uint64_t)v[TRANSFER_F_V_ROW] | (uint64_t)v[TRANSFER_F_SPLIT] << 31;
  return kvjit_fast_key_make(KVJIT_OP_FAMILY, a, b);
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
    .written = NULL,
    .plan = transfer_plan,
    .program = transfer_program,
    .geometry = transfer_geometry,
    .key = transfer_key,
};

kvjit_status kvjit_transfer_kv(kvjit_context *ctx, const kvjit_transfer_kv_args *args) {
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(ctx, args, &r);
  if (st != KVJIT_OK) return st;
  return kvjit_op_call(ctx, &kvjit_op_transfer_kv, r.values, r.batch_class, args->batch, r.layers, args->stream,
                       &r.params);
}

kvjit_status kvjit_transfer_kv_prepare(kvjit_context *ctx, const kvjit_transfer_kv_args *args) {
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(ctx, args, &r);
  if (st != KVJIT_OK) return st;
  return kvjit_op_prepare_call(ctx, &kvjit_op_transfer_kv, r.values, r.batch_class, args->batch);
}

kvjit_status kvjit_transfer_kv_args_init(kvjit_transfer_kv_args *out, unsigned version) {
  static const kvjit_transfer_kv_args defaults = KVJIT_TRANSFER_KV_ARGS_INIT;
  static const size_t ends[] = {0, sizeof defaults};
  return kvjit_struct_init(out, version, &defaults, ends, KVJIT_TRANSFER_KV_ARGS_VERSION, "kvjit_transfer_kv_args");
}
