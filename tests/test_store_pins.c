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
#include "registry.h"
#include "internal_util.h"
#include "kvjit.h"
#include "store_kv_op.h"
#include "store_kv_plan.h"
#include "test_util.h"
#include "variant.h"

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

/* What the grid gave at 78d887e, before the framework: how many plans are valid and refused. Each
 * combination's plans (or the status that refused it) are pinned one line each in
 * tests/pins/store_plans.txt (its keys as issue 19 made them: the template a C++ template, the plan
 * in the kernel's name, -minimal in the options), so that a change names the combinations that
 * moved. Until it became text the grid was two digests: plans 0xf1356c4b9b5fb2e5, keys
 * 0x37abe4b93ea241d3. */
#define PIN_VALID 24896
#define PIN_REFUSED 30184

static const char *pins_path; /* argv[1] */

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

/* ---- the pins as text ------------------------------------------------------------------------- */

typedef struct text {
  char *data;
  size_t len, cap;
  size_t lines;
} text;

__attribute__((format(printf, 2, 3))) static void text_add(text *t, const char *fmt, ...);
static void text_add(text *t, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    if (t->data && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    t->cap = (t->cap + (size_t)n + 1) * 2;
    t->data = realloc(t->data, t->cap);
    assert_non_null(t->data);
  }
}

static const char *pdl_word(kvjit_pdl_mode p) { return p == KVJIT_PDL_ON ? "on" : p == KVJIT_PDL_OFF ? "off" : "auto"; }

/* One line per plan key: every field of the plan and its block count at each of batches[]. */
static void plan_line(text *plans, const kvjit_store_kv_plan *p, const char *hex) {
  text_add(plans,
           "plan %.16s sm%d k%lld v%lld split=%d vec=%d lanes=%d block=%d items=%d evict=%d i64=%d pdl=%d "
           "first=%d q=%d/%d/%d/%lld soft=%d blocks=",
           hex, p->arch, (long long)p->k_row_bytes, (long long)p->v_row_bytes, p->split, p->vec, p->lanes, p->block,
           p->items, p->evict_first, p->index64, p->pdl, p->pdl_trigger_first, (int)p->src_dtype, (int)p->cache_dtype,
           (int)p->scale_kind, (long long)p->num_heads, p->fp8_soft);
  for (size_t b = 0; b < COUNT(batches); b++)
    text_add(plans, "%s%llu", b ? "," : "", (unsigned long long)kvjit_store_kv_blocks(p, batches[b]));
  text_add(plans, "\n");
  plans->lines++;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Laid-out caches (issue 29): static views of vLLM's layouts as a variant's fields hold them
 * (src/op/layout.h's canonical form: page, atom, dim0, dim1 of K then V, and v_vec), plain and
 * quantizing, on the layout kernel's template. */
static const struct {
  const char *name;
  int64_t k_row, v_row, fields[9]; /* k page, atom, dim0, dim1, v page, atom, dim0, dim1, v_vec */
  kvjit_dtype src;                  /* BYTES: a plain copy; else quantizing to e4m3 with per-head scales */
} layout_cases[] = {
    {"hnd_flash_8x128_bs16", 2048, 2048, {16, 256, 0, 0, 16, 256, 0, 0, 0}, KVJIT_DTYPE_BYTES},
    {"hnd_flash_8x128_bs16_fp8", 2048, 2048, {16, 128, 0, 0, 16, 128, 0, 0, 0}, KVJIT_DTYPE_BF16},
    {"hnd_3x96_bs5", 576, 576, {5, 192, 0, 0, 5, 192, 0, 0, 0}, KVJIT_DTYPE_BYTES},
    {"chunked_8x128_bs16", 2048, 2048, {16, 16, 0, 0, 16, 2, 0, 0, 2}, KVJIT_DTYPE_BYTES},
    {"chunked_8x128_bs16_fp8", 2048, 2048, {16, 16, 0, 0, 16, 1, 0, 0, 2}, KVJIT_DTYPE_BF16},
    {"k_only_3_dims", 2048, 0, {0, 16, 8, 4, 0, 0, 0, 0, 0}, KVJIT_DTYPE_BYTES},
};

static void layout_text(text *out) {
  text_add(out, "# Laid-out caches: arch, static views (K page/atom/dim0/dim1, V the same, v_vec) -> per batch\n"
                "# class the plan's key; each plan: split, vec, v_vec, lanes and the views it is specialized on.\n");
  for (size_t a = 0; a < COUNT(archs); a++)
    for (size_t i = 0; i < COUNT(layout_cases); i++) {
      int64_t v[STORE_F_COUNT] = {archs[a], layout_cases[i].k_row, layout_cases[i].v_row, KVJIT_INDEX_INT64,
                                  KVJIT_PDL_AUTO, 0, 16};
      if (layout_cases[i].src != KVJIT_DTYPE_BYTES) {
        v[STORE_F_DTYPE] = layout_cases[i].src;
        v[STORE_F_CACHE_DTYPE] = KVJIT_DTYPE_FP8_E4M3;
        v[STORE_F_SCALE] = KVJIT_SCALE_PER_HEAD;
        v[STORE_F_HEADS] = 8;
      }
      memcpy(v + STORE_F_K_PAGE, layout_cases[i].fields, sizeof layout_cases[i].fields);
      text_add(out, "layout sm%d %s:", archs[a], layout_cases[i].name);
      assert_int_equal(kvjit_op_check_values(&kvjit_op_store_kv, v, KVJIT_OP_ALL_GIVEN), KVJIT_OK);
      for (int cls = 0; cls < KVJIT_STORE_KV_CLASSES; cls++) {
        kvjit_store_kv_plan p;
        assert_int_equal(kvjit_op_store_kv.plan(v, archs[a], cls, &p), KVJIT_OK);
        assert_true(p.layout);
        kvjit_key key = plan_cache_key(&p);
        char hex[33];
        kvjit_key_hex(&key, hex);
        text_add(out, " %.16s split=%d vec=%d/%d lanes=%d k=%lld/%lld/%lld,%lld,%lld v=%lld/%lld/%lld,%lld,%lld", hex,
                 p.split, p.vec, p.v_vec, p.lanes, (long long)p.k_view.page_size, (long long)p.k_view.atom,
                 (long long)p.k_view.extents[0], (long long)p.k_view.extents[1], (long long)p.k_view.extents[2],
                 (long long)p.v_view.page_size, (long long)p.v_view.atom, (long long)p.v_view.extents[0],
                 (long long)p.v_view.extents[1], (long long)p.v_view.extents[2]);
      }
      text_add(out, "\n");
    }
}

/* The grid as text: one line per combination (its batch classes: the first 16 hex digits of each
 * plan's cache key, or the status that refused it), then one line per distinct plan, sorted. */
static void grid_text(text *out, size_t *valid, size_t *refused) {
  text plans = {0};
  *valid = *refused = 0;
  text_add(out, "# store_kv_cache's plans, pinned (tests/test_store_pins.c checks and rewrites this file).\n"
                "# One line per combination: arch, rows, vec, index, pdl, split, quant (src/cache/scale/heads)\n"
                "# -> per batch class the plan's key (its first 16 hex digits) or the refusing status; then each\n"
                "# plan: its key, its fields (first: PDL trigger first) and its blocks at batch 1,7,16,17,1000,\n"
                "# 32769,65537.\n");
  for (size_t a = 0; a < COUNT(archs); a++)
    for (size_t r = 0; r < COUNT(row_cases); r++)
      for (size_t w = 0; w < COUNT(vecs); w++)
        for (size_t i = 0; i < COUNT(indexes); i++)
          for (size_t p = 0; p < COUNT(pdls); p++)
            for (size_t s = 0; s < COUNT(splits); s++)
              for (size_t q = 0; q < COUNT(quants); q++) {
                const quant_case *qc = &quants[q];
                text_add(out, "sm%d k%lld v%lld vec%d %s pdl=%s split=%d q=%d/%d/%d/%lld:", archs[a],
                         (long long)row_cases[r].k, (long long)row_cases[r].v, vecs[w],
                         indexes[i] == KVJIT_INDEX_INT32 ? "int32" : "int64", pdl_word(pdls[p]), splits[s],
                         (int)qc->src, (int)qc->cache, (int)qc->scale, (long long)qc->heads);
                for (int cls = 0; cls < KVJIT_STORE_KV_CLASSES; cls++) {
                  kvjit_store_kv_plan plan;
                  kvjit_status st = grid_plan(a, r, w, i, p, s, q, cls, &plan);
                  if (st != KVJIT_OK) {
                    (*refused)++;
                    text_add(out, " %s", st == KVJIT_ERR_INVALID_ARGUMENT ? "invalid"
                                         : st == KVJIT_ERR_UNSUPPORTED    ? "unsupported"
                                                                          : kvjit_status_name(st));
                    continue;
                  }
                  (*valid)++;
                  kvjit_key key = plan_cache_key(&plan);
                  char hex[33];
                  kvjit_key_hex(&key, hex);
                  text_add(out, " %.16s", hex);
                  plan_line(&plans, &plan, hex);
                }
                text_add(out, "\n");
                out->lines++;
              }
  char **lines = malloc(sizeof *lines * (plans.lines ? plans.lines : 1));
  assert_non_null(lines);
  size_t n = 0;
  for (char *line = plans.data, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    *next++ = '\0';
    lines[n++] = line;
  }
  qsort(lines, n, sizeof *lines, cmp_str);
  for (size_t k = 0; k < n; k++)
    if (k == 0 || strcmp(lines[k], lines[k - 1]) != 0) text_add(out, "%s\n", lines[k]);
  free(lines);
  free(plans.data);
  layout_text(out);
}

/* The next line of @p s (NUL-terminated in place), or NULL at the end. */
static char *next_line(char **s) {
  if (**s == '\0') return NULL;
  char *line = *s, *nl = strchr(line, '\n');
  if (nl) {
    *nl = '\0';
    *s = nl + 1;
  } else {
    *s = line + strlen(line);
  }
  return line;
}

/* Every line of the grid's text against the pinned file; the lines that differ are printed. With
 * KVJIT_PINS_WRITE=PATH the text is written there first (to rewrite the file when a change is meant). */
static void test_grid_pins(void **state) {
  (void)state;
  text now = {0};
  size_t valid, refused;
  grid_text(&now, &valid, &refused);
  printf("store plan grid: %zu valid, %zu refused, %zu combinations\n", valid, refused, now.lines);
  assert_int_equal(valid, PIN_VALID);
  assert_int_equal(refused, PIN_REFUSED);
  const char *write = getenv("KVJIT_PINS_WRITE");
  if (write && write[0]) {
    FILE *w = fopen(write, "w");
    assert_non_null(w);
    assert_int_equal(fwrite(now.data, 1, now.len, w), now.len);
    fclose(w);
    printf("wrote %s\n", write);
  }
  FILE *f = fopen(pins_path, "r");
  if (f == NULL) fail_msg("%s: cannot open", pins_path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *pinned = malloc((size_t)size + 1);
  assert_non_null(pinned);
  assert_int_equal(fread(pinned, 1, (size_t)size, f), (size_t)size);
  pinned[size] = '\0';
  fclose(f);
  char *a = pinned, *b = now.data, *la, *lb;
  size_t line = 0, differ = 0;
  for (;;) {
    la = next_line(&a);
    lb = next_line(&b);
    if (la == NULL && lb == NULL) break;
    line++;
    if (la && lb && strcmp(la, lb) == 0) continue;
    if (differ++ < 20) printf("line %zu:\n  pinned: %s\n  now:    %s\n", line, la ? la : "(end)", lb ? lb : "(end)");
  }
  if (differ) {
    printf("%zu lines differ from %s; if the change is meant:\n"
           "  KVJIT_PINS_WRITE=%s BUILD/tests/test_store_pins %s\n", differ, pins_path, pins_path, pins_path);
  }
  free(pinned);
  free(now.data);
  assert_int_equal(differ, 0);
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
    const char *line; /* the variant, as its manifest line */
    const char *keys[4];
    const char *bundle;
  } cases[] = {
      {"store_kv_cache arch=90 k_row_bytes=1024 v_row_bytes=1024 index=int64 pdl=auto split=0 vec=16",
       {"e43a11d9077ce2831f0361f38ea9edf5", "17b13684856ab2e752e0abe92749f52f", "0f969dc1f6419a5631fa42d9d8f94751",
        NULL},
       "3a450756af673e707d5275c1f92d6ca4"},
      {"store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=2048 index=int32 pdl=auto split=0 vec=16 dtype=bf16 "
       "cache_dtype=fp8_e4m3 scale=head num_heads=8",
       {"4863703cc5f027452794a3b2ded9f14c", "c65518508bd6abb78d3becfe0cc7732f", NULL, NULL},
       "32ffc02c777c5f31c88c906cfcd6813b"},
      {"store_kv_cache arch=80 k_row_bytes=576 v_row_bytes=0 index=int64 pdl=off split=0 vec=8",
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
    kvjit_variant v;
    assert_int_equal(kvjit_variant_parse(&v, cases[c].line), KVJIT_OK);
    unsigned compiled = 0, cached = 0;
    kvjit_status st = kvjit_variant_prewarm(ctx, &v, &compiled, &cached);
    if (st != KVJIT_OK) fail_msg("case %zu: %s", c, kvjit_last_error());
    key_set set = {.count = 0};
    assert_int_equal(kvjit_cache_list(ctx, 0, 0, collect_key, &set, NULL), KVJIT_OK);
    size_t want = 0, bad = 0;
    for (size_t k = 0; k < 4 && cases[c].keys[k] != NULL; k++, want++) {
      int at = find_key(&set, cases[c].keys[k]);
      if (at < 0 || strcmp(set.bundles[at], cases[c].bundle) != 0) bad++;
    }
    /* The aliases' keys are those the variant's plans compute (what a runtime miss looks up). */
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

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_store_pins tests/pins/store_plans.txt\n");
    return 2;
  }
  pins_path = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grid_pins),
      cmocka_unit_test(test_prewarm_writes_pinned_keys),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
