/*
 * gpu suite, issue 15: a disk entry that passes every check kvjit can make without a driver but
 * that the driver cannot use is moved aside (or, in a read-only layer, remembered), counted,
 * and replaced by a rebuild once; the kernel then launches and writes exactly what it should.
 * The entry is forged the way a broken toolchain or a hostile layer could make one: the payload
 * is a real cubin of another arch whose ELF ABI version byte was changed (so the arch in e_flags
 * is not checked), with both checksums made good. Exit 77 without a driver or a device. One
 * summary line at the end.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "entry.h"
#include "gpu_util.h"
#include "kvjit.h"
#include "test_util.h"

static int cases, failures;

#define CHECK(cond, ...)                                                                         \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                                 \
      fprintf(stderr, __VA_ARGS__);                                                              \
      fputc('\n', stderr);                                                                       \
      failures++;                                                                                \
      return;                                                                                    \
    }                                                                                            \
  } while (0)

typedef struct program {
  char source[200];
  const char *names[1];
  kvjit_program_desc desc;
} program;

static void program_init(program *p, int value, int arch) {
  snprintf(p->source, sizeof p->source, "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] = %d; }\n", value);
  p->names[0] = "k";
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "gpu_cache.cu";
  d.source = p->source;
  d.kernels = p->names;
  d.num_kernels = 1;
  d.arch = arch;
  p->desc = d;
}

static kvjit_context *context_on(const char *dir, const char *layers) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = layers ? layers : "";
  o.disable_cache = 0;
  o.log = 0;
  kvjit_context *ctx = NULL;
  return kvjit_context_create(&ctx, &o) == KVJIT_OK ? ctx : NULL;
}

/* The only entry file under dir/v2 (NUL when there is not exactly one). */
static void only_entry(const char *dir, char *out, size_t cap) {
  char v2[600];
  snprintf(v2, sizeof v2, "%s/v2", dir);
  out[0] = '\0';
  DIR *d = opendir(v2);
  int found = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.' && strstr(e->d_name, ".kvjit")) {
      snprintf(out, cap, "%s/%s", v2, e->d_name);
      found++;
    }
  }
  if (d) closedir(d);
  if (found != 1) out[0] = '\0';
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* Replace the payload of the entry at @p path by @p payload (ELF ABI version byte set to 7), both
 * checksums made good. 0 on success. */
static int forge(const char *path, const uint8_t *payload, size_t payload_len) {
  size_t len = 0;
  uint8_t *buf = slurp(path, &len);
  kvjit_entry_view v;
  if (!buf || kvjit_entry_parse(&v, buf, len, NULL, 1) != KVJIT_OK || v.num_kernels != 1) return 1;
  char program_name[256], name[128], lowered[128];
  const char *n, *l;
  size_t nl, ll;
  kvjit_entry_kernel(&v, 0, &n, &nl, &l, &ll);
  snprintf(program_name, sizeof program_name, "%.*s", (int)v.program_len, v.program);
  snprintf(name, sizeof name, "%.*s", (int)nl, n);
  snprintf(lowered, sizeof lowered, "%.*s", (int)ll, l);
  const char *names[1] = {name}, *lows[1] = {lowered};
  kvjit_entry_meta m = {.key = v.key, .content = v.content, .target = v.target, .created = v.created,
                        .program = program_name, .op = "", .variant = "", .compiler = "forged",
                        .num_kernels = 1, .kernels = names, .lowered = lows};
  uint8_t *elf = malloc(payload_len);
  memcpy(elf, payload, payload_len);
  elf[8] = 7; /* EI_ABIVERSION: an ABI whose e_flags layout kvjit does not check */
  uint8_t *enc = NULL;
  size_t enc_len = 0;
  int rc = kvjit_entry_encode(&enc, &enc_len, &m, elf, payload_len) != KVJIT_OK;
  free(elf);
  free(buf);
  if (rc) return 1;
  FILE *f = fopen(path, "wb");
  rc = !f || fwrite(enc, 1, enc_len, f) != enc_len;
  if (f) fclose(f);
  free(enc);
  return rc;
}

/* Launch kernel k of @p prog on 32 threads over 64 poisoned ints: the first 32 must be @p value,
 * the rest untouched. */
static int launch_and_check(kvjit_program *prog, int value) {
  kvjit_kernel *k = NULL;
  if (kvjit_program_kernel(prog, &k, "k", 0) != KVJIT_OK) return 1;
  int host[64];
  memset(host, 0xab, sizeof host);
  CUdeviceptr x = gpu_alloc(sizeof host);
  gpu_upload(x, host, sizeof host);
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.block[0] = 32;
  void *args[] = {&x};
  kvjit_status st = kvjit_launch(k, &cfg, args);
  gpu_sync();
  gpu_download(host, x, sizeof host);
  gpu_free(x);
  if (st != KVJIT_OK) return 2;
  for (int i = 0; i < 64; i++) {
    int want;
    memset(&want, 0xab, sizeof want);
    if (i < 32) want = value;
    if (host[i] != want) return 3;
  }
  return 0;
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

static char root[256];
static uint8_t *other_cubin;
static size_t other_len;
static int other_arch;

/* A cubin of the same kernel for an arch of another major version than the device's. */
static int make_other_cubin(int sm) {
  int archs[64];
  size_t n = 0;
  if (kvjit_nvrtc_archs(archs, 64, &n) != KVJIT_OK) return 1;
  int other = 0;
  for (size_t i = 0; i < n && i < 64 && other == 0; i++) {
    if (archs[i] / 10 != sm / 10) other = archs[i];
  }
  if (other == 0) return 1;
  other_arch = other;
  char dir[512], entry[700];
  snprintf(dir, sizeof dir, "%s/other", root);
  kvjit_context *ctx = context_on(dir, NULL);
  program p;
  program_init(&p, 7, other);
  if (!ctx || kvjit_program_compile(ctx, NULL, &p.desc) != KVJIT_OK) return 1;
  kvjit_context_destroy(ctx);
  only_entry(dir, entry, sizeof entry);
  size_t len = 0;
  uint8_t *buf = slurp(entry, &len);
  kvjit_entry_view v;
  if (!buf || kvjit_entry_parse(&v, buf, len, NULL, 1) != KVJIT_OK) return 1;
  other_len = (size_t)v.payload_len;
  other_cubin = malloc(other_len);
  memcpy(other_cubin, v.payload, other_len);
  free(buf);
  printf("gpu_cache: device sm_%d, forged payload: an sm_%d cubin (%zu bytes)\n", sm, other, other_len);
  return 0;
}

static void case_writable_dir(void) {
  cases++;
  char dir[512], entry[700], q[700];
  snprintf(dir, sizeof dir, "%s/writable", root);
  kvjit_context *ctx = context_on(dir, NULL);
  program p;
  program_init(&p, 7, 0);
  CHECK(ctx && kvjit_program_compile(ctx, NULL, &p.desc) == KVJIT_OK, "%s", kvjit_last_error());
  kvjit_context_destroy(ctx);
  only_entry(dir, entry, sizeof entry);
  CHECK(entry[0] && forge(entry, other_cubin, other_len) == 0, "forging %s", entry);
  uint64_t bad = 9;
  ctx = context_on(dir, NULL);
  CHECK(kvjit_cache_list(ctx, 0, 1, NULL, NULL, &bad) == KVJIT_OK && bad == 0, "verify cannot tell: %llu bad",
        (unsigned long long)bad);
  kvjit_program *prog = NULL;
  kvjit_origin origin = 0;
  kvjit_status st = kvjit_program_get(ctx, &prog, &origin, &p.desc);
  CHECK(st == KVJIT_OK, "get: %s: %s", kvjit_status_name(st), kvjit_last_error());
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  CHECK(s.bad_entries == 1 && s.compiles == 1, "%llu bad entries, %llu compiles", (unsigned long long)s.bad_entries,
        (unsigned long long)s.compiles);
  snprintf(q, sizeof q, "%s/v2/quarantine", dir);
  CHECK(count_files(q) == 1, "%d quarantined", count_files(q));
  CHECK(launch_and_check(prog, 7) == 0, "the rebuilt kernel wrote the wrong bytes");
  kvjit_context_destroy(ctx);
  /* The next process hits the rebuilt entry. */
  ctx = context_on(dir, NULL);
  st = kvjit_program_get(ctx, &prog, &origin, &p.desc);
  CHECK(st == KVJIT_OK && origin == KVJIT_FROM_DISK, "second process: %s, origin %d", kvjit_status_name(st), origin);
  CHECK(launch_and_check(prog, 7) == 0, "the disk hit wrote the wrong bytes");
  kvjit_context_destroy(ctx);
}

static void case_read_only_layer(void) {
  cases++;
  char layer[512], local[512], entry[700];
  snprintf(layer, sizeof layer, "%s/layer", root);
  snprintf(local, sizeof local, "%s/local", root);
  program p;
  program_init(&p, 11, 0);
  kvjit_context *ctx = context_on(layer, NULL);
  CHECK(ctx && kvjit_program_compile(ctx, NULL, &p.desc) == KVJIT_OK, "%s", kvjit_last_error());
  kvjit_context_destroy(ctx);
  only_entry(layer, entry, sizeof entry);
  CHECK(entry[0] && forge(entry, other_cubin, other_len) == 0, "forging %s", entry);
  struct stat before;
  stat(entry, &before);
  for (int process = 0; process < 2; process++) {
    ctx = context_on(local, layer);
    kvjit_program *prog = NULL;
    kvjit_origin origin = 0;
    kvjit_status st = kvjit_program_get(ctx, &prog, &origin, &p.desc);
    CHECK(st == KVJIT_OK, "process %d: %s: %s", process, kvjit_status_name(st), kvjit_last_error());
    kvjit_stats s = KVJIT_STATS_INIT;
    kvjit_context_stats(ctx, &s);
    /* Each process finds the layer's entry bad once; only the first compiles, the second takes
     * the rebuilt entry from the writable dir. */
    CHECK(s.bad_entries == 1 && s.compiles == (process == 0 ? 1u : 0u), "process %d: %llu bad, %llu compiles",
          process, (unsigned long long)s.bad_entries, (unsigned long long)s.compiles);
    CHECK(launch_and_check(prog, 11) == 0, "process %d: wrong bytes", process);
    st = kvjit_program_get(ctx, &prog, &origin, &p.desc);
    CHECK(st == KVJIT_OK && origin == KVJIT_FROM_MEMORY, "process %d: second get", process);
    kvjit_context_destroy(ctx);
  }
  struct stat after;
  CHECK(stat(entry, &after) == 0 && after.st_mtime == before.st_mtime && after.st_size == before.st_size,
        "the read-only layer was changed");
}

/* Issue 25: the program is cached only for another arch (make_other_cubin's dir); the device's
 * lookup misses, says so by name and compiles; the kernel then runs right. */
static void case_miss_explained(int sm) {
  cases++;
  char dir[512], want[160];
  snprintf(dir, sizeof dir, "%s/other", root);
  kvjit_context *ctx = context_on(dir, NULL);
  program p;
  program_init(&p, 7, 0);
  kvjit_program *prog = NULL;
  kvjit_origin origin = 0;
  CHECK(ctx && kvjit_program_get(ctx, &prog, &origin, &p.desc) == KVJIT_OK, "%s", kvjit_last_error());
  CHECK(origin == KVJIT_FROM_COMPILE, "origin %d", origin);
  kvjit_miss_info why;
  size_t n = 0;
  CHECK(kvjit_context_misses(ctx, &why, 1, &n) == KVJIT_OK && n == 1, "%zu misses", n);
  snprintf(want, sizeof want, "cached for sm_%d, this lookup is for sm_%d", other_arch, sm);
  CHECK(why.cause == KVJIT_MISS_TARGET && strstr(why.message, want), "cause %s: %s",
        kvjit_miss_cause_name(why.cause), why.message);
  kvjit_stats s = KVJIT_STATS_INIT;
  CHECK(kvjit_context_stats(ctx, &s) == KVJIT_OK && s.misses_target == 1, "misses_target %llu",
        (unsigned long long)s.misses_target);
  CHECK(launch_and_check(prog, 7) == 0, "the kernel compiled after the miss");
  kvjit_context_destroy(ctx);
}

int main(void) {
  gpu_env env;
  int rc = gpu_setup(&env);
  if (rc != 0) return rc;
  if (test_dir_make(root, sizeof root, "gpu-cache") != 0) return 1;
  if (make_other_cubin(env.sm) != 0) {
    printf("gpu_cache: NVRTC builds no arch of another major version than sm_%d: skipped\n", env.sm);
    test_dir_remove(root);
    gpu_teardown(&env);
    return GPU_SKIP;
  }
  case_writable_dir();
  case_read_only_layer();
  case_miss_explained(env.sm);
  free(other_cubin);
  test_dir_remove(root);
  gpu_teardown(&env);
  printf("gpu_cache: %d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
