/*
 * bench_miss: what misses that explain themselves cost (issue 25), on the CPU alone (no driver,
 * no NVRTC): publishing an entry (temp file, fsync, rename, and the index line it now appends), the
 * index append alone, the key inputs' digests a publication records (over a source the size of
 * the store template), and one miss explanation that reads the most headers it may
 * (KVJIT_MISS_CANDIDATES). A hit pays none of it: the explanation runs only before a compile.
 *
 *   usage: bench_miss DIR [--entries N]     (DIR: an empty dir on the disk to measure)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "cache_internal.h"
#include "cache_store.h"
#include "entry.h"
#include "miss.h"
#include "request.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static const char *const kernel[] = {"k<1>"};
static const char *const lowered[] = {"_Z1kILi1EEvv"};
static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry _Z1kILi1EEvv()\n{\nret;\n}\n";

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_miss DIR [--entries N]\n");
    return 2;
  }
  int entries = argc > 3 && strcmp(argv[2], "--entries") == 0 ? atoi(argv[3]) : 500;
  if (entries < 1) entries = 1;
  kvjit_cache_config config;
  memset(&config, 0, sizeof config);
  config.write_dir = argv[1];
  config.read_dirs = "";
  config.max_bytes = 1u << 30;
  config.lock_timeout_ms = 1000;
  kvjit_cache *cache = NULL;
  if (kvjit_cache_open(&cache, &config) != KVJIT_OK || !kvjit_cache_writable(cache)) {
    fprintf(stderr, "bench_miss: %s is not a usable cache dir\n", argv[1]);
    return 1;
  }
  /* Entries of one program and kernel built from other sources, as a miss finds them. */
  kvjit_key_target target = {90, KVJIT_PAYLOAD_PTX, 0, 13, 0};
  kvjit_entry_view *views = calloc((size_t)entries, sizeof *views);
  uint8_t **bufs = calloc((size_t)entries, sizeof *bufs);
  double publish = 0;
  for (int i = 0; i < entries; i++) {
    kvjit_entry_digests d = {{1, 1}, {2, 2}, {3, 3}, {4, (uint64_t)i}};
    kvjit_entry_meta m = {.content = {7, (uint64_t)i}, .target = target, .created = i, .program = "bench.cu",
                          .num_kernels = 1, .kernels = kernel, .lowered = lowered, .digests = &d};
    kvjit_key_derive(&m.key, &target, 1, kernel, &m.content);
    size_t len = 0;
    if (kvjit_entry_encode(&bufs[i], &len, &m, ptx, sizeof ptx - 1) != KVJIT_OK ||
        kvjit_entry_parse(&views[i], bufs[i], len, &m.key, 1) != KVJIT_OK) {
      return 1;
    }
    double t0 = now_us();
    if (kvjit_cache_write(cache, &m.key, bufs[i], len) != KVJIT_OK) return 1;
    publish += now_us() - t0;
  }
  double t0 = now_us();
  for (int i = 0; i < entries; i++) cache_index_add(cache, &views[i]);
  double append = now_us() - t0;
  printf("publish (temp file, fsync, rename, index line): %.1f us; the index line alone: %.2f us\n",
         publish / entries, append / entries);

  /* The digests a publication records, of a program the size of the store template. */
  enum { SOURCE_BYTES = 28 * 1024, DIGEST_ROUNDS = 2000 };
  char *source = malloc(SOURCE_BYTES + 1);
  for (size_t i = 0; i < SOURCE_BYTES; i++) source[i] = (char)('a' + i % 26);
  source[SOURCE_BYTES] = '\0';
  static const char *const options[] = {"-std=c++17", "-DKVJIT_PDL=1", "--use_fast_math"};
  kvjit_program_desc desc = KVJIT_PROGRAM_DESC_INIT;
  desc.name = "bench.cu";
  desc.source = source;
  desc.kernels = kernel;
  desc.num_kernels = 1;
  desc.options = options;
  desc.num_options = 3;
  kvjit_request req;
  if (kvjit_request_init(&req, NULL, &desc) != KVJIT_OK) {
    fprintf(stderr, "bench_miss: %s\n", kvjit_last_error());
    return 1;
  }
  kvjit_entry_digests digests;
  t0 = now_us();
  for (int i = 0; i < DIGEST_ROUNDS; i++) kvjit_request_digests(&req, &digests);
  printf("the key inputs' digests of a %d-byte program: %.2f us\n", SOURCE_BYTES, (now_us() - t0) / DIGEST_ROUNDS);
  kvjit_request_free(&req);

  /* One explanation: the index shard, then KVJIT_MISS_CANDIDATES headers (page cache warm). */
  enum { EXPLAIN_ROUNDS = 500 };
  kvjit_miss_query q;
  memset(&q, 0, sizeof q);
  q.target = target;
  q.target.nvrtc_minor = 2;
  q.digests = (kvjit_entry_digests){{1, 1}, {2, 2}, {3, 3}, {4, 4}};
  q.content = (kvjit_key){7, 4};
  q.program = "bench.cu";
  q.num_kernels = 1;
  q.kernels = kernel;
  q.what = "bench";
  kvjit_key_derive(&q.key, &q.target, 1, kernel, &q.content);
  kvjit_miss_info info;
  t0 = now_us();
  for (int i = 0; i < EXPLAIN_ROUNDS; i++) kvjit_miss_explain(cache, &q, &info);
  printf("one miss explanation (%d entries of its kernel, %d headers read): %.1f us -> %s\n", entries,
         KVJIT_MISS_CANDIDATES, (now_us() - t0) / EXPLAIN_ROUNDS, kvjit_miss_cause_name(info.cause));
  for (int i = 0; i < entries; i++) free(bufs[i]);
  free(bufs);
  free(views);
  free(source);
  kvjit_cache_close(cache);
  return 0;
}
