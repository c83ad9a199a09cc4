/*
 * Cache export / import (packs) with real NVRTC compiles (no GPU): a round trip into an empty dir
 * hits with no compile; a damaged or truncated pack imports nothing; an entry that fails its own
 * checks inside a well-checksummed pack is counted and skipped; read-only layers export on request.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvjit.h"
#include "kvjit_tools.h"
#include "test_util.h"
#include "xxh.h"

static char tmp[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmp, sizeof tmp, "pack");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmp);
}

static kvjit_context *ctx_at(const char *dir, const char *read_path) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = read_path ? read_path : "";
  o.log = 0;
  o.disable_cache = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static kvjit_program_desc desc_n(int n, char *buf, size_t cap) {
  snprintf(buf, cap, "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] = %d; }\n", n);
  static const char *names[] = {"k"};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "pack_test.cu";
  d.source = buf;
  d.kernels = names;
  d.num_kernels = 1;
  d.arch = 90;
  return d;
}

/* Compile programs 0..n-1 into @p dir. */
static void fill(const char *dir, int n) {
  kvjit_context *ctx = ctx_at(dir, NULL);
  for (int i = 0; i < n; i++) {
    char src[256];
    kvjit_program_desc d = desc_n(i, src, sizeof src);
    kvjit_origin origin;
    assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
  }
  kvjit_context_destroy(ctx);
}

/* How many of programs 0..n-1 a context on @p dir finds without compiling. */
static int hits(const char *dir, const char *read_path, int n) {
  kvjit_context *ctx = ctx_at(dir, read_path);
  int found = 0;
  for (int i = 0; i < n; i++) {
    char src[256];
    kvjit_program_desc d = desc_n(i, src, sizeof src);
    kvjit_origin origin;
    assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
    found += origin == KVJIT_FROM_DISK;
  }
  kvjit_context_destroy(ctx);
  return found;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void test_round_trip(void **state) {
  (void)state;
  char a[300], b[300], pack[300];
  snprintf(a, sizeof a, "%s/a", tmp);
  snprintf(b, sizeof b, "%s/b", tmp);
  snprintf(pack, sizeof pack, "%s/cache.kvjitpak", tmp);
  fill(a, 3);
  kvjit_context *ctx = ctx_at(a, NULL);
  uint64_t n = 0;
  assert_int_equal(kvjit_cache_export(ctx, pack, 0, &n), KVJIT_OK);
  assert_int_equal(n, 3);
  kvjit_context_destroy(ctx);
  ctx = ctx_at(b, NULL);
  uint64_t imported = 0, present = 0, bad = 0;
  assert_int_equal(kvjit_cache_import(ctx, pack, &imported, &present, &bad), KVJIT_OK);
  assert_int_equal(imported, 3);
  assert_int_equal(present + bad, 0);
  /* Twice: nothing new. */
  assert_int_equal(kvjit_cache_import(ctx, pack, &imported, &present, &bad), KVJIT_OK);
  assert_int_equal(imported, 0);
  assert_int_equal(present, 3);
  kvjit_context_destroy(ctx);
  assert_int_equal(hits(b, NULL, 3), 3);
}

static void test_damaged_packs_import_nothing(void **state) {
  (void)state;
  char a[300], pack[300], bad_pack[300];
  snprintf(a, sizeof a, "%s/src", tmp);
  snprintf(pack, sizeof pack, "%s/p.kvjitpak", tmp);
  snprintf(bad_pack, sizeof bad_pack, "%s/bad.kvjitpak", tmp);
  fill(a, 2);
  kvjit_context *ctx = ctx_at(a, NULL);
  assert_int_equal(kvjit_cache_export(ctx, pack, 0, NULL), KVJIT_OK);
  kvjit_context_destroy(ctx);
  long size = file_size(pack);
  assert_true(size > 100);
  FILE *f = fopen(pack, "rb");
  uint8_t *bytes = malloc((size_t)size);
  assert_int_equal(fread(bytes, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  /* Every flipped byte position class: header, a length, an entry body, the checksum; and truncations. */
  long flips[] = {0, 9, 12, 16, 20, size / 2, size - 9, size - 1};
  for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
    bytes[flips[i]] ^= 0x21;
    f = fopen(bad_pack, "wb");
    fwrite(bytes, 1, (size_t)size, f);
    fclose(f);
    bytes[flips[i]] ^= 0x21;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/flip%zu", tmp, i);
    ctx = ctx_at(dir, NULL);
    uint64_t imported = 9;
    kvjit_status st = kvjit_cache_import(ctx, bad_pack, &imported, NULL, NULL);
    assert_int_equal(st, KVJIT_ERR_CORRUPT);
    assert_int_equal(imported, 0);
    kvjit_context_destroy(ctx);
    assert_int_equal(hits(dir, NULL, 2), 0);
  }
  long cuts[] = {0, 8, 15, 16, 40, size - 8, size - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    f = fopen(bad_pack, "wb");
    fwrite(bytes, 1, (size_t)cuts[i], f);
    fclose(f);
    ctx = ctx_at(a, NULL);
    assert_int_equal(kvjit_cache_import(ctx, bad_pack, NULL, NULL, NULL), KVJIT_ERR_CORRUPT);
    kvjit_context_destroy(ctx);
  }
  /* An entry that lies (a payload byte flipped) inside a pack whose checksum was made good
   * again: the pack passes, the entry does not. */
  bytes[size - 9] ^= 0x21; /* last byte of the last entry's payload */
  XXH64_hash_t sum = XXH3_64bits(bytes, (size_t)size - 8);
  for (int k = 0; k < 8; k++) bytes[size - 8 + k] = (uint8_t)(sum >> (8 * k));
  f = fopen(bad_pack, "wb");
  fwrite(bytes, 1, (size_t)size, f);
  fclose(f);
  char dir[300];
  snprintf(dir, sizeof dir, "%s/lying", tmp);
  ctx = ctx_at(dir, NULL);
  uint64_t imported = 0, present = 0, bad = 0;
  assert_int_equal(kvjit_cache_import(ctx, bad_pack, &imported, &present, &bad), KVJIT_OK);
  assert_int_equal(imported, 1);
  assert_int_equal(bad, 1);
  kvjit_context_destroy(ctx);
  assert_int_equal(hits(dir, NULL, 2), 1);
  free(bytes);
  /* Not a pack at all, a dir, a FIFO: refused promptly. */
  ctx = ctx_at(a, NULL);
  assert_int_equal(kvjit_cache_import(ctx, a, NULL, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", tmp);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(kvjit_cache_import(ctx, fifo, NULL, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_cache_import(ctx, "", NULL, NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_context_destroy(ctx);
}

static void test_read_only_layers_on_request(void **state) {
  (void)state;
  char layer[300], empty[300], pack[300];
  snprintf(layer, sizeof layer, "%s/layer", tmp);
  snprintf(empty, sizeof empty, "%s/empty", tmp);
  snprintf(pack, sizeof pack, "%s/layers.kvjitpak", tmp);
  fill(layer, 2);
  kvjit_context *ctx = ctx_at(empty, layer);
  uint64_t n = 9;
  assert_int_equal(kvjit_cache_export(ctx, pack, 0, &n), KVJIT_OK);
  assert_int_equal(n, 0);
  assert_int_equal(kvjit_cache_export(ctx, pack, 1, &n), KVJIT_OK);
  assert_int_equal(n, 2);
  /* An unwritable target leaves no temp file behind and says so. */
  char nowhere[300];
  snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/p.kvjitpak", tmp);
  assert_int_equal(kvjit_cache_export(ctx, nowhere, 1, &n), KVJIT_ERR_IO);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_packs_import_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_only_layers_on_request, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
