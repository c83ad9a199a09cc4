/*
 * store_kv_cache arguments without a GPU: every bad argument is refused with the right status and a
 * message naming it, before any driver is needed; batch 0 is a no-op; manifest lines round-trip and
 * bad lines are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"

/* Never dereferenced: every call below fails validation or has batch 0 (or finds no context). */
#define FAKE(n) ((void *)(uintptr_t)(0x7f0000000000ull + (n)*0x100000ull))

static kvjit_context *ctx;

static int setup(void **state) {
  (void)state;
  kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
  opt.disable_cache = 1;
  opt.log = 0;
  return kvjit_context_create(&ctx, &opt) == KVJIT_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  kvjit_context_destroy(ctx);
  return 0;
}

static kvjit_store_kv_args good_args(void) {
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = FAKE(1);
  a.v = FAKE(2);
  a.k_cache = FAKE(3);
  a.v_cache = FAKE(4);
  a.indices = FAKE(5);
  a.batch = 4;
  a.k_row_bytes = 256;
  a.num_slots = 64;
  return a;
}

typedef struct bad_case {
  const char *what;
  kvjit_status status;
  const char *needle; /* must appear in kvjit_last_error() */
} bad_case;

/* Check one bad argument set against both the store and the prepare call. */
static void expect_bad(const kvjit_store_kv_args *a, const bad_case *c) {
  kvjit_status st = kvjit_store_kv_cache(ctx, a);
  if (st != c->status || strstr(kvjit_last_error(), c->needle) == NULL) {
    fail_msg("%s: store returned %s \"%s\", expected %s naming \"%s\"", c->what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(c->status), c->needle);
  }
  st = kvjit_store_kv_cache_prepare(ctx, a);
  if (st != c->status || strstr(kvjit_last_error(), c->needle) == NULL) {
    fail_msg("%s: prepare returned %s \"%s\", expected %s naming \"%s\"", c->what, kvjit_status_name(st),
             kvjit_last_error(), kvjit_status_name(c->status), c->needle);
  }
}

#define BAD(field_change, needle_text)                                                           \
  do {                                                                                           \
    kvjit_store_kv_args a = good_args();                                                         \
    field_change;                                                                                \
    bad_case c = {#field_change, KVJIT_ERR_INVALID_ARGUMENT, needle_text};                        \
    expect_bad(&a, &c);                                                                          \
  } while (0)

static void test_null_objects(void **state) {
  (void)state;
  kvjit_store_kv_args a = good_args();
  assert_int_equal(kvjit_store_kv_cache(NULL, &a), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "ctx"));
  assert_int_equal(kvjit_store_kv_cache(ctx, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "args"));
  assert_int_equal(kvjit_store_kv_cache_prepare(NULL, &a), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_store_kv_cache_prepare(ctx, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  uint64_t n = 0;
  assert_int_equal(kvjit_store_kv_cache_oob_count(NULL, &n, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "ctx"));
  assert_int_equal(kvjit_store_kv_cache_oob_count(ctx, NULL, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "count"));
}

static void test_bad_arguments(void **state) {
  (void)state;
  BAD(a.version = 0, "args->version");
  BAD(a.version = 2, "got 2");
  BAD(a.batch = -1, "batch: must be >= 0, got -1");
  BAD(a.k_row_bytes = 0, "k_row_bytes");
  BAD(a.k_row_bytes = -256, "got -256");
  BAD(a.k_row_bytes = (int64_t)1 << 31, "k_row_bytes");
  BAD(a.v = NULL, "v, v_cache");
  BAD(a.v_cache = NULL, "v, v_cache");
  BAD(a.v_row_bytes = -1, "v_row_bytes");
  BAD(a.index_type = (kvjit_index_type)0, "index_type");
  BAD(a.index_type = (kvjit_index_type)3, "got 3");
  BAD(a.index_stride = -2, "index_stride");
  BAD(a.k_stride = 255, "k_stride");
  BAD(a.k_cache_stride = 100, "k_cache_stride");
  BAD(a.v_stride = 128, "v_stride");
  BAD(a.v_cache_stride = 1, "v_cache_stride");
  BAD((a.v_row_bytes = 512, a.v_stride = 256), "v_stride");
  BAD((a.v_row_bytes = 512, a.v_cache_stride = 300), "v_cache_stride");
  BAD(a.num_slots = 0, "num_slots");
  BAD(a.num_slots = -3, "num_slots");
  BAD(a.skip_slot = -2, "skip_slot");
  BAD(a.skip_slot = 64, "skip_slot");
  BAD(a.split = -1, "split");
  BAD(a.split = 3, "split: 3 does not divide k_row_bytes 256");
  BAD(a.split = (1 << 20) + 1, "split");
  BAD((a.k_row_bytes = 1024, a.v_row_bytes = 768, a.split = 512), "v_row_bytes 768");
  BAD(a.pdl = (kvjit_pdl_mode)7, "pdl");
  BAD(a.pdl = (kvjit_pdl_mode)-1, "pdl");
  BAD(a.k = NULL, "k: NULL");
  BAD(a.k_cache = NULL, "k_cache: NULL");
  BAD(a.indices = NULL, "indices: NULL");
  BAD(a.indices = (const char *)FAKE(5) + 4, "indices");
  BAD((a.index_type = KVJIT_INDEX_INT32, a.indices = (const char *)FAKE(5) + 2), "int32");
  /* 64-bit overflow of the offsets the kernel forms. */
  BAD((a.batch = (int64_t)1 << 40, a.k_stride = (int64_t)1 << 30), "batch");
  BAD((a.num_slots = (int64_t)1 << 40, a.k_cache_stride = (int64_t)1 << 30), "num_slots");
  BAD((a.batch = (int64_t)1 << 40, a.index_stride = (int64_t)1 << 30), "index_stride");
  /* K only ignores v_row_bytes and the V strides, but the pair rule still holds. */
  BAD((a.v = NULL, a.v_cache = NULL, a.k_cache_stride = 8), "k_cache_stride");
}

/* Argument errors come first, with or without a driver; batch 0 needs no driver at all. */
static void test_batch_zero_is_a_no_op(void **state) {
  (void)state;
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k_row_bytes = 256;
  a.num_slots = 1;
  a.batch = 0;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_OK);
  a.k = FAKE(1);
  a.k_cache = FAKE(2);
  a.v = FAKE(3);
  a.v_cache = FAKE(4);
  a.indices = FAKE(5);
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_OK);
  /* Still validated. */
  a.k_stride = 3;
  assert_int_equal(kvjit_store_kv_cache(ctx, &a), KVJIT_ERR_INVALID_ARGUMENT);
}

/* Valid arguments need a driver and a current context; this process has no context, so nothing
 * can launch, and the status says what is missing. */
static void test_valid_needs_context(void **state) {
  (void)state;
  kvjit_store_kv_args a = good_args();
  kvjit_status st = kvjit_store_kv_cache(ctx, &a);
  assert_true(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE);
  assert_true(kvjit_last_error()[0] != '\0');
  uint64_t n = 0;
  st = kvjit_store_kv_cache_oob_count(ctx, &n, 1);
  assert_true(st == KVJIT_ERR_NO_DRIVER || st == KVJIT_ERR_NO_DEVICE);
}

static void round_trip(const kvjit_store_kv_variant *v) {
  char line[256];
  kvjit_status st = kvjit_store_kv_variant_format(v, line, sizeof line);
  if (st != KVJIT_OK) fail_msg("format: %s", kvjit_last_error());
  kvjit_store_kv_variant back;
  memset(&back, 0xab, sizeof back);
  st = kvjit_store_kv_variant_parse(&back, line);
  if (st != KVJIT_OK) fail_msg("parse \"%s\": %s", line, kvjit_last_error());
  assert_int_equal(back.arch, v->arch);
  assert_int_equal(back.k_row_bytes, v->k_row_bytes);
  assert_int_equal(back.v_row_bytes, v->v_row_bytes);
  assert_int_equal(back.index_type, v->index_type);
  assert_int_equal(back.pdl, v->pdl);
  assert_int_equal(back.split, v->split);
  assert_int_equal(back.vector_bytes, v->vector_bytes ? v->vector_bytes : 16);
}

static void test_variant_round_trip(void **state) {
  (void)state;
  kvjit_store_kv_variant vs[] = {
      {90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16},
      {80, 196, 196, KVJIT_INDEX_INT32, KVJIT_PDL_OFF, 7, 4},
      {100, 576, 0, KVJIT_INDEX_INT64, KVJIT_PDL_ON, 2, 8},
      {0, 8192, 1024, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 4, 0},
      {121, 1, 1, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 1, 1},
  };
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) round_trip(&vs[i]);
  char line[256];
  assert_int_equal(kvjit_store_kv_variant_format(&vs[0], line, sizeof line), KVJIT_OK);
  assert_string_equal(line, "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16");
}

static void test_variant_parse_forms(void **state) {
  (void)state;
  kvjit_store_kv_variant v;
  assert_int_equal(kvjit_store_kv_variant_parse(
                       &v, "store_kv_cache\tvec=8 split=2 pdl=on index=int32 v_row_bytes=0 k_row_bytes=576 arch=90  "
                           "# a comment\r\n"),
                   KVJIT_OK);
  assert_int_equal(v.arch, 90);
  assert_int_equal(v.k_row_bytes, 576);
  assert_int_equal(v.v_row_bytes, 0);
  assert_int_equal(v.index_type, KVJIT_INDEX_INT32);
  assert_int_equal(v.pdl, KVJIT_PDL_ON);
  assert_int_equal(v.split, 2);
  assert_int_equal(v.vector_bytes, 8);
  assert_int_equal(kvjit_store_kv_variant_parse(&v, ""), KVJIT_ERR_NOT_FOUND);
  assert_int_equal(kvjit_store_kv_variant_parse(&v, "   # only a comment\n"), KVJIT_ERR_NOT_FOUND);
}

static void expect_parse_error(const char *line, kvjit_status status, const char *needle) {
  kvjit_store_kv_variant v;
  kvjit_status st = kvjit_store_kv_variant_parse(&v, line);
  if (st != status || strstr(kvjit_last_error(), needle) == NULL) {
    fail_msg("parse \"%s\": %s \"%s\", expected %s naming \"%s\"", line, kvjit_status_name(st), kvjit_last_error(),
             kvjit_status_name(status), needle);
  }
}

#define LINE_REST " index=int64 pdl=auto split=0 vec=16"

static void test_variant_parse_errors(void **state) {
  (void)state;
  const kvjit_status E = KVJIT_ERR_INVALID_ARGUMENT;
  expect_parse_error("store_kv arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "store_kv_cache");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256" LINE_REST, E, "missing v_row_bytes");
  expect_parse_error("store_kv_cache arch=90 arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "arch: given twice");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 heads=8" LINE_REST, E, "unknown key \"heads\"");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes v_row_bytes=256" LINE_REST, E, "key=value");
  expect_parse_error("store_kv_cache arch=-1 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "arch: bad value \"-1\"");
  expect_parse_error("store_kv_cache arch=sm90 k_row_bytes=256 v_row_bytes=256" LINE_REST, E, "arch");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=0 v_row_bytes=256" LINE_REST, E, "k_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=+256 v_row_bytes=256" LINE_REST, E, "k_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=-3" LINE_REST, E, "v_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=99999999999 v_row_bytes=256" LINE_REST, E, "k_row_bytes");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int16 pdl=auto split=0 vec=16", E,
                     "index: bad value \"int16\"");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=yes split=0 vec=16", E,
                     "pdl");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=3 vec=16", E,
                     "split: 3");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=3", E,
                     "vec");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=32", E,
                     "vec");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=", E,
                     "vec");
  expect_parse_error("store_kv_cache arch=80 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=on split=0 vec=16",
                     KVJIT_ERR_UNSUPPORTED, "pdl");
  expect_parse_error("store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256" LINE_REST "\nstore_kv_cache", E,
                     "more than one line");
  char longline[700];
  memset(longline, ' ', sizeof longline - 1);
  longline[sizeof longline - 1] = '\0';
  memcpy(longline, "store_kv_cache", 14);
  expect_parse_error(longline, E, "longer than");
  kvjit_store_kv_variant v;
  assert_int_equal(kvjit_store_kv_variant_parse(NULL, "x"), E);
  assert_int_equal(kvjit_store_kv_variant_parse(&v, NULL), E);
}

static void test_variant_format_errors(void **state) {
  (void)state;
  kvjit_store_kv_variant v = {90, 256, 256, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 16};
  char small[20];
  assert_int_equal(kvjit_store_kv_variant_format(&v, small, sizeof small), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "capacity"));
  assert_string_equal(small, "");
  char line[256];
  assert_int_equal(kvjit_store_kv_variant_format(NULL, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_store_kv_variant_format(&v, NULL, 0), KVJIT_ERR_INVALID_ARGUMENT);
  v.split = 3;
  assert_int_equal(kvjit_store_kv_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "split"));
  v.split = 0;
  v.vector_bytes = 6;
  assert_int_equal(kvjit_store_kv_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  v.vector_bytes = 16;
  v.arch = -5;
  assert_int_equal(kvjit_store_kv_variant_format(&v, line, sizeof line), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "arch"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_objects),          cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_batch_zero_is_a_no_op), cmocka_unit_test(test_valid_needs_context),
      cmocka_unit_test(test_variant_round_trip),    cmocka_unit_test(test_variant_parse_forms),
      cmocka_unit_test(test_variant_parse_errors),  cmocka_unit_test(test_variant_format_errors),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
