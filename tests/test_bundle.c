/*
 * Bundles and aliases with real NVRTC compiles (no GPU): a group of kernels compiled as one
 * program is found again one kernel at a time by the key a runtime miss computes, with the code
 * the kernel has when compiled alone; a missing, corrupt or mismatched bundle makes its aliases
 * misses (the kernel compiled alone, its own entry replacing the alias), in read-only dirs too;
 * verify reports orphans; the prewarm of many variants builds shares, each kernel once.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "alias.h"
#include "bundle.h"
#include "context.h"
#include "cubin_util.h"
#include "program.h"
#include "internal_util.h"
#include "kvjit.h"
#include "test_util.h"

static char tmpdir[256];
static int case_number;

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "bundle");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmpdir);
}

/* A fresh cache dir for one case. */
static void case_dir(char *dir, size_t cap, const char *name) {
  snprintf(dir, cap, "%s/%s-%d", tmpdir, name, case_number++);
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

static const char *const source =
    "template <int N> __global__ void k(int *x) { x[threadIdx.x] = N * (int)threadIdx.x + N / 3; }\n";
static const char *const names[] = {"k<1>", "k<2>", "k<3>", "k<4>", "k<5>", "k<6>", "k<7>"};

/* Kernels [first, first + count) of names as one description. */
static kvjit_program_desc desc_of(size_t first, size_t count, int arch) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "bundle_test.cu";
  d.source = source;
  d.kernels = names + first;
  d.num_kernels = count;
  d.arch = arch;
  return d;
}

static void group(kvjit_context *ctx, size_t first, size_t count, int arch, kvjit_origin *origins) {
  kvjit_program_desc d = desc_of(first, count, arch);
  kvjit_entry_label labels[8];
  kvjit_group_member members[8];
  char lines[8][64];
  for (size_t i = 0; i < count; i++) {
    snprintf(lines[i], sizeof lines[i], "test variant %zu", first + i);
    labels[i].op = "test";
    labels[i].variant = lines[i];
    members[i].label = &labels[i];
  }
  kvjit_status st = kvjit_program_compile_group(ctx, &d, members);
  if (st != KVJIT_OK) fail_msg("group: %s", kvjit_last_error());
  for (size_t i = 0; i < count; i++) origins[i] = members[i].origin;
}

static kvjit_stats stats_of(kvjit_context *ctx) {
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  return s;
}

typedef struct listing {
  char keys[16][33], bundles[16][33], paths[16][512];
  kvjit_status status[16];
  size_t count, aliases;
} listing;

static int list_one(const kvjit_cache_entry_info *e, void *user) {
  listing *l = user;
  if (l->count == 16) return 1;
  snprintf(l->keys[l->count], 33, "%s", e->key);
  snprintf(l->bundles[l->count], 33, "%s", e->bundle ? e->bundle : "");
  snprintf(l->paths[l->count], 512, "%s", e->path);
  l->status[l->count] = e->status;
  l->aliases += e->bundle != NULL;
  l->count++;
  return 0;
}

static listing list(kvjit_context *ctx, int verify, uint64_t *bad) {
  listing l;
  memset(&l, 0, sizeof l);
  assert_int_equal(kvjit_cache_list(ctx, 1, verify, list_one, &l, bad), KVJIT_OK);
  return l;
}

/* The one-kernel program of names[i], built (not loaded) in @p ctx. */
static kvjit_program *build_one(kvjit_context *ctx, size_t i, int arch, kvjit_origin *origin) {
  kvjit_program_desc d = desc_of(i, 1, arch);
  kvjit_program *p = NULL;
  kvjit_status st = kvjit_program_build(ctx, &p, origin, &d);
  if (st != KVJIT_OK) fail_msg("build %s: %s", names[i], kvjit_last_error());
  return p;
}

/* The kernel's code compiled alone, in a memory-only context. */
static void alone_binary(size_t i, int arch, uint8_t **out, size_t *len) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.disable_cache = 1;
  o.log = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  kvjit_origin origin;
  kvjit_program *p = build_one(ctx, i, arch, &origin);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  const void *data;
  assert_int_equal(kvjit_program_binary(p, &data, len), KVJIT_OK);
  *out = malloc(*len);
  memcpy(*out, data, *len);
  kvjit_context_destroy(ctx);
}

static void test_group_then_one_by_one(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "group");
  kvjit_context *a = ctx_at(dir, NULL);
  kvjit_origin origins[8];
  group(a, 0, 4, 90, origins);
  for (int i = 0; i < 4; i++) assert_int_equal(origins[i], KVJIT_FROM_COMPILE);
  kvjit_stats s = stats_of(a);
  assert_int_equal(s.compiles, 1); /* one program for the four */
  kvjit_context_destroy(a);

  /* A bundle and one alias per kernel. */
  kvjit_context *b = ctx_at(dir, NULL);
  listing l = list(b, 0, NULL);
  assert_int_equal(l.count, 5);
  assert_int_equal(l.aliases, 4);
  /* Each kernel alone, as a runtime miss asks for it: from disk, nothing compiled. */
  for (size_t i = 0; i < 4; i++) {
    kvjit_origin origin;
    kvjit_program *p = build_one(b, i, 90, &origin);
    assert_int_equal(origin, KVJIT_FROM_DISK);
    assert_int_equal(kvjit_program_num_kernels(p), 1);
    assert_string_equal(kvjit_program_kernel_name(p, 0), names[i]);
    char lowered[32];
    snprintf(lowered, sizeof lowered, "_Z1kILi%zuEEvPi", i + 1);
    assert_string_equal(kvjit_program_lowered_name(p, 0), lowered);
    /* Its key is its alias's; its binary (the bundle's) holds the code it has alone. */
    int found = 0;
    for (size_t e = 0; e < l.count; e++) found |= !strcmp(l.keys[e], kvjit_program_key(p)) && l.bundles[e][0];
    assert_true(found);
    const void *data;
    size_t len;
    assert_int_equal(kvjit_program_binary(p, &data, &len), KVJIT_OK);
    uint8_t *alone;
    size_t alone_len;
    alone_binary(i, 90, &alone, &alone_len);
    char why[256];
    if (cubin_text_differs(alone, alone_len, data, len, why, sizeof why)) fail_msg("%s: %s", names[i], why);
    free(alone);
    /* The compile-only call finds it too. */
    kvjit_program_desc d = desc_of(i, 1, 90);
    assert_int_equal(kvjit_program_compile(b, &origin, &d), KVJIT_OK);
    assert_int_equal(origin, KVJIT_FROM_DISK);
  }
  s = stats_of(b);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.bad_entries, 0);
  kvjit_context_destroy(b);

  /* Again: every kernel cached, nothing written. */
  kvjit_context *c = ctx_at(dir, NULL);
  group(c, 0, 4, 90, origins);
  for (int i = 0; i < 4; i++) assert_int_equal(origins[i], KVJIT_FROM_DISK);
  s = stats_of(c);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.disk_writes, 0);
  /* Verify: all good. */
  uint64_t bad = 7;
  l = list(c, 1, &bad);
  assert_int_equal(bad, 0);
  for (size_t e = 0; e < l.count; e++) assert_int_equal(l.status[e], KVJIT_OK);
  kvjit_context_destroy(c);
}

/* Kernels already cached stay as they are; the bundle holds the rest. */
static void test_group_of_what_is_missing(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "partial");
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_program_desc one = desc_of(4, 1, 90);
  kvjit_origin origin;
  assert_int_equal(kvjit_program_compile(ctx, &origin, &one), KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_origin origins[8];
  group(ctx, 4, 3, 90, origins);
  assert_int_equal(origins[0], KVJIT_FROM_DISK);
  assert_int_equal(origins[1], KVJIT_FROM_COMPILE);
  assert_int_equal(origins[2], KVJIT_FROM_COMPILE);
  listing l = list(ctx, 0, NULL);
  assert_int_equal(l.count, 4); /* its own entry, a bundle of two, two aliases */
  assert_int_equal(l.aliases, 2);
  /* Only one left to build: compiled alone, no bundle. */
  group(ctx, 3, 2, 90, origins);
  assert_int_equal(origins[0], KVJIT_FROM_COMPILE);
  assert_int_equal(origins[1], KVJIT_FROM_DISK);
  l = list(ctx, 0, NULL);
  assert_int_equal(l.count, 5);
  assert_int_equal(l.aliases, 2);
  kvjit_context_destroy(ctx);
}

static const char *bundle_path(const listing *l) {
  for (size_t e = 0; e < l->count; e++)
    if (l->bundles[e][0] == '\0') return l->paths[e];
  return NULL;
}

/* The bundle evicted: each alias is a miss that compiles its kernel alone, once, and then has an
 * entry of its own; verify reports the others as orphans, not as bad entries. */
static void test_orphans(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "orphan");
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_origin origins[8];
  group(ctx, 0, 3, 90, origins);
  listing l = list(ctx, 0, NULL);
  const char *bundle = bundle_path(&l);
  assert_non_null(bundle);
  assert_int_equal(unlink(bundle), 0);
  kvjit_context_destroy(ctx);

  ctx = ctx_at(dir, NULL);
  kvjit_origin origin;
  kvjit_program *p = build_one(ctx, 1, 90, &origin);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_int_equal(kvjit_program_num_kernels(p), 1);
  uint64_t bad = 7;
  l = list(ctx, 1, &bad);
  assert_int_equal(bad, 0);
  size_t orphans = 0, own = 0;
  for (size_t e = 0; e < l.count; e++) {
    if (l.bundles[e][0]) {
      assert_int_equal(l.status[e], KVJIT_ERR_NOT_FOUND);
      orphans++;
    } else {
      assert_int_equal(l.status[e], KVJIT_OK);
      assert_string_equal(l.keys[e], kvjit_program_key(p));
      own++;
    }
  }
  assert_int_equal(orphans, 2);
  assert_int_equal(own, 1);
  kvjit_context_destroy(ctx);
  /* A new context finds the kernel's own entry: no compile. */
  ctx = ctx_at(dir, NULL);
  build_one(ctx, 1, 90, &origin);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  /* A group over the orphans builds them again. */
  group(ctx, 0, 3, 90, origins);
  assert_int_equal(origins[0], KVJIT_FROM_COMPILE);
  assert_int_equal(origins[1], KVJIT_FROM_DISK);
  assert_int_equal(origins[2], KVJIT_FROM_COMPILE);
  l = list(ctx, 1, &bad);
  for (size_t e = 0; e < l.count; e++) assert_int_equal(l.status[e], KVJIT_OK);
  kvjit_context_destroy(ctx);
}

/* A bundle whose payload was damaged: counted, quarantined, and the alias a miss. */
static void test_corrupt_bundle(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "corrupt");
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_origin origins[8];
  group(ctx, 0, 2, 90, origins);
  listing l = list(ctx, 0, NULL);
  const char *bundle = bundle_path(&l);
  assert_non_null(bundle);
  FILE *f = fopen(bundle, "r+b");
  assert_non_null(f);
  fseek(f, -100, SEEK_END);
  int c = fgetc(f);
  fseek(f, -100, SEEK_END);
  fputc(c ^ 0x5a, f);
  fclose(f);
  kvjit_context_destroy(ctx);

  ctx = ctx_at(dir, NULL);
  kvjit_origin origin;
  build_one(ctx, 0, 90, &origin);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_stats s = stats_of(ctx);
  assert_int_equal(s.bad_entries, 1);
  assert_int_equal(s.compiles, 1);
  kvjit_context_destroy(ctx);
  char quarantine[600];
  snprintf(quarantine, sizeof quarantine, "%s/v2/quarantine", dir);
  DIR *d = opendir(quarantine);
  assert_non_null(d);
  int moved = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) moved += e->d_name[0] != '.';
  closedir(d);
  assert_int_equal(moved, 1);
}

/* An alias that names a bundle which does not hold its kernel (forged: another index) is a miss,
 * never the other kernel. */
static void test_alias_of_another_kernel(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "forged");
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_origin origins[8];
  group(ctx, 0, 3, 90, origins);
  listing l = list(ctx, 0, NULL);
  kvjit_key bundle_key;
  for (size_t e = 0; e < l.count; e++)
    if (l.bundles[e][0] == '\0') assert_int_equal(kvjit_key_parse_hex(&bundle_key, l.keys[e]), 0);
  /* Kernel k<1>'s one-kernel program, as the loader keys it. */
  kvjit_origin origin;
  kvjit_program *p = build_one(ctx, 0, 90, &origin);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  kvjit_key key;
  assert_int_equal(kvjit_key_parse_hex(&key, kvjit_program_key(p)), 0);
  kvjit_key content;
  kvjit_program_desc d = desc_of(0, 1, 90);
  kvjit_key_content(&content, &d);
  kvjit_key_target target = {90, KVJIT_PAYLOAD_CUBIN, 0, 0, 0};
  assert_int_equal(kvjit_nvrtc_version(&target.nvrtc_major, &target.nvrtc_minor), KVJIT_OK);
  /* The same kernel, a wrong index; then a right index into a bundle of another size. */
  static const kvjit_entry_alias forged[] = {{{0, 0}, 1, 3}, {{0, 0}, 0, 4}};
  for (size_t f = 0; f < 2; f++) {
    kvjit_entry_alias a = forged[f];
    a.bundle = bundle_key;
    static const kvjit_entry_digests unknown;
    kvjit_alias_write(ctx->cache, NULL, &target, &key, &content, &unknown, "bundle_test.cu", "k<1>",
                      "_Z1kILi1EEvPi", &a);
    kvjit_context *fresh = ctx_at(dir, NULL);
    p = build_one(fresh, 0, 90, &origin);
    assert_int_equal(origin, KVJIT_FROM_COMPILE);
    assert_string_equal(kvjit_program_lowered_name(p, 0), "_Z1kILi1EEvPi");
    kvjit_context_destroy(fresh);
  }
  kvjit_context_destroy(ctx);
}

/* An orphan in a read-only dir does not hide the kernel's own entry in the writable dir. */
static void test_orphan_in_read_only_dir(void **state) {
  (void)state;
  char ro[512], rw[512];
  case_dir(ro, sizeof ro, "ro");
  case_dir(rw, sizeof rw, "rw");
  kvjit_context *ctx = ctx_at(ro, NULL);
  kvjit_origin origins[8];
  group(ctx, 0, 2, 90, origins);
  listing l = list(ctx, 0, NULL);
  assert_int_equal(unlink(bundle_path(&l)), 0);
  kvjit_context_destroy(ctx);
  char read_path[600];
  snprintf(read_path, sizeof read_path, "%s", ro);
  ctx = ctx_at(rw, read_path);
  kvjit_origin origin;
  build_one(ctx, 0, 90, &origin);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  kvjit_context_destroy(ctx);
  ctx = ctx_at(rw, read_path);
  build_one(ctx, 0, 90, &origin);
  assert_int_equal(origin, KVJIT_FROM_DISK);
  kvjit_stats s = stats_of(ctx);
  assert_int_equal(s.compiles, 0);
  kvjit_context_destroy(ctx);
}

/* PTX has no bundles: each kernel alone, no aliases. */
static void test_ptx_target_builds_alone(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "ptx");
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_origin origins[8];
  group(ctx, 0, 3, 90 | KVJIT_TARGET_PTX, origins);
  for (int i = 0; i < 3; i++) assert_int_equal(origins[i], KVJIT_FROM_COMPILE);
  listing l = list(ctx, 0, NULL);
  assert_int_equal(l.count, 3);
  assert_int_equal(l.aliases, 0);
  kvjit_context_destroy(ctx);
}

/* A group that does not compile writes nothing (its caller then compiles kernel by kernel). */
static void test_failing_group_writes_nothing(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "failing");
  kvjit_context *ctx = ctx_at(dir, NULL);
  static const char *const bad[] = {"k<1>", "k<nope>"};
  kvjit_program_desc d = desc_of(0, 2, 90);
  d.kernels = bad;
  kvjit_entry_label label = {"test", "x"};
  kvjit_group_member members[2] = {{&label, KVJIT_FROM_DISK}, {&label, KVJIT_FROM_DISK}};
  assert_int_equal(kvjit_program_compile_group(ctx, &d, members), KVJIT_ERR_COMPILE);
  listing l = list(ctx, 0, NULL);
  assert_int_equal(l.count, 0);
  kvjit_context_destroy(ctx);
}

/* Variants of two ops (and one repeated) in two shares: each kernel built once, in bundles; the
 * shares' results add up; then every kernel is cached. */
static void test_variants_in_shares(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "shares");
  static const char *const lines[] = {
      "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16",
      "store_kv_cache arch=90 k_row_bytes=512 v_row_bytes=512 index=int32 pdl=auto split=0 vec=16",
      "transfer_kv arch=90 k_row_bytes=512 v_row_bytes=512 index=int64 src=device dst=host layers=one pdl=auto "
      "split=0 vec=16",
      "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16",
  };
  enum { N = sizeof lines / sizeof lines[0] };
  kvjit_variant v[N];
  for (int i = 0; i < N; i++) assert_int_equal(kvjit_variant_parse(&v[i], lines[i]), KVJIT_OK);
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_prewarm_result r[2][N];
  for (unsigned part = 0; part < 2; part++) {
    kvjit_status st = kvjit_variants_prewarm(ctx, v, N, part, 2, r[part]);
    if (st != KVJIT_OK) fail_msg("share %u: %s", part, kvjit_last_error());
  }
  unsigned compiled[N], cached[N], total = 0;
  for (int i = 0; i < N; i++) {
    compiled[i] = r[0][i].compiled + r[1][i].compiled;
    cached[i] = r[0][i].cached + r[1][i].cached;
    assert_int_equal(r[0][i].status, KVJIT_OK);
    total += compiled[i];
  }
  assert_true(compiled[0] >= 2 && compiled[1] >= 2 && compiled[2] >= 1);
  /* The repeated variant's kernels are the first's: built once. */
  assert_int_equal(compiled[3], 0);
  assert_int_equal(cached[3], compiled[0]);
  kvjit_stats s = stats_of(ctx);
  assert_true(s.compiles < total); /* bundles, not one program per kernel */
  /* Each variant alone now: all cached. */
  for (int i = 0; i < N; i++) {
    unsigned c = 9, h = 0;
    assert_int_equal(kvjit_variant_prewarm(ctx, &v[i], &c, &h), KVJIT_OK);
    assert_int_equal(c, 0);
    assert_int_equal(h, compiled[i] + cached[i]);
  }
  /* Bad arguments. */
  assert_int_equal(kvjit_variants_prewarm(ctx, v, N, 2, 2, r[0]), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "part: 2"));
  assert_int_equal(kvjit_variants_prewarm(ctx, v, N, 0, 0, r[0]), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_variants_prewarm(ctx, v, N, 0, 1, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_variants_prewarm(ctx, v, 0, 0, 1, NULL), KVJIT_OK);
  /* A variant that fails its checks is its own failure; the others build. */
  kvjit_variant broken[2] = {v[0], v[1]};
  broken[1].version = 99;
  kvjit_prewarm_result br[2];
  assert_int_equal(kvjit_variants_prewarm(ctx, broken, 2, 0, 1, br), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(br[0].status, KVJIT_OK);
  assert_int_equal(br[1].status, KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(br[1].error, "version"));
  kvjit_context_destroy(ctx);
}

/* Processes and threads at once on one dir: groups of overlapping kernels built by several
 * processes, and in each one threads asking for single kernels meanwhile. Every call succeeds,
 * every kernel is then found alone, verify finds nothing bad and no orphan. */
typedef struct racer {
  const char *dir;
  size_t kernel;
  int failures;
} racer;

static void *race_one(void *arg) {
  racer *r = arg;
  kvjit_context *ctx = ctx_at(r->dir, NULL);
  for (int round = 0; round < 3; round++) {
    kvjit_program_desc d = desc_of((r->kernel + (size_t)round) % 7, 1, 90);
    kvjit_program *p = NULL;
    kvjit_origin origin;
    if (kvjit_program_build(ctx, &p, &origin, &d) != KVJIT_OK || kvjit_program_num_kernels(p) != 1) r->failures++;
  }
  kvjit_context_destroy(ctx);
  return NULL;
}

static int race_child(const char *dir, int which) {
  kvjit_context *ctx = ctx_at(dir, NULL);
  racer racers[2] = {{dir, (size_t)which, 0}, {dir, (size_t)which + 3, 0}};
  pthread_t threads[2];
  for (int t = 0; t < 2; t++) pthread_create(&threads[t], NULL, race_one, &racers[t]);
  kvjit_program_desc d = desc_of((size_t)which, 7 - (size_t)which, 90);
  kvjit_entry_label label = {"test", "race"};
  kvjit_group_member members[8];
  for (int i = 0; i < 8; i++) members[i].label = &label;
  kvjit_status st = kvjit_program_compile_group(ctx, &d, members);
  for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
  kvjit_context_destroy(ctx);
  return st != KVJIT_OK || racers[0].failures || racers[1].failures;
}

static void test_processes_and_threads_at_once(void **state) {
  (void)state;
  char dir[512];
  case_dir(dir, sizeof dir, "race");
  kvjit_context *ctx = ctx_at(dir, NULL); /* makes the dir before the children race for it */
  kvjit_context_destroy(ctx);
  enum { CHILDREN = 3 };
  pid_t pids[CHILDREN];
  fflush(stdout);
  for (int c = 0; c < CHILDREN; c++) {
    pids[c] = fork();
    assert_true(pids[c] >= 0);
    if (pids[c] == 0) _exit(race_child(dir, c));
  }
  for (int c = 0; c < CHILDREN; c++) {
    int status = 0;
    assert_int_equal(waitpid(pids[c], &status, 0), pids[c]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  ctx = ctx_at(dir, NULL);
  for (size_t i = 0; i < 7; i++) {
    kvjit_origin origin;
    build_one(ctx, i, 90, &origin);
    assert_int_equal(origin, KVJIT_FROM_DISK);
  }
  uint64_t bad = 7;
  listing l = list(ctx, 1, &bad);
  assert_int_equal(bad, 0);
  for (size_t e = 0; e < l.count; e++) assert_int_equal(l.status[e], KVJIT_OK);
  kvjit_stats s = stats_of(ctx);
  assert_int_equal(s.compiles, 0);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_group_then_one_by_one),
      cmocka_unit_test(test_group_of_what_is_missing),
      cmocka_unit_test(test_orphans),
      cmocka_unit_test(test_corrupt_bundle),
      cmocka_unit_test(test_alias_of_another_kernel),
      cmocka_unit_test(test_orphan_in_read_only_dir),
      cmocka_unit_test(test_ptx_target_builds_alone),
      cmocka_unit_test(test_failing_group_writes_nothing),
      cmocka_unit_test(test_variants_in_shares),
      cmocka_unit_test(test_processes_and_threads_at_once),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
