/*
 * The op framework without a GPU, table-driven over every op of the registry (dav1d's checkasm
 * shape): descriptors, manifest lines, plans and geometry, request keys (families, a collision
 * search), and the growing fast table (growth, overflow, concurrent readers).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fast_map.h"
#include "internal_util.h"
#include "kvjit.h"
#include "op.h"
#include "registry.h"
#include "variant.h"
#include "store_kv_op.h"
#include "transfer_kv_op.h"

/* ---- descriptors ------------------------------------------------------------------------------ */

static void test_registry(void **state) {
  (void)state;
  assert_int_equal(kvjit_op_count(), kvjit_num_ops);
  assert_true(kvjit_op_count() >= 2);
  assert_null(kvjit_op_get(kvjit_op_count()));
  assert_null(kvjit_op_find("no_such_op"));
  assert_null(kvjit_op_find(NULL));
  for (size_t i = 0; i < kvjit_num_ops; i++) {
    const kvjit_op *op = kvjit_ops[i];
    const kvjit_op_info *info = kvjit_op_get(i);
    assert_ptr_equal(info, &op->info);
    assert_ptr_equal(kvjit_op_find(info->name), info);
    assert_ptr_equal(kvjit_op_of(info), op);
    assert_true(info->num_fields >= 2 && info->num_fields <= KVJIT_VARIANT_MAX_FIELDS);
    assert_string_equal(info->fields[0].name, "arch");
    assert_true(info->num_classes >= 1 && info->num_classes <= 8);
    assert_true(op->plan_size > 0 && op->plan_size <= KVJIT_OP_MAX_PLAN);
    assert_true(op->family > KVJIT_FAMILY_NONE && op->family < KVJIT_FAMILY_COUNT);
    assert_non_null(op->kernel);
    assert_non_null(op->oob_counter);
    for (size_t j = 0; j < i; j++) {
      assert_true(strcmp(kvjit_ops[j]->info.name, info->name) != 0);
      assert_true(kvjit_ops[j]->family != op->family);
    }
    for (size_t f = 0; f < info->num_fields; f++) {
      const kvjit_op_field *field = &info->fields[f];
      assert_non_null(field->name);
      assert_non_null(field->help);
      for (size_t g = 0; g < f; g++) assert_true(strcmp(info->fields[g].name, field->name) != 0);
      if (field->kind == KVJIT_FIELD_WORD) {
        assert_true(field->num_words >= 1);
      } else {
        assert_int_equal(field->kind, KVJIT_FIELD_INT);
        assert_true(field->min <= field->max);
      }
      /* A field without a prewarm flag is arch or one the CLI fills from its model options. */
      if (field->prewarm == NULL && f != 0) {
        static const char *const filled[] = {"k_row_bytes", "v_row_bytes", "dtype", "cache_dtype", "scale",
                                             "num_heads"};
        int known = 0;
        for (size_t k = 0; k < sizeof filled / sizeof filled[0]; k++) known |= strcmp(filled[k], field->name) == 0;
        if (!known) fail_msg("%s.%s: no prewarm default and no CLI option fills it", info->name, field->name);
      }
    }
  }
}

/* Lines of each op: they parse, check, format back to themselves, and every batch class plans. */
static const struct {
  const char *line;
  const char *canonical; /* NULL: the line itself */
} good_lines[] = {
    {"store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16", NULL},
    {"store_kv_cache arch=0 k_row_bytes=1152 v_row_bytes=0 index=int32 pdl=off split=2 vec=16", NULL},
    {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 pdl=auto split=0 vec=16 dtype=bf16 "
     "cache_dtype=fp8_e4m3 scale=head num_heads=8",
     NULL},
    {"store_kv_cache arch=80 k_row_bytes=1024 v_row_bytes=512 index=int32 pdl=off split=2 vec=8 dtype=float32 "
     "cache_dtype=fp8_e5m2 scale=none",
     "store_kv_cache arch=80 k_row_bytes=1024 v_row_bytes=512 index=int32 pdl=off split=2 vec=8 dtype=f32 "
     "cache_dtype=fp8_e5m2 scale=none"},
    {"store_kv_cache  vec=16 split=0 pdl=auto index=int64 v_row_bytes=256 k_row_bytes=256 arch=90 # plain",
     "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16"},
    {"transfer_kv arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto "
     "split=0 vec=16",
     NULL},
    {"transfer_kv arch=100 k_row_bytes=576 v_row_bytes=0 index=int32 src=host dst=device layers=table pdl=off split=0 "
     "vec=4",
     NULL},
    {"transfer_kv arch=0 k_row_bytes=196 v_row_bytes=392 index=int64 src=host dst=host layers=one pdl=on split=2 vec=2",
     NULL},
};

static void test_lines_round_trip(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof good_lines / sizeof good_lines[0]; i++) {
    kvjit_variant v;
    kvjit_status st = kvjit_variant_parse(&v, good_lines[i].line);
    if (st != KVJIT_OK) fail_msg("line %zu: %s", i, kvjit_last_error());
    char out[512];
    assert_int_equal(kvjit_variant_format(&v, out, sizeof out), KVJIT_OK);
    assert_string_equal(out, good_lines[i].canonical ? good_lines[i].canonical : good_lines[i].line);
    kvjit_variant again;
    assert_int_equal(kvjit_variant_parse(&again, out), KVJIT_OK);
    assert_memory_equal(&again, &v, sizeof v);
    kvjit_variant checked = v;
    assert_int_equal(kvjit_variant_check(&checked), KVJIT_OK);
    assert_memory_equal(&checked, &v, sizeof v);
    /* Every class plans for the line's arch (or a real one), and sources are the op's. */
    const kvjit_op *op = kvjit_op_of(v.op);
    int64_t values[KVJIT_VARIANT_MAX_FIELDS];
    memcpy(values, v.values, sizeof values);
    if (values[0] == 0) values[0] = 90;
    for (int cls = 0; cls < op->info.num_classes; cls++) {
      union {
        unsigned char bytes[KVJIT_OP_MAX_PLAN];
        int64_t align;
      } plan;
      memset(&plan, 0, sizeof plan);
      if (op->plan(values, (int)values[0], cls, plan.bytes) != KVJIT_OK) fail_msg("line %zu class %d", i, cls);
      kvjit_op_program prog;
      assert_int_equal(op->program(plan.bytes, &prog), KVJIT_OK);
      const kvjit_program_desc *desc = &prog.desc;
      assert_int_equal(desc->num_kernels, 1);
      assert_true(kvjit_op_is_instance(desc->kernels[0], op->kernel));
      assert_non_null(strchr(desc->kernels[0], '<'));
      assert_int_equal(desc->arch, values[0]);
      assert_non_null(strstr(desc->source, op->oob_counter));
      kvjit_op_geometry geo;
      op->geometry(plan.bytes, &geo);
      assert_true(geo.block >= 32 && geo.block % 32 == 0);
      assert_true(geo.group_shift <= 5 && geo.split >= 1 && (geo.items == 1 || geo.items == 2));
      assert_true(kvjit_op_blocks(&geo, 1) >= 1);
    }
  }
  /* Through the generic calls: an init'd variant needs its required fields. */
  kvjit_variant v;
  assert_int_equal(kvjit_variant_init(&v, kvjit_op_find("transfer_kv")), KVJIT_OK);
  assert_int_equal(kvjit_variant_check(&v), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "k_row_bytes"));
  v.values[TRANSFER_F_K_ROW] = 512;
  v.values[TRANSFER_F_INDEX] = KVJIT_INDEX_INT64;
  assert_int_equal(kvjit_variant_check(&v), KVJIT_OK);
  char line[256];
  assert_int_equal(kvjit_variant_format(&v, line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "transfer_kv arch=0 k_row_bytes=512 v_row_bytes=0 index=int64 src=device dst=device "
                            "layers=one pdl=auto split=0 vec=16");
  assert_int_equal(kvjit_variant_format(&v, line, 10), KVJIT_ERR_INVALID_ARGUMENT);
  assert_string_equal(line, "");
  v.op = NULL;
  assert_int_equal(kvjit_variant_check(&v), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_variant_init(&v, NULL), KVJIT_ERR_INVALID_ARGUMENT);
}

static void expect_line_error(const char *line, kvjit_status status, const char *needle) {
  kvjit_variant v;
  kvjit_status st = kvjit_variant_parse(&v, line);
  if (st != status || strstr(kvjit_last_error(), needle) == NULL)
    fail_msg("\"%s\": %s \"%s\", expected %s naming \"%s\"", line, kvjit_status_name(st), kvjit_last_error(),
             kvjit_status_name(status), needle);
}

#define T_REST " index=int64 src=device dst=host layers=one pdl=auto split=0 vec=16"

static void test_line_errors(void **state) {
  (void)state;
  const kvjit_status E = KVJIT_ERR_INVALID_ARGUMENT;
  expect_line_error("frobnicate arch=90", E, "store_kv_cache, transfer_kv");
  expect_line_error("", KVJIT_ERR_NOT_FOUND, "no variant");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256" T_REST, E, "missing v_row_bytes");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256 cache_dtype=f16" T_REST, E,
                    "unknown key \"cache_dtype\" for transfer_kv");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256 num_heads=2" T_REST, E,
                    "num_heads: given without scale_kind=head");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256" T_REST " src_dtype=f16 dst_dtype=bf16",
                    KVJIT_ERR_UNSUPPORTED, "transfer_kv converts fp8 to f16/bf16/f32");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 src=gpu dst=host layers=one "
                    "pdl=auto split=0 vec=16",
                    E, "src: bad value \"gpu\"");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 src=device dst=host layers=all "
                    "pdl=auto split=0 vec=16",
                    E, "layers: bad value");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 src=device dst=host layers=one "
                    "pdl=auto split=3 vec=16",
                    E, "split: 3 does not divide");
  expect_line_error("transfer_kv arch=80 k_row_bytes=256 v_row_bytes=256 index=int64 src=device dst=host layers=one "
                    "pdl=on split=0 vec=16",
                    KVJIT_ERR_UNSUPPORTED, "pdl");
  expect_line_error("transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256" T_REST " src=host", E, "src: given twice");
  /* cache/MANIFEST.md: the optional keys only where the canonical line has them (issue 15). */
  expect_line_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16 "
                    "dtype=bf16",
                    E, "dtype: not part of this store_kv_cache line");
  /* A line's op is its first word: a transfer line is never read as a store's. */
  kvjit_variant tv;
  assert_int_equal(kvjit_variant_parse(&tv, "transfer_kv arch=90 k_row_bytes=256 v_row_bytes=256" T_REST), KVJIT_OK);
  assert_ptr_equal(tv.op, kvjit_op_find("transfer_kv"));
}

/* ---- geometry --------------------------------------------------------------------------------- */

/* The generic grid of a store entry is the store's own block count, over plans of every class. */
static void test_store_geometry_matches(void **state) {
  (void)state;
  static const int64_t rows[][2] = {{64, 64}, {96, 96}, {128, 128}, {196, 196}, {576, 0}, {1152, 1024}, {8192, 8192}};
  static const int64_t batches[] = {1, 7, 16, 17, 100, 513, 4097, 32768, 32769, 65537, (int64_t)1 << 33};
  for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
    for (int cls = 0; cls < KVJIT_STORE_KV_CLASSES; cls++)
      for (int split = 0; split <= 2; split += 2) {
        kvjit_store_kv_plan plan;
        if (kvjit_store_kv_plan_make(&plan, 90, rows[r][0], rows[r][1], 16, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, split,
                                     cls) != KVJIT_OK)
          continue;
        kvjit_op_geometry geo;
        kvjit_op_store_kv.geometry(&plan, &geo);
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
          assert_int_equal(kvjit_op_blocks(&geo, batches[b]), kvjit_store_kv_blocks(&plan, batches[b]));
      }
}

/* ---- keys --------------------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* A random value of field @p f (biased to small and boundary values, where real variants are). */
static int64_t random_value(const kvjit_op_field *f, uint64_t *rng) {
  if (f->kind == KVJIT_FIELD_WORD) {
    for (;;) {
      int64_t v = (int64_t)(rng_next(rng) % f->num_words);
      if (f->words[v] != NULL) return v;
    }
  }
  if (f->flags & KVJIT_FIELD_POW2) {
    int64_t v;
    do v = (int64_t)1 << (rng_next(rng) % 5);
    while (v < f->min || v > f->max);
    return v;
  }
  const uint64_t span = (uint64_t)(f->max - f->min);
  switch (rng_next(rng) % 6) {
  case 0: return f->min;
  case 1: return f->max;
  case 2: return f->min + (int64_t)(rng_next(rng) % (span < 64 ? span + 1 : 64));
  case 3: return f->min + (int64_t)((rng_next(rng) % 64) * 64 % (span + 1));
  default: return f->min + (int64_t)(rng_next(rng) % (span + 1));
  }
}

/* Most fields of the ops this test searches (asserted). */
#define KEY_FIELDS KVJIT_VARIANT_MAX_FIELDS

typedef struct key_record {
  kvjit_fast_key key;
  const kvjit_op *op;
  int batch_class;
  int used;
  int64_t values[KEY_FIELDS];
} key_record;

/* Random requests of each op the search records. */
#define KEY_REQUESTS_PER_OP 12000

/* Room for every request the search records, at most 3/4 full: sized by the registry, so that an
 * op added to it is searched as fully as the first two. */
static size_t key_slots(void) {
  size_t classes = 1;
  for (size_t o = 0; o < kvjit_num_ops; o++)
    if ((size_t)kvjit_ops[o]->info.num_classes > classes) classes = (size_t)kvjit_ops[o]->info.num_classes;
  const size_t need = (kvjit_num_ops * KEY_REQUESTS_PER_OP * classes + 64) / 3 * 4;
  size_t slots = 1u << 17;
  while (slots < need) slots <<= 1;
  return slots;
}

/* Insert into an open-addressing set of @p slots; fail on a key held by a different request. */
static void record_key(key_record *set, size_t slots, const kvjit_op *op, const int64_t *values, int cls,
                       size_t *distinct) {
  assert_true(op->info.num_fields <= KEY_FIELDS);
  assert_true(*distinct < slots / 4 * 3);
  kvjit_fast_key key = op->key(values, cls);
  if (kvjit_fast_key_family(key) != op->family) fail_msg("%s: key in family %d", op->info.name, (int)op->family);
  uint64_t h = (key.a * 0x9E3779B97F4A7C15ull ^ key.b * 0xC2B2AE3D27D4EB4Full) >> 40;
  for (uint64_t i = h & (slots - 1);; i = (i + 1) & (slots - 1)) {
    key_record *r = &set[i];
    if (!r->used) {
      r->used = 1;
      r->key = key;
      r->op = op;
      r->batch_class = cls;
      memcpy(r->values, values, op->info.num_fields * sizeof values[0]);
      (*distinct)++;
      return;
    }
    if (!kvjit_fast_key_equal(r->key, key)) continue;
    if (r->op == op && r->batch_class == cls &&
        memcmp(r->values, values, op->info.num_fields * sizeof values[0]) == 0)
      return; /* the same request again */
    char a[512], b[512];
    kvjit_op_format_line(r->op, r->values, a, sizeof a);
    kvjit_op_format_line(op, values, b, sizeof b);
    fail_msg("collision: [%s class %d] and [%s class %d] share key %016llx:%016llx", a, r->batch_class, b, cls,
             (unsigned long long)key.a, (unsigned long long)key.b);
  }
}

/*
 * Random requests of every op (in range for their key, checked by the op's rules so that only
 * requests a call can make count), and the pairs the issue found colliding before the families
 * had one field: no two distinct requests may share a key, in or across families.
 */
static void test_key_collision_search(void **state) {
  (void)state;
  const size_t slots = key_slots();
  key_record *set = calloc(slots, sizeof *set);
  assert_non_null(set);
  size_t distinct = 0, tried = 0;
  uint64_t rng = 0x2545F4914F6CDD1Dull;
  const int per_op = KEY_REQUESTS_PER_OP;
  for (size_t o = 0; o < kvjit_num_ops; o++) {
    const kvjit_op *op = kvjit_ops[o];
    int found = 0;
    for (int n = 0; n < per_op * 20 && found < per_op; n++) {
      int64_t values[KVJIT_VARIANT_MAX_FIELDS];
      for (size_t f = 0; f < op->info.num_fields; f++) values[f] = random_value(&op->info.fields[f], &rng);
      /* Splits that divide the rows are what pass: often automatic, else a small power of two. */
      for (size_t f = 0; f < op->info.num_fields; f++)
        if (strcmp(op->info.fields[f].name, "split") == 0 && rng_next(&rng) % 4 != 0)
          values[f] = (rng_next(&rng) % 2) ? 0 : (int64_t)1 << (rng_next(&rng) % 4);
      /* Cache layouts mostly flat: random static parts rarely fit a random row (test_key_fields_all_count
       * and the layout tests cover them). */
      for (size_t f = 0; f < op->info.num_fields; f++) {
        const char *name = op->info.fields[f].name;
        if (strstr(name, "_page") || strstr(name, "_atom") || strstr(name, "_dim")) values[f] = 0;
      }
      if (values[0] == 0) values[0] = 90;
      tried++;
      if (kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN) != KVJIT_OK) continue;
      found++;
      for (int cls = 0; cls < op->info.num_classes; cls++) record_key(set, slots, op, values, cls, &distinct);
    }
    if (found < per_op / 10) fail_msg("%s: only %d valid random requests of %zu", op->info.name, found, tried);
  }
  /* Issue 17's pair: a manifest marker and a plain plan that shared a fast key. Markers are in a
   * table of their own now; as requests, the two differ. */
  int64_t quant[STORE_F_COUNT] = {90, 27673554, 155458866, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 4737, 16,
                                  KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_NONE, 0};
  int64_t plain[STORE_F_COUNT] = {90, 122455705, 256399955, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 265, 16, 0, 0, 0, 0};
  assert_int_equal(kvjit_op_check_values(&kvjit_op_store_kv, quant, KVJIT_OP_ALL_GIVEN), KVJIT_OK);
  assert_int_equal(kvjit_op_check_values(&kvjit_op_store_kv, plain, KVJIT_OP_ALL_GIVEN), KVJIT_OK);
  for (int cls = 0; cls < KVJIT_STORE_KV_CLASSES; cls++) {
    record_key(set, slots, &kvjit_op_store_kv, quant, cls, &distinct);
    record_key(set, slots, &kvjit_op_store_kv, plain, cls, &distinct);
  }
  printf("key search: %zu distinct requests of %zu tried, no collision\n", distinct, tried);
  free(set);
}

/* Each field on its own, at its extremes, changes the key (nothing is cut off by a shift). */
static void test_key_fields_all_count(void **state) {
  (void)state;
  /* Store, plain and quantizing layouts; transfer. {op, base values, field, other value}. */
  int64_t plain[STORE_F_COUNT] = {90, 1024, 1024, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16, 0, 0, 0, 0};
  int64_t q[STORE_F_COUNT] = {90, 2048, 2048, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16,
                              KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 8};
  int64_t t[TRANSFER_F_COUNT] = {90, 1024, 1024, KVJIT_INDEX_INT64, 0, 1, 0, KVJIT_PDL_AUTO, 0, 16};
  const struct {
    const kvjit_op *op;
    int64_t *base;
    size_t field;
    int64_t other;
  } cases[] = {
      {&kvjit_op_store_kv, plain, STORE_F_ARCH, 1023},       {&kvjit_op_store_kv, plain, STORE_F_K_ROW, INT32_MAX},
      {&kvjit_op_store_kv, plain, STORE_F_V_ROW, INT32_MAX}, {&kvjit_op_store_kv, plain, STORE_F_V_ROW, 0},
      {&kvjit_op_store_kv, plain, STORE_F_INDEX, 1},         {&kvjit_op_store_kv, plain, STORE_F_PDL, 2},
      {&kvjit_op_store_kv, plain, STORE_F_SPLIT, 1 << 20},   {&kvjit_op_store_kv, plain, STORE_F_VEC, 1},
      {&kvjit_op_store_kv, q, STORE_F_K_ROW, (1 << 28) - 2}, {&kvjit_op_store_kv, q, STORE_F_V_ROW, (1 << 28) - 2},
      {&kvjit_op_store_kv, q, STORE_F_SPLIT, 65535},         {&kvjit_op_store_kv, q, STORE_F_HEADS, 65535},
      {&kvjit_op_store_kv, q, STORE_F_DTYPE, KVJIT_DTYPE_F32}, {&kvjit_op_store_kv, q, STORE_F_CACHE_DTYPE, 5},
      {&kvjit_op_store_kv, q, STORE_F_SCALE, 1},             {&kvjit_op_store_kv, q, STORE_F_VEC, 2},
      {&kvjit_op_store_kv, plain, STORE_F_K_PAGE, 65535},    {&kvjit_op_store_kv, plain, STORE_F_K_ATOM, 16383},
      {&kvjit_op_store_kv, plain, STORE_F_K_DIM0, 65535},    {&kvjit_op_store_kv, plain, STORE_F_K_DIM1, 65535},
      {&kvjit_op_store_kv, q, STORE_F_V_PAGE, 2},            {&kvjit_op_store_kv, q, STORE_F_V_ATOM, 1},
      {&kvjit_op_store_kv, q, STORE_F_V_DIM0, 2},            {&kvjit_op_store_kv, q, STORE_F_V_DIM1, 65535},
      {&kvjit_op_transfer_kv, t, TRANSFER_F_ARCH, 1023},     {&kvjit_op_transfer_kv, t, TRANSFER_F_K_ROW, INT32_MAX},
      {&kvjit_op_transfer_kv, t, TRANSFER_F_V_ROW, INT32_MAX}, {&kvjit_op_transfer_kv, t, TRANSFER_F_INDEX, 1},
      {&kvjit_op_transfer_kv, t, TRANSFER_F_SRC, 1},         {&kvjit_op_transfer_kv, t, TRANSFER_F_DST, 0},
      {&kvjit_op_transfer_kv, t, TRANSFER_F_LAYERS, 1},      {&kvjit_op_transfer_kv, t, TRANSFER_F_PDL, 2},
      {&kvjit_op_transfer_kv, t, TRANSFER_F_SPLIT, 1 << 20}, {&kvjit_op_transfer_kv, t, TRANSFER_F_VEC, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t v[KVJIT_VARIANT_MAX_FIELDS];
    memcpy(v, cases[i].base, cases[i].op->info.num_fields * sizeof v[0]);
    kvjit_fast_key k0 = cases[i].op->key(v, 0);
    v[cases[i].field] = cases[i].other;
    kvjit_fast_key k1 = cases[i].op->key(v, 0);
    if (kvjit_fast_key_equal(k0, k1)) fail_msg("case %zu: field %zu does not change the key", i, cases[i].field);
    if (kvjit_fast_key_family(k1) != cases[i].op->family) fail_msg("case %zu: the field spills into the family", i);
    for (int cls = 1; cls < cases[i].op->info.num_classes; cls++)
      assert_false(kvjit_fast_key_equal(k1, cases[i].op->key(v, cls)));
  }
}

/* ---- the fast table ------------------------------------------------------------------------------ */

static kvjit_fast_key test_key(uint64_t i) { return kvjit_fast_key_make(KVJIT_FAMILY_store_kv, i * 2654435761u, ~i); }
/* The tables take keys by address: test key @p i as a pointer, for one call's arguments. */
#define TEST_KEY(i) ((const kvjit_fast_key[]){test_key(i)})

static void test_fast_map_grows(void **state) {
  (void)state;
  kvjit_fast_map *m;
  assert_int_equal(kvjit_fast_map_create(&m, "test", 0), KVJIT_OK);
  enum { N = 100000 };
  static int values[N];
  for (int i = 0; i < N; i++) {
    void *winner = NULL;
    int inserted = 0;
    assert_int_equal(kvjit_fast_map_insert(m, TEST_KEY((uint64_t)i), &values[i], &winner, &inserted), KVJIT_OK);
    assert_ptr_equal(winner, &values[i]);
    assert_true(inserted);
  }
  for (int i = 0; i < N; i++) assert_ptr_equal(kvjit_fast_map_lookup(m, TEST_KEY((uint64_t)i)), &values[i]);
  assert_null(kvjit_fast_map_lookup(m, TEST_KEY(N + 5)));
  /* The first insert of a key wins. */
  void *winner = NULL;
  int inserted = 1;
  assert_int_equal(kvjit_fast_map_insert(m, TEST_KEY(7), &values[8], &winner, &inserted), KVJIT_OK);
  assert_ptr_equal(winner, &values[7]);
  assert_false(inserted);
  kvjit_fast_map_stats s;
  kvjit_fast_map_get_stats(m, &s);
  assert_int_equal(s.entries, N);
  assert_int_equal(s.overflows, 0);
  assert_true(s.grows >= 10);
  assert_true(s.capacity >= 2 * N);
  kvjit_fast_map_destroy(m);
}

/* A table that cannot grow any more keeps every entry, found under its lock. */
static void test_fast_map_overflow(void **state) {
  (void)state;
  kvjit_fast_map *m;
  assert_int_equal(kvjit_fast_map_create(&m, "small", 128), KVJIT_OK);
  static int values[1000];
  for (int i = 0; i < 1000; i++)
    assert_int_equal(kvjit_fast_map_insert(m, TEST_KEY((uint64_t)i), &values[i], NULL, NULL), KVJIT_OK);
  for (int i = 0; i < 1000; i++) assert_ptr_equal(kvjit_fast_map_lookup(m, TEST_KEY((uint64_t)i)), &values[i]);
  assert_null(kvjit_fast_map_lookup(m, TEST_KEY(5000)));
  kvjit_fast_map_stats s;
  kvjit_fast_map_get_stats(m, &s);
  assert_int_equal(s.capacity, 128);
  assert_int_equal(s.entries, 1000);
  assert_int_equal(s.overflows, 1000 - 64);
  kvjit_fast_map_destroy(m);
}

typedef struct reader_arg {
  kvjit_fast_map *map;
  int *values;
  int count;
  _Atomic int *published;
  int errors;
} reader_arg;

static void *reader(void *p) {
  reader_arg *r = p;
  for (int round = 0; round < 50; round++) {
    int upto = atomic_load(r->published);
    for (int i = 0; i < upto; i++)
      if (kvjit_fast_map_lookup(r->map, TEST_KEY((uint64_t)i)) != &r->values[i]) r->errors++;
  }
  return NULL;
}

/* Readers never miss a published key while a writer makes the table grow under them. */
static void test_fast_map_concurrent(void **state) {
  (void)state;
  kvjit_fast_map *m;
  assert_int_equal(kvjit_fast_map_create(&m, "threads", 0), KVJIT_OK);
  enum { N = 20000, READERS = 3 };
  static int values[N];
  _Atomic int published = 0;
  reader_arg args[READERS];
  pthread_t threads[READERS];
  for (int t = 0; t < READERS; t++) {
    args[t] = (reader_arg){m, values, N, &published, 0};
    assert_int_equal(pthread_create(&threads[t], NULL, reader, &args[t]), 0);
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(kvjit_fast_map_insert(m, TEST_KEY((uint64_t)i), &values[i], NULL, NULL), KVJIT_OK);
    atomic_store(&published, i + 1);
  }
  for (int t = 0; t < READERS; t++) {
    pthread_join(threads[t], NULL);
    assert_int_equal(args[t].errors, 0);
  }
  kvjit_fast_map_destroy(m);
}

/* A context's op counters, before any load. */
static void test_op_stats(void **state) {
  (void)state;
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.disable_cache = 1;
  o.log = 0;
  kvjit_context *ctx;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  kvjit_op_stats s = KVJIT_OP_STATS_INIT;
  assert_int_equal(kvjit_op_stats_get(ctx, &s), KVJIT_OK);
  assert_int_equal(s.variants, 0);
  assert_true(s.table_capacity >= 64);
  assert_int_equal(s.table_overflows, 0);
  s.version = 0;
  assert_int_equal(kvjit_op_stats_get(ctx, &s), KVJIT_ERR_INVALID_ARGUMENT);
  uint64_t n;
  assert_int_equal(kvjit_op_oob_count(ctx, "no_such_op", &n, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_op_oob_count(ctx, NULL, &n, 0), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry),           cmocka_unit_test(test_lines_round_trip),
      cmocka_unit_test(test_line_errors),        cmocka_unit_test(test_store_geometry_matches),
      cmocka_unit_test(test_key_collision_search), cmocka_unit_test(test_key_fields_all_count),
      cmocka_unit_test(test_fast_map_grows),     cmocka_unit_test(test_fast_map_overflow),
      cmocka_unit_test(test_fast_map_concurrent), cmocka_unit_test(test_op_stats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
