/*
 * store_kv_cache's plans, pinned: every field of the plans and the launch geometry of a grid of
 * variants x archs x batch classes as they were before the op framework (commit 78d887e), and
 * their cache keys (which cover the template byte for byte, the program name, the options and the
 * kernel's name expression) as issue 19 made them. A change here changes which cubins a shipped
 * cache holds and what the H200 runs: it must be a decision, never a side effect of moving code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "key.h"
#include "op.h"
#include "kvjit.h"
#include "store_kv_plan.h"
#include "test_util.h"
#include "xxh.h"

typedef struct rows {
  int64_t k, v;
} rows;

typedef struct quant_case {
  kvjit_dtype src, cache;
  kvjit_scale_kind scale;
  int64_t heads;
} quant_case;

static const int archs[] = {80, 90, 100};
static const rows row_cases[] = {{64, 64},     {96, 96},     {128, 128},   {196, 196},   {256, 256},   {512, 512},
                                 {576, 0},     {1024, 1024}, {1152, 1152}, {1152, 1024}, {2048, 2048}, {4096, 4096},
                                 {8192, 8192}, {16384, 16384}, {100, 100}, {1024, 512},  {4, 4}};
static const int vecs[] = {16, 4, 1};
static const kvjit_index_type indexes[] = {KVJIT_INDEX_INT32, KVJIT_INDEX_INT64};
static const kvjit_pdl_mode pdls[] = {KVJIT_PDL_AUTO, KVJIT_PDL_ON, KVJIT_PDL_OFF};
static const int splits[] = {0, 2, 3};
static const quant_case quants[] = {
    {KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0},
    {KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_TENSOR, 0},
    {KVJIT_DTYPE_F16, KVJIT_DTYPE_FP8_E5M2, KVJIT_SCALE_PER_HEAD, 2},
    {KVJIT_DTYPE_F32, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_NONE, 0},
    {KVJIT_DTYPE_BF16, KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 8},
};
static const int64_t batches[] = {1, 7, 16, 17, 1000, 32769, 65537};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* What the grid gave at 78d887e, before the framework: how many plans are valid and refused, and
 * (from the same code, before issue 19) the digest of every plan. */
#define PIN_VALID 24896
#define PIN_REFUSED 30184
#define PIN_PLAN_DIGEST 0xf1356c4b9b5fb2e5ull
/* The statuses, keys and launches: 0x853b6c21176bfb85 from 78d887e until issue 19 made the
 * template a C++ template (the source is the template, the plan is in the kernel's name) and
 * added -minimal to the options. */
#define PIN_KEYS_DIGEST 0x37abe4b93ea241d3ull

/* The cache key of a plan's program for a cubin of NVRTC 13.0 (fixed, so the pin needs no NVRTC). */
static kvjit_key plan_cache_key(const kvjit_store_kv_plan *plan) {
  kvjit_op_program prog;
  assert_int_equal(kvjit_store_kv_program(plan, &prog), KVJIT_OK);
  kvjit_key_target target = {plan->arch, KVJIT_PAYLOAD_CUBIN, 0, 13, 0};
  kvjit_key key;
  kvjit_key_compute(&key, &prog.desc, &target);
  return key;
}

/* One plan of the grid, or the status that refused it. */
static kvjit_status grid_plan(size_t a, size_t r, size_t w, size_t i, size_t p, size_t s, size_t q, int cls,
                              kvjit_store_kv_plan *plan) {
  const quant_case *qc = &quants[q];
  kvjit_store_kv_quant quant;
  int quantize = 0;
  kvjit_status st = kvjit_store_kv_quant_resolve(&quant, &quantize, qc->src, qc->cache, qc->scale, qc->heads);
  if (st != KVJIT_OK) return st;
  return kvjit_store_kv_plan_make_quant(plan, archs[a], row_cases[r].k, row_cases[r].v, vecs[w], indexes[i], pdls[p],
                                        splits[s], cls, quantize ? &quant : NULL);
}

/* Every field of a plan, one by one (no padding, whatever the struct's layout). */
static void hash_plan(XXH3_state_t *h, const kvjit_store_kv_plan *p) {
  const int64_t fields[] = {p->arch,        p->k_row_bytes, p->v_row_bytes, p->split,       p->vec,
                            p->lanes,       p->block,       p->items,       p->evict_first, p->index64,
                            p->pdl,         p->pdl_trigger_first,           p->src_dtype,   p->cache_dtype,
                            p->scale_kind,  p->num_heads,   p->fp8_soft};
  XXH3_64bits_update(h, fields, sizeof fields);
}

/* Every plan of the grid folded into two digests: the status of each combination and, for each
 * valid one, its plan and its block count at several batch sizes (plans); the status and, for
 * each valid one, its cache key and launch (keys: the digest pinned before the framework). */
static void test_grid_digest(void **state) {
  (void)state;
  XXH3_state_t *plans = XXH3_createState(), *keys = XXH3_createState();
  assert_non_null(plans);
  assert_non_null(keys);
  XXH3_64bits_reset(plans);
  XXH3_64bits_reset(keys);
  size_t valid = 0, refused = 0;
  for (size_t a = 0; a < COUNT(archs); a++)
    for (size_t r = 0; r < COUNT(row_cases); r++)
      for (size_t w = 0; w < COUNT(vecs); w++)
        for (size_t i = 0; i < COUNT(indexes); i++)
          for (size_t p = 0; p < COUNT(pdls); p++)
            for (size_t s = 0; s < COUNT(splits); s++)
              for (size_t q = 0; q < COUNT(quants); q++)
                for (int cls = 0; cls < KVJIT_STORE_KV_CLASSES; cls++) {
                  kvjit_store_kv_plan plan;
                  int32_t st = (int32_t)grid_plan(a, r, w, i, p, s, q, cls, &plan);
                  XXH3_64bits_update(plans, &st, sizeof st);
                  XXH3_64bits_update(keys, &st, sizeof st);
                  if (st != KVJIT_OK) {
                    refused++;
                    continue;
                  }
                  valid++;
                  hash_plan(plans, &plan);
                  kvjit_key key = plan_cache_key(&plan);
                  XXH3_64bits_update(keys, &key.high, sizeof key.high);
                  XXH3_64bits_update(keys, &key.low, sizeof key.low);
                  int32_t launch[2] = {plan.block, plan.pdl};
                  XXH3_64bits_update(keys, launch, sizeof launch);
                  for (size_t b = 0; b < COUNT(batches); b++) {
                    uint64_t blocks = kvjit_store_kv_blocks(&plan, batches[b]);
                    XXH3_64bits_update(plans, &blocks, sizeof blocks);
                    XXH3_64bits_update(keys, &blocks, sizeof blocks);
                  }
                }
  uint64_t plan_digest = XXH3_64bits_digest(plans), key_digest = XXH3_64bits_digest(keys);
  XXH3_freeState(plans);
  XXH3_freeState(keys);
  printf("store plan grid: %zu valid, %zu refused, plans %016llx, keys %016llx\n", valid, refused,
         (unsigned long long)plan_digest, (unsigned long long)key_digest);
  assert_int_equal(valid, PIN_VALID);
  assert_int_equal(refused, PIN_REFUSED);
  assert_true(plan_digest == PIN_PLAN_DIGEST);
  assert_true(key_digest == PIN_KEYS_DIGEST);
}

typedef struct key_set {
  char keys[16][33];
  char bundles[16][33]; /* an alias's bundle, "" for an entry of its own */
  size_t count;
} key_set;

static int collect_key(const kvjit_cache_entry_info *entry, void *user) {
  key_set *set = user;
  if (set->count < 16) {
    snprintf(set->bundles[set->count], 33, "%s", entry->bundle ? entry->bundle : "");
    snprintf(set->keys[set->count++], 33, "%s", entry->key);
  }
  return 0;
}

/* Index of @p hex in @p set, or -1. */
static int find_key(const key_set *set, const char *hex) {
  for (size_t i = 0; i < set->count; i++)
    if (strcmp(set->keys[i], hex) == 0) return (int)i;
  return -1;
}

/* The whole prewarm path (variant -> plans per class -> programs -> one bundle -> entries) writes
 * exactly the pinned keys: one alias per distinct plan of the variant's four classes, each under
 * the key a runtime miss of that plan computes, all into one pinned bundle entry. (The bundle keys
 * moved in issue 24: a bundle's kernels are now in sorted order, so -j cannot change them.) */
static void test_prewarm_writes_pinned_keys(void **state) {
  (void)state;
  int major = 0, minor = 0;
  if (kvjit_nvrtc_version(&major, &minor) != KVJIT_OK || major != 13 || minor != 0) {
    printf("pinned keys are for NVRTC 13.0, this is %d.%d: skipped\n", major, minor);
    skip();
  }
  static const struct {
    kvjit_store_kv_variant variant;
    const char *keys[4];
    const char *bundle;
  } cases[] = {
      {{KVJIT_STORE_KV_VARIANT_VERSION, 90, 1024, 1024, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16, KVJIT_DTYPE_BYTES,
        KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0},
       {"e43a11d9077ce2831f0361f38ea9edf5", "17b13684856ab2e752e0abe92749f52f", "0f969dc1f6419a5631fa42d9d8f94751",
        NULL},
       "3a450756af673e707d5275c1f92d6ca4"},
      {{KVJIT_STORE_KV_VARIANT_VERSION, 90, 2048, 2048, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 0, 16, KVJIT_DTYPE_BF16,
        KVJIT_DTYPE_FP8_E4M3, KVJIT_SCALE_PER_HEAD, 8},
       {"4863703cc5f027452794a3b2ded9f14c", "c65518508bd6abb78d3becfe0cc7732f", NULL, NULL},
       "32ffc02c777c5f31c88c906cfcd6813b"},
      {{KVJIT_STORE_KV_VARIANT_VERSION, 80, 576, 0, KVJIT_INDEX_INT64, KVJIT_PDL_OFF, 0, 8, KVJIT_DTYPE_BYTES,
        KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0},
       {"059496a87526261abc586418e32fabca", "c0eddfc5141086627e1e64a440a03ba0", "f1028ce7783d01aed9f321de36d2c0dc",
        "ca9a39c320a418fad8cffc9366b1f703"},
       "d059c2d6472df57a6f18b581a22c22a1"},
  };
  int wrong = 0;
  for (size_t c = 0; c < COUNT(cases); c++) {
    char dir[256];
    assert_int_equal(test_dir_make(dir, sizeof dir, "pins"), 0);
    kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
    opt.cache_dir = dir;
    opt.disable_cache = 0;
    opt.log = 0;
    kvjit_context *ctx = NULL;
    assert_int_equal(kvjit_context_create(&ctx, &opt), KVJIT_OK);
    unsigned compiled = 0, cached = 0;
    kvjit_status st = kvjit_store_kv_cache_prewarm(ctx, &cases[c].variant, &compiled, &cached);
    if (st != KVJIT_OK) fail_msg("case %zu: %s", c, kvjit_last_error());
    key_set set = {.count = 0};
    assert_int_equal(kvjit_cache_list(ctx, 0, 0, collect_key, &set, NULL), KVJIT_OK);
    size_t want = 0, bad = 0;
    for (size_t k = 0; k < 4 && cases[c].keys[k] != NULL; k++, want++) {
      int at = find_key(&set, cases[c].keys[k]);
      if (at < 0 || strcmp(set.bundles[at], cases[c].bundle) != 0) bad++;
    }
    /* The aliases' keys are those the variant's plans compute (what a runtime miss looks up). */
    char line[512];
    kvjit_variant v;
    assert_int_equal(kvjit_store_kv_variant_format(&cases[c].variant, line, sizeof line), KVJIT_OK);
    assert_int_equal(kvjit_variant_parse(&v, line), KVJIT_OK);
    const kvjit_op_info *info = kvjit_op_find("store_kv_cache");
    for (int cls = 0; cls < info->num_classes; cls++) {
      kvjit_store_kv_plan plan;
      memset(&plan, 0, sizeof plan);
      assert_int_equal(kvjit_op_of(info)->plan(v.values, (int)v.values[0], cls, &plan), KVJIT_OK);
      kvjit_key key = plan_cache_key(&plan);
      char hex[33];
      kvjit_key_hex(&key, hex);
      int at = find_key(&set, hex);
      if (at < 0 || strcmp(set.bundles[at], cases[c].bundle) != 0) bad++;
    }
    int bundle = find_key(&set, cases[c].bundle);
    if (bad || bundle < 0 || set.bundles[bundle][0] != '\0' || set.count != want + 1) {
      for (size_t k = 0; k < set.count; k++) printf("case %zu: entry %s -> %s\n", c, set.keys[k], set.bundles[k]);
      wrong++;
    }
    assert_int_equal(compiled, want);
    kvjit_context_destroy(ctx);
    assert_int_equal(test_dir_remove(dir), 0);
  }
  assert_int_equal(wrong, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grid_digest),
      cmocka_unit_test(test_prewarm_writes_pinned_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
