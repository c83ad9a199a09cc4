/*
 * Misses that explain themselves (src/miss.h), without NVRTC: entries forged with chosen targets,
 * NVRTC versions and digests (PTX payloads, which need no compiler to be well-formed) are published
 * into a temp cache dir, which indexes them; a query then names the input in which the nearest
 * entry differs. Also the context's log of misses (each key once, counted by cause).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "cache.h"
#include "cache_index.h"
#include "cache_store.h"
#include "entry.h"
#include "entry_util.h"
#include "miss.h"
#include "test_util.h"

static char tmpdir[256];
static const char *const kernel[] = {"k<1>"};
static const char *const lowered[] = {"_Z1kILi1EEvv"};

/* What this "process" asks for: NVRTC 13.2, sm_90 (PTX), digests {1,1}..{4,4}. */
static kvjit_miss_query wanted(void) {
  kvjit_miss_query q;
  memset(&q, 0, sizeof q);
  q.target = (kvjit_key_target){90, KVJIT_PAYLOAD_PTX, 0, 13, 2};
  q.digests = (kvjit_entry_digests){{1, 1}, {2, 2}, {3, 3}, {4, 4}};
  q.content = (kvjit_key){0xc0, 0x01};
  q.program = "miss_test.cu";
  q.num_kernels = 1;
  q.kernels = kernel;
  q.what = "store_kv_cache arch=90 k_row_bytes=2048";
  q.nvrtc_path = "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libnvrtc.so.13";
  kvjit_key_derive(&q.key, &q.target, 1, kernel, &q.content);
  return q;
}

static kvjit_cache *open_cache(const char *dir) {
  kvjit_cache_config c;
  memset(&c, 0, sizeof c);
  c.write_dir = dir;
  c.read_dirs = "";
  c.max_bytes = 1u << 30;
  c.lock_timeout_ms = 1000;
  kvjit_cache *cache = NULL;
  assert_int_equal(kvjit_cache_open(&cache, &c), KVJIT_OK);
  assert_true(kvjit_cache_writable(cache));
  return cache;
}

/* Publish an entry of the query's program and kernel built from other inputs; with @p old, as a
 * kvjit before digests wrote it (format 2). */
static void publish_as(kvjit_cache *cache, const kvjit_key_target *target, const kvjit_key *content,
                       const kvjit_entry_digests *digests, int64_t created, int old) {
  char ptx[128];
  snprintf(ptx, sizeof ptx, ".version 8.0\n.target sm_%d\n.address_size 64\n.visible .entry %s()\n{\nret;\n}\n",
           target->arch, lowered[0]);
  kvjit_entry_meta m = {.content = *content, .target = *target, .created = created, .program = "miss_test.cu",
                        .num_kernels = 1, .kernels = (const char *const *)kernel, .lowered = (const char *const *)lowered,
                        .digests = digests};
  kvjit_key_derive(&m.key, target, 1, kernel, content);
  uint8_t *buf = NULL;
  size_t len = 0;
  assert_int_equal(kvjit_entry_encode(&buf, &len, &m, ptx, strlen(ptx)), KVJIT_OK);
  if (old) {
    size_t v2_len;
    uint8_t *v2 = entry_as_version_2(buf, len, &v2_len);
    free(buf);
    buf = v2;
    len = v2_len;
  }
  assert_int_equal(kvjit_cache_write(cache, &m.key, buf, len), KVJIT_OK);
  free(buf);
}

static void publish(kvjit_cache *cache, const kvjit_key_target *target, const kvjit_key *content,
                    const kvjit_entry_digests *digests, int64_t created) {
  publish_as(cache, target, content, digests, created, 0);
}

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "miss");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmpdir);
}

static void expect(kvjit_cache *cache, kvjit_miss_cause cause, const char *words) {
  kvjit_miss_query q = wanted();
  kvjit_miss_info info;
  kvjit_miss_explain(cache, &q, &info);
  if (info.cause != cause || strstr(info.message, words) == NULL || strstr(info.message, q.what) == NULL) {
    fail_msg("cause %s, expected %s; \"%s\" lacks \"%s\"", kvjit_miss_cause_name(info.cause),
             kvjit_miss_cause_name(cause), info.message, words);
  }
}

/* Nothing of this program and kernel: cold. Then each input alone differs in turn, the nearest
 * entry (fewest differences, then newest) decides. */
static void test_each_input_named(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/each", tmpdir);
  kvjit_cache *cache = open_cache(dir);
  expect(cache, KVJIT_MISS_COLD, "never cached");
  const kvjit_miss_query q = wanted();
  kvjit_entry_digests d = q.digests;
  /* Everything differs: NVRTC and target and options. The nearest so far, NVRTC leads. */
  kvjit_key_target t = {100, KVJIT_PAYLOAD_PTX, 0, 13, 0};
  kvjit_key c = {0xc0, 0x02};
  d.options = (kvjit_key){9, 9};
  publish(cache, &t, &c, &d, 100);
  expect(cache, KVJIT_MISS_NVRTC, "also differs: target options");
  /* Only the NVRTC differs: the case, and the fix named. */
  t = q.target;
  t.nvrtc_minor = 0;
  publish(cache, &t, &q.content, &q.digests, 200);
  expect(cache, KVJIT_MISS_NVRTC, "cached for NVRTC 13.0, this process uses 13.2 (/venv/lib/python3.11/site-packages/"
                                  "nvidia/cu13/lib/libnvrtc.so.13): set KVJIT_NVRTC to an NVRTC 13.0");
  kvjit_cache_close(cache);

  static const struct {
    const char *name;
    kvjit_miss_cause cause;
    const char *words;
  } alone[] = {{"target", KVJIT_MISS_TARGET, "cached for compute_100, this lookup is for compute_90: prewarm --arch compute_90"},
               {"toolkit", KVJIT_MISS_TOOLKIT, "other toolkit headers"},
               {"options", KVJIT_MISS_OPTIONS, "other compile options"},
               {"source", KVJIT_MISS_SOURCE, "other source or header contents"}};
  for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++) {
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, alone[i].name);
    cache = open_cache(dir);
    t = q.target;
    d = q.digests;
    c = q.content;
    c.low ^= 0x100;
    if (alone[i].cause == KVJIT_MISS_TARGET) {
      t.arch = 100;
      c = q.content;
    }
    if (alone[i].cause == KVJIT_MISS_TOOLKIT) d.toolkit.low ^= 1;
    if (alone[i].cause == KVJIT_MISS_OPTIONS) d.options.low ^= 1;
    if (alone[i].cause == KVJIT_MISS_SOURCE) d.sources.low ^= 1;
    publish(cache, &t, &c, &d, 100);
    expect(cache, alone[i].cause, alone[i].words);
    kvjit_cache_close(cache);
  }
}

/* An entry from before digests differs in "options, source or toolkit" (which one it cannot say);
 * an entry under the very key that missed is there but unusable. */
static void test_old_entry_and_unusable(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/old", tmpdir);
  kvjit_cache *cache = open_cache(dir);
  const kvjit_miss_query q = wanted();
  kvjit_key c = q.content;
  c.high ^= 1;
  publish_as(cache, &q.target, &c, &q.digests, 100, 1);
  expect(cache, KVJIT_MISS_OTHER, "other options, source or toolkit headers (an entry from before kvjit recorded which)");
  kvjit_cache_close(cache);
  snprintf(dir, sizeof dir, "%s/same", tmpdir);
  cache = open_cache(dir);
  publish(cache, &q.target, &q.content, &q.digests, 100);
  expect(cache, KVJIT_MISS_OTHER, "cannot be used");
  kvjit_cache_close(cache);
}

/* The shard of the index that holds the query's program and kernel (cache/FORMAT.md). */
static void shard_of(const char *dir, char *out, size_t cap) {
  const kvjit_miss_query q = wanted();
  kvjit_key id;
  kvjit_cache_index_id_of(q.program, 1, kernel, &id);
  snprintf(out, cap, "%s/v2/index/%02x", dir, (unsigned)(id.high >> 56));
}

enum { INDEX_LINE = 66, INDEX_MAX = 66 * 512 };

/* A miss reads at most KVJIT_MISS_CANDIDATES headers however many entries the program has (many
 * rebuilds from other sources, then the NVRTC-only one, found while among the newest); a shard
 * stays bounded; a torn line is skipped, then started over. */
static void test_index_bounded(void **state) {
  (void)state;
  char dir[300], index[400];
  snprintf(dir, sizeof dir, "%s/many", tmpdir);
  kvjit_cache *cache = open_cache(dir);
  const kvjit_miss_query q = wanted();
  for (int i = 0; i < 40; i++) {
    kvjit_key c = {0xbad, (uint64_t)i};
    kvjit_entry_digests d = q.digests;
    d.sources.low = 1000 + (uint64_t)i;
    publish(cache, &q.target, &c, &d, i);
  }
  kvjit_key_target t = q.target;
  t.nvrtc_minor = 0;
  publish(cache, &t, &q.content, &q.digests, 1000);
  expect(cache, KVJIT_MISS_NVRTC, "cached for NVRTC 13.0");
  shard_of(dir, index, sizeof index);
  struct stat st;
  assert_int_equal(stat(index, &st), 0);
  assert_int_equal(st.st_size, 41 * INDEX_LINE);
  /* Other kernels' lines fill the shard past its bound: the next publication keeps the newest
   * half, its own line last. */
  FILE *f = fopen(index, "a");
  for (int i = 0; i < 600; i++) fprintf(f, "%032x %032x\n", i, i);
  fclose(f);
  publish(cache, &t, &(kvjit_key){0xc0, 0x04}, &q.digests, 1500);
  assert_int_equal(stat(index, &st), 0);
  assert_int_equal(st.st_size, INDEX_MAX / 2 + INDEX_LINE);
  expect(cache, KVJIT_MISS_NVRTC, "cached for NVRTC 13.0");
  /* A torn line (a crash mid-append) spoils nothing: readers skip it, the next append starts the
   * shard over. */
  f = fopen(index, "a");
  fputs("0123", f);
  fclose(f);
  expect(cache, KVJIT_MISS_NVRTC, "cached for NVRTC 13.0");
  publish(cache, &t, &(kvjit_key){0xc0, 0x03}, &q.digests, 2000);
  assert_int_equal(stat(index, &st), 0);
  assert_int_equal(st.st_size, INDEX_LINE);
  kvjit_cache_close(cache);
}

/* A clear removes the indexes with the entries. */
static void test_clear_removes_indexes(void **state) {
  (void)state;
  char dir[300], index[400];
  snprintf(dir, sizeof dir, "%s/clear", tmpdir);
  kvjit_cache *cache = open_cache(dir);
  const kvjit_miss_query q = wanted();
  kvjit_key_target t = q.target;
  t.nvrtc_minor = 0;
  publish(cache, &t, &q.content, &q.digests, 1);
  shard_of(dir, index, sizeof index);
  struct stat st;
  assert_int_equal(stat(index, &st), 0);
  uint64_t removed = 0;
  assert_int_equal(kvjit_cache_remove_all(cache, &removed), KVJIT_OK);
  assert_int_equal(removed, 1);
  assert_int_equal(stat(index, &st), -1);
  expect(cache, KVJIT_MISS_COLD, "never cached");
  kvjit_cache_close(cache);
}

/* Measured: the cost of one explanation that reads the most headers it may (printed, not asserted). */
static void test_cost(void **state) {
  (void)state;
  char dir[300];
  snprintf(dir, sizeof dir, "%s/cost", tmpdir);
  kvjit_cache *cache = open_cache(dir);
  const kvjit_miss_query q = wanted();
  enum { ENTRIES = 64 };
  for (int i = 0; i < ENTRIES; i++) {
    kvjit_key c = {0xc057, (uint64_t)i};
    kvjit_entry_digests d = q.digests;
    d.sources.low = 5000 + (uint64_t)i;
    publish(cache, &q.target, &c, &d, i);
  }
  struct timespec a, b;
  enum { ROUNDS = 200 };
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < ROUNDS; i++) {
    kvjit_miss_info info;
    kvjit_miss_explain(cache, &q, &info);
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  double us = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / ROUNDS;
  printf("one miss explanation (index of %d keys, %d headers read): %.1f us\n", ENTRIES, KVJIT_MISS_CANDIDATES, us);
  kvjit_cache_close(cache);
}

/* The context's log: each key once, counted by cause, the first KVJIT_MISSES_KEPT kept. */
static void test_log(void **state) {
  (void)state;
  kvjit_miss_log *log;
  assert_int_equal(kvjit_miss_log_create(&log), KVJIT_OK);
  kvjit_miss_info info = {KVJIT_MISS_NVRTC, "00000000000000000000000000000001", "a: b"};
  assert_true(kvjit_miss_log_add(log, &info));
  assert_false(kvjit_miss_log_add(log, &info));
  for (int i = 0; i < KVJIT_MISSES_KEPT + 10; i++) {
    snprintf(info.key, sizeof info.key, "%032x", i + 2);
    info.cause = KVJIT_MISS_COLD;
    assert_true(kvjit_miss_log_add(log, &info));
  }
  uint64_t counts[KVJIT_MISS_CAUSES];
  kvjit_miss_log_counts(log, counts);
  assert_int_equal(counts[KVJIT_MISS_NVRTC], 1);
  assert_int_equal(counts[KVJIT_MISS_COLD], KVJIT_MISSES_KEPT + 10);
  size_t n = 0;
  kvjit_miss_info first[2];
  assert_int_equal(kvjit_miss_log_copy(log, first, 2, &n), KVJIT_OK);
  assert_int_equal(n, KVJIT_MISSES_KEPT);
  assert_string_equal(first[0].message, "a: b");
  assert_int_equal(kvjit_miss_log_copy(log, NULL, 1, &n), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_miss_log_destroy(log);
  assert_string_equal(kvjit_miss_cause_name(KVJIT_MISS_TOOLKIT), "toolkit");
  assert_null(kvjit_miss_cause_name((kvjit_miss_cause)KVJIT_MISS_CAUSES));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_input_named),
      cmocka_unit_test(test_old_entry_and_unusable),
      cmocka_unit_test(test_index_bounded),
      cmocka_unit_test(test_clear_removes_indexes),
      cmocka_unit_test(test_cost),
      cmocka_unit_test(test_log),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
