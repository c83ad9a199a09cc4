/* bench_jit's prewarm and compile-option measurements (see jit_prewarm.h). */
#include "jit_prewarm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compile.h"
#include "internal_util.h"
#include "store_kv_plan.h"

static double ms_since(uint64_t t0) { return (double)(bench_now_ns() - t0) * 1e-6; }

size_t jit_main_set(kvjit_variant *out, size_t capacity, int arch) {
  /* `kvjit prewarm --dry-run` of the default set: rows of tp 1, 2, 4, 8, both index types, bf16
   * and fp8 caches (an fp8 cache also quantized from bf16 on store). */
  static const int64_t rows[] = {2048, 1024, 512, 256};
  size_t n = 0;
  char line[256];
  for (size_t r = 0; r < 5; r++) {
    for (int index = 0; index < 2; index++) {
      for (int quant = 0; quant < 2 && n < capacity; quant++) {
        if (r == 4 && quant) continue;
        snprintf(line, sizeof line, "store_kv_cache arch=%d k_row_bytes=%lld v_row_bytes=%lld index=%s pdl=auto split=0 vec=16%s",
                 arch, (long long)(r < 4 ? rows[r] : 128), (long long)(r < 4 ? rows[r] : 128), index ? "int64" : "int32",
                 quant ? " dtype=bf16 cache_dtype=fp8_e4m3 scale=tensor" : "");
        if (kvjit_variant_parse(&out[n], line) == KVJIT_OK) n++;
      }
    }
  }
  return n;
}

static kvjit_context *context_in(const char *dir) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  o.manifest_path = "";
  kvjit_context *ctx = NULL;
  return kvjit_context_create(&ctx, &o) == KVJIT_OK ? ctx : NULL;
}

typedef struct share_job {
  kvjit_context *ctx;
  const kvjit_variant *variants;
  size_t count;
  unsigned part, parts;
  kvjit_status status;
  unsigned compiled;
} share_job;

static void *share_worker(void *arg) {
  share_job *job = arg;
  kvjit_prewarm_result *r = calloc(job->count, sizeof *r);
  job->status = r ? kvjit_variants_prewarm(job->ctx, job->variants, job->count, job->part, job->parts, r)
                  : KVJIT_ERR_OUT_OF_MEMORY;
  for (size_t i = 0; r && i < job->count; i++) job->compiled += r[i].compiled;
  free(r);
  return NULL;
}

/* The set in @p parts shares on as many threads; wall ms, or -1. */
static double prewarm_in(const char *dir, const kvjit_variant *v, size_t n, unsigned parts, kvjit_stats *stats,
                         unsigned *kernels) {
  kvjit_context *ctx = context_in(dir);
  if (ctx == NULL) return -1;
  share_job jobs[64];
  pthread_t threads[64];
  if (parts > 64) parts = 64;
  uint64_t t0 = bench_now_ns();
  for (unsigned p = 0; p < parts; p++) {
    jobs[p] = (share_job){ctx, v, n, p, parts, KVJIT_OK, 0};
    if (p > 0) pthread_create(&threads[p], NULL, share_worker, &jobs[p]);
  }
  share_worker(&jobs[0]);
  for (unsigned p = 1; p < parts; p++) pthread_join(threads[p], NULL);
  double ms = ms_since(t0);
  int ok = 1;
  *kernels = 0;
  for (unsigned p = 0; p < parts; p++) {
    ok &= jobs[p].status == KVJIT_OK;
    *kernels += jobs[p].compiled;
  }
  if (!ok) fprintf(stderr, "bench_jit: prewarm of the main set: %s\n", kvjit_last_error());
  *stats = (kvjit_stats)KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, stats);
  kvjit_context_destroy(ctx);
  return ok ? ms : -1;
}

/* The set in @p parts shares on as many forked processes, each with its own context over @p dir,
 * as `kvjit prewarm -j` runs them (src/cli/prewarm_pool.c); wall ms, or -1. */
static double prewarm_procs(const char *dir, const kvjit_variant *v, size_t n, unsigned parts, unsigned *kernels) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  uint64_t t0 = bench_now_ns();
  unsigned started = 0;
  for (unsigned p = 0; p < parts; p++, started++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) {
      close(fds[0]);
      share_job job = {context_in(dir), v, n, p, parts, KVJIT_ERR_IO, 0};
      if (job.ctx) share_worker(&job);
      unsigned msg[2] = {job.status == KVJIT_OK, job.compiled};
      ssize_t w = write(fds[1], msg, sizeof msg); /* 8 bytes: atomic on a pipe */
      kvjit_context_destroy(job.ctx);
      exit(w == (ssize_t)sizeof msg ? 0 : 1);
    }
  }
  close(fds[1]);
  int ok = started == parts;
  *kernels = 0;
  unsigned msg[2], got = 0;
  while (read(fds[0], msg, sizeof msg) == (ssize_t)sizeof msg) {
    ok &= msg[0] != 0;
    *kernels += msg[1];
    got++;
  }
  close(fds[0]);
  for (unsigned p = 0; p < started; p++) wait(NULL);
  double ms = ms_since(t0);
  if (!ok || got != parts) fprintf(stderr, "bench_jit: prewarm of the main set on %u processes failed\n", parts);
  return ok && got == parts ? ms : -1;
}

int jit_prewarm_measure(jit_prewarm_result *out, const char *root, int arch, int reps, int have_driver) {
  memset(out, 0, sizeof *out);
  kvjit_variant v[32];
  size_t n = jit_main_set(v, 32, arch);
  char first[512], one[512], many[512];
  snprintf(first, sizeof first, "%s/prewarm-first", root);
  snprintf(one, sizeof one, "%s/prewarm-one", root);
  snprintf(many, sizeof many, "%s/prewarm-many", root);
  kvjit_stats s0, s1, s2;
  unsigned k0 = 0, k1 = 0, k2 = 0;
  /* Once untimed for the targets: on a fresh machine the first prewarm of a set reads NVRTC's code
   * for its kernels from disk (2.4 s against 0.5 s warm on the H200 host), which says nothing
   * about kvjit. It is reported beside the others. */
  out->first_ms = prewarm_in(first, v, n, 1, &s0, &k0);
  out->one_share_ms = prewarm_in(one, v, n, 1, &s1, &k1);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  out->shares = cpus < 1 ? 1 : cpus > 64 ? 64 : (unsigned)cpus;
  out->shares_ms = prewarm_in(many, v, n, out->shares, &s2, &k2);
  char procs[512];
  snprintf(procs, sizeof procs, "%s/prewarm-procs", root);
  unsigned k3 = 0;
  out->procs_ms = prewarm_procs(procs, v, n, out->shares, &k3);
  if (out->first_ms < 0 || out->one_share_ms < 0 || out->shares_ms < 0 || out->procs_ms < 0 || k0 != k1 ||
      k1 != k2 || k2 != k3) {
    return -1;
  }
  out->variants = (unsigned)n;
  out->programs = (unsigned)s1.compiles;
  out->kernels = k1;

  /* One kernel of a bundle asked alone from fresh contexts: its alias, then the bundle. */
  kvjit_context *ctx;
  kvjit_store_kv_plan plan;
  if (kvjit_store_kv_plan_make(&plan, arch, 2048, 2048, 16, KVJIT_INDEX_INT32, KVJIT_PDL_AUTO, 0, 0) != KVJIT_OK) return -1;
  kvjit_op_program prog;
  if (kvjit_store_kv_program(&plan, &prog) != KVJIT_OK) return -1;
  double c[64], l[64];
  if (reps > 64) reps = 64;
  int nl = 0;
  for (int i = 0; i < reps; i++) {
    ctx = context_in(one);
    kvjit_origin origin;
    uint64_t t0 = bench_now_ns();
    kvjit_status st = kvjit_program_compile(ctx, &origin, &prog.desc);
    c[i] = ms_since(t0);
    if (st != KVJIT_OK || origin != KVJIT_FROM_DISK) fprintf(stderr, "bench_jit: alias lookup %d: origin %d\n", i, origin);
    kvjit_context_destroy(ctx);
    if (have_driver) {
      ctx = context_in(one);
      kvjit_program *p;
      t0 = bench_now_ns();
      st = kvjit_program_get(ctx, &p, &origin, &prog.desc);
      kvjit_kernel *k;
      if (st == KVJIT_OK) st = kvjit_program_kernel(p, &k, NULL, 0);
      l[nl++] = ms_since(t0);
      if (st != KVJIT_OK || origin != KVJIT_FROM_DISK) fprintf(stderr, "bench_jit: alias load %d: origin %d\n", i, origin);
      kvjit_context_destroy(ctx);
    }
  }
  out->alias_compile = bench_summarize(c, (size_t)reps);
  if (nl) out->alias_load = bench_summarize(l, (size_t)nl);
  return 0;
}

/* ---- speed options ------------------------------------------------------------------------------ */

static const struct {
  const char *label, *csv;
  const char *options[2];
} option_sets[] = {
    {"no speed option", "none", {NULL, NULL}},
    {"-minimal", "minimal", {"-minimal", NULL}},
    {"-pch", "pch", {"-pch", NULL}},
    {"-pch -minimal", "pch_minimal", {"-pch", "-minimal"}},
};

/* In a child: @p reps + 1 compiles of salted copies of @p desc's program with the option set;
 * writes the times (ms) to @p fd. */
static void option_child(int fd, const kvjit_program_desc *desc, size_t set, int reps) {
  const char *options[8];
  size_t n = 0;
  /* The op's options less the speed options: each set adds its own. */
  for (size_t i = 0; i < desc->num_options && n < 6; i++) {
    if (strcmp(desc->options[i], "-minimal") != 0 && strcmp(desc->options[i], "-pch") != 0) options[n++] = desc->options[i];
  }
  for (int i = 0; i < 2 && option_sets[set].options[i]; i++) options[n++] = option_sets[set].options[i];
  size_t len = strlen(desc->source) + 64;
  char *src = malloc(len);
  double times[65];
  for (int r = 0; r <= reps && src; r++) {
    snprintf(src, len, "%s\n// bench_jit option salt %d.%d\n", desc->source, (int)getpid(), r);
    kvjit_compile_input in = {0};
    in.name = desc->name;
    in.source = src;
    in.options = options;
    in.num_options = n;
    in.kernels = desc->kernels;
    in.kernels_given = desc->kernels;
    in.num_kernels = desc->num_kernels;
    kvjit_key_target t = {desc->arch, KVJIT_PAYLOAD_CUBIN, 0, 0, 0};
    kvjit_nvrtc_version(&t.nvrtc_major, &t.nvrtc_minor);
    kvjit_compiled c;
    times[r] = kvjit_nvrtc_compile(&c, &in, &t) == KVJIT_OK ? (double)c.ns * 1e-6 : -1;
    kvjit_compiled_free(&c);
  }
  free(src);
  ssize_t w = write(fd, times, sizeof times[0] * (size_t)(reps + 1));
  (void)w;
}

size_t jit_options_measure(jit_option_result *out, size_t capacity, const kvjit_program_desc *desc, int reps) {
  size_t sets = sizeof option_sets / sizeof option_sets[0];
  if (sets > capacity) sets = capacity;
  if (reps > 32) reps = 32;
  /* Two rounds, the sets interleaved, each child a fresh process: machine drift hits all alike. */
  enum { ROUNDS = 2 };
  double later[8][2 * 32], first[8][ROUNDS];
  size_t got[8] = {0};
  for (int round = 0; round < ROUNDS; round++) {
    for (size_t s = 0; s < sets; s++) {
      int fds[2];
      if (pipe(fds) != 0) return 0;
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        close(fds[0]);
        option_child(fds[1], desc, s, reps / ROUNDS);
        exit(0); /* not _exit(): NVRTC removes its automatic PCH files (MBs in /tmp) at exit */
      }
      close(fds[1]);
      double times[65];
      ssize_t r = read(fds[0], times, sizeof times);
      close(fds[0]);
      waitpid(pid, NULL, 0);
      size_t k = r > 0 ? (size_t)r / sizeof times[0] : 0;
      first[s][round] = k ? times[0] : -1;
      for (size_t i = 1; i < k; i++) later[s][got[s]++] = times[i];
    }
  }
  for (size_t s = 0; s < sets; s++) {
    out[s].label = option_sets[s].label;
    out[s].csv = option_sets[s].csv;
    out[s].later = bench_summarize(later[s], got[s]);
    out[s].first = (first[s][0] + first[s][1]) / 2;
  }
  return sets;
}
