/*
 * bench_jit: what kvjit's JIT costs. On one real store_kv_cache variant (the template and the
 * kernel instance src/ops/store_kv_plan.c names): a cold NVRTC compile (first in the process, then later ones of distinct sources so
 * each misses), a disk hit to a launchable kernel (fresh context over a warm cache dir), a memory
 * hit, a cold prewarm of the op, and `nvcc -cubin` of the same source as the peer.
 * With a driver also the memory hit of kvjit_program_get next to a prepared handle's. Without one
 * it measures the compile side only (disk hit = kvjit_program_compile from disk); either way the
 * hit cost of header keying (0 / 1 / 10 -I headers, toolkit headers) through kvjit_program_build.
 * See bench/README.md.
 */
#include <ftw.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "store_kv_plan.h"
#include "driver.h"
#include "gpu_driver.h"
#include "program.h"
#include "internal_util.h"
#include "kvjit.h"
#include "jit_prewarm.h"
#include "toolkit_digest.h"

#define MAX_REPS 64

typedef struct options {
  int arch, reps, nvcc_reps, no_nvcc;
  int64_t row;
  const char *nvcc;
} options;

/* One salted copy of the variant's source: same kernel, distinct cache key. */
typedef struct program {
  char *source;
  kvjit_program_desc desc;
} program;

static const gpu_driver *drv;
static kvjit_store_kv_plan plan;
static kvjit_op_program base_program; /* the plan's program; its desc.kernels points into it */
static const char *base_source;
static char tmp_root[256];

static void fail(const char *what, kvjit_status st) {
  fprintf(stderr, "bench_jit: %s: %s (%s)\n", what, kvjit_status_name(st), kvjit_last_error());
  exit(2);
}

static double ms_since(uint64_t t0) { return (double)(bench_now_ns() - t0) * 1e-6; }

static void program_make(program *p, int salt) {
  const size_t n = strlen(base_source) + 64;
  p->source = malloc(n);
  if (!p->source) exit(2);
  snprintf(p->source, n, "%s\n// bench_jit salt %d.%d\n", base_source, (int)getpid(), salt);
  p->desc = base_program.desc;
  p->desc.source = p->source;
}

static kvjit_context *context_over(const char *dir) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.disable_cache = 0;
  o.log = 0;
  o.manifest_path = "";
  kvjit_context *ctx;
  kvjit_status st = kvjit_context_create(&ctx, &o);
  if (st != KVJIT_OK) fail("kvjit_context_create", st);
  kvjit_cache_info info;
  if (kvjit_context_cache_info(ctx, &info) == KVJIT_OK && info.degraded_reason)
    fprintf(stderr, "bench_jit: cache dir %s degraded: %s\n", dir, info.degraded_reason);
  return ctx;
}

static void print_stats(const char *what, double *values, size_t n, const char *unit) {
  bench_stats s = bench_summarize(values, n);
  printf("%-46s median %10.3f %s   min %10.3f   max %10.3f   (n=%zu)\n", what, s.median, unit, s.min, s.max, n);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static const char *find_nvcc(const options *o) {
  static char path[512];
  if (o->nvcc) return o->nvcc;
  const char *env = getenv("NVCC");
  if (env && access(env, X_OK) == 0) return env;
  const char *home = getenv("CUDA_HOME");
  if (home) {
    snprintf(path, sizeof path, "%s/bin/nvcc", home);
    if (access(path, X_OK) == 0) return path;
  }
  if (access("/usr/local/cuda/bin/nvcc", X_OK) == 0) return "/usr/local/cuda/bin/nvcc";
  const char *p = getenv("PATH");
  while (p && *p) {
    const char *end = strchr(p, ':');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    snprintf(path, sizeof path, "%.*s/nvcc", (int)len, p);
    if (len && access(path, X_OK) == 0) return path;
    p = end ? end + 1 : NULL;
  }
  return NULL;
}

/* ns per kvjit_program_build memory hit of @p d (built once first). */
static bench_stats time_build_hits(kvjit_context *ctx, const kvjit_program_desc *d, int reps, const char *what) {
  enum { CALLS = 20000 };
  kvjit_program *p;
  kvjit_origin origin;
  kvjit_status st = kvjit_program_build(ctx, &p, &origin, d);
  if (st != KVJIT_OK) fail(what, st);
  double t[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    uint64_t t0 = bench_now_ns();
    for (int j = 0; j < CALLS; j++)
      if ((st = kvjit_program_build(ctx, &p, &origin, d)) != KVJIT_OK) fail(what, st);
    t[r] = (double)(bench_now_ns() - t0) / CALLS;
  }
  double copy[MAX_REPS];
  memcpy(copy, t, sizeof t);
  print_stats(what, copy, (size_t)reps, "ns");
  return bench_summarize(t, (size_t)reps);
}

static void build_hits(const char *root, int reps, const kvjit_program_desc *store, int arch, bench_stats out[5]) {
  char cache[320], inc[320];
  snprintf(cache, sizeof cache, "%s/hits", root);
  snprintf(inc, sizeof inc, "%s/inc", root);
  kvjit_context *ctx = context_over(cache);
  kvjit_program_desc d = *store;
  d.arch = arch;
  out[0] = time_build_hits(ctx, &d, reps, "build hit, 26 KB store source");
  if (mkdir(inc, 0700) != 0) return;
  static char sources[3][1024];
  static const int counts[3] = {0, 1, 10};
  char opt[340];
  snprintf(opt, sizeof opt, "-I%s", inc);
  static const char *const kernel[] = {"k"};
  static const char *include_opts[1];
  include_opts[0] = opt;
  for (int h = 0; h < 10; h++) {
    char path[360];
    snprintf(path, sizeof path, "%s/h%d.h", inc, h);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "#pragma once\n#define H%d %d\n", h, h + 1);
    fclose(f);
  }
  for (int c = 0; c < 3; c++) {
    size_t used = 0;
    for (int h = 0; h < counts[c]; h++)
      used += (size_t)snprintf(sources[c] + used, sizeof sources[c] - used, "#include \"h%d.h\"\n", h);
    snprintf(sources[c] + used, sizeof sources[c] - used, "extern \"C\" __global__ void k(int *x) { *x = %s; }\n",
             counts[c] ? "H0" : "1");
    kvjit_program_desc s = KVJIT_PROGRAM_DESC_INIT;
    s.name = "hit.cu";
    s.source = sources[c];
    s.options = include_opts;
    s.num_options = 1;
    s.kernels = kernel;
    s.num_kernels = 1;
    s.arch = arch;
    char what[64];
    snprintf(what, sizeof what, "build hit, small source, %d -I header%s", counts[c], counts[c] == 1 ? "" : "s");
    out[1 + c] = time_build_hits(ctx, &s, reps, what);
  }
  kvjit_program_desc t = KVJIT_PROGRAM_DESC_INIT;
  t.name = "toolkit.cu";
  t.source = "#include <cuda_bf16.h>\n#include <cuda/std/cstdint>\n"
             "extern \"C\" __global__ void k(cuda::std::int64_t *x) { *x = 1; }\n";
  t.kernels = kernel;
  t.num_kernels = 1;
  t.arch = arch;
  out[4] = time_build_hits(ctx, &t, reps, "build hit, <cuda_bf16.h> + <cuda/std/cstdint>");
  double ms;
  size_t files, bytes;
  kvjit_toolkit_digest_cost(&ms, &files, &bytes);
  printf("  toolkit header digest, once per process: %.1f ms over %zu files, %.1f MB\n", ms, files, (double)bytes / 1e6);
  kvjit_context_destroy(ctx);
}

int main(int argc, char **argv) {
  options o = {0, 15, 3, 0, 1024, NULL};
  for (int i = 1; i < argc; i++) {
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--arch") && val) {
      if (kvjit_parse_arch(val, &o.arch) != KVJIT_OK) return 2;
      i++;
    } else if (!strcmp(argv[i], "--reps") && val) {
      o.reps = atoi(argv[++i]);
      if (o.reps < 3 || o.reps > MAX_REPS) return 2;
    } else if (!strcmp(argv[i], "--nvcc-reps") && val) {
      o.nvcc_reps = atoi(argv[++i]);
      if (o.nvcc_reps < 1 || o.nvcc_reps > MAX_REPS) return 2;
    } else if (!strcmp(argv[i], "--row") && val) {
      o.row = atoll(argv[++i]);
    } else if (!strcmp(argv[i], "--nvcc") && val) {
      o.nvcc = argv[++i];
    } else if (!strcmp(argv[i], "--no-nvcc")) {
      o.no_nvcc = 1;
    } else {
      fprintf(stderr, "usage: bench_jit [--arch SM] [--reps N] [--row BYTES] [--nvcc PATH | --no-nvcc] "
                      "[--nvcc-reps N]\n");
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  /* The driver is optional: without it, only the compile side is measured. */
  int have_driver = gpu_driver_get(&drv) == KVJIT_OK;
  int count = 0;
  if (have_driver && (drv->cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)) have_driver = 0;
  if (have_driver) {
    CUdevice dev;
    CUcontext cuctx;
    if (drv->cuDeviceGet(&dev, 0) != CUDA_SUCCESS || drv->cuDevicePrimaryCtxRetain(&cuctx, dev) != CUDA_SUCCESS ||
        drv->cuCtxSetCurrent(cuctx) != CUDA_SUCCESS)
      have_driver = 0;
  }
  if (!o.arch) {
    if (!have_driver || kvjit_current_sm(&o.arch) != KVJIT_OK) o.arch = 90;
  }
  int nv_major = 0, nv_minor = 0;
  kvjit_nvrtc_version(&nv_major, &nv_minor);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  printf("bench_jit: kvjit %s, NVRTC %d.%d, target sm_%d, %s, %ld CPUs\n", kvjit_version_string(), nv_major, nv_minor,
         o.arch, have_driver ? "GPU driver present" : "no GPU driver (compile side only)", cpus);

  bench_stats build_hit_s[5];
  memset(build_hit_s, 0, sizeof build_hit_s);
  kvjit_status st = kvjit_store_kv_plan_make(&plan, o.arch, o.row, o.row, 16, KVJIT_INDEX_INT64,
                                             o.arch >= 90 ? KVJIT_PDL_ON : KVJIT_PDL_OFF, 0, 0);
  if (st != KVJIT_OK) fail("kvjit_store_kv_plan_make", st);
  if ((st = kvjit_store_kv_program(&plan, &base_program)) != KVJIT_OK) fail("kvjit_store_kv_program", st);
  base_source = base_program.desc.source;
  printf("program: store_kv_cache variant row %lld B, int64, PDL %s, split %d, vec %d, lanes %d: %zu bytes of "
         "source\n\n",
         (long long)o.row, plan.pdl ? "on" : "off", plan.split, plan.vec, plan.lanes, strlen(base_source));

  const char *tmp = getenv("TMPDIR");
  snprintf(tmp_root, sizeof tmp_root, "%s/kvjit-bench-jit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(tmp_root)) {
    perror("mkdtemp");
    return 2;
  }
  char dir_a[300], dir_b[300];
  snprintf(dir_a, sizeof dir_a, "%s/a", tmp_root);
  snprintf(dir_b, sizeof dir_b, "%s/b", tmp_root);

  const int reps = o.reps;
  program *progs = calloc((size_t)reps + 1, sizeof *progs);
  if (!progs) return 2;
  for (int i = 0; i <= reps; i++) program_make(&progs[i], i);

  /* 1. Cold compiles: the first in the process pays NVRTC's own start-up; later ones miss too. */
  kvjit_context *ctx = context_over(dir_a);
  double later[MAX_REPS], t_first;
  kvjit_origin origin;
  uint64_t t0 = bench_now_ns();
  if ((st = kvjit_program_compile(ctx, &origin, &progs[0].desc)) != KVJIT_OK) fail("compile (first)", st);
  t_first = ms_since(t0);
  if (origin != KVJIT_FROM_COMPILE) fprintf(stderr, "bench_jit: first compile came from %d\n", (int)origin);
  for (int i = 1; i <= reps; i++) {
    t0 = bench_now_ns();
    if ((st = kvjit_program_compile(ctx, &origin, &progs[i].desc)) != KVJIT_OK) fail("compile", st);
    later[i - 1] = ms_since(t0);
    if (origin != KVJIT_FROM_COMPILE) fprintf(stderr, "bench_jit: compile %d came from %d\n", i, (int)origin);
  }
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &stats);
  printf("cold NVRTC compile, first in process          %10.3f ms\n", t_first);
  double later_copy[MAX_REPS];
  memcpy(later_copy, later, sizeof later);
  print_stats("cold NVRTC compile, later (distinct sources)", later_copy, (size_t)reps, "ms");
  const bench_stats later_s = bench_summarize(later, (size_t)reps);
  if (stats.compiles)
    printf("  of which inside NVRTC (kvjit stats)          mean %8.3f ms over %llu compiles\n",
           (double)stats.compile_ns * 1e-6 / (double)stats.compiles, (unsigned long long)stats.compiles);
  kvjit_context_destroy(ctx);

  /* 2. Disk hit without a driver: kvjit_program_compile finding the entry (read + checksum). */
  double disk_c[MAX_REPS], ctx_create[MAX_REPS];
  for (int i = 1; i <= reps; i++) {
    t0 = bench_now_ns();
    ctx = context_over(dir_a);
    ctx_create[i - 1] = ms_since(t0);
    t0 = bench_now_ns();
    if ((st = kvjit_program_compile(ctx, &origin, &progs[i].desc)) != KVJIT_OK) fail("compile (disk)", st);
    disk_c[i - 1] = ms_since(t0);
    if (origin != KVJIT_FROM_DISK) fprintf(stderr, "bench_jit: disk probe %d came from %d\n", i, (int)origin);
    kvjit_context_destroy(ctx);
  }
  print_stats("kvjit_context_create over a warm dir", ctx_create, (size_t)reps, "ms");
  double disk_c_copy[MAX_REPS];
  memcpy(disk_c_copy, disk_c, sizeof disk_c);
  print_stats("disk hit, compile side (no load)", disk_c_copy, (size_t)reps, "ms");
  bench_stats disk_s = bench_summarize(disk_c, (size_t)reps);
  const char *disk_what = "disk hit (compile side, no driver)";

  /* 3. With a driver: disk hit to a launchable kernel, then memory hits. */
  bench_stats mem_s = {0, 0, 0, 0}, prep_s = {0, 0, 0, 0}, handle_s = {0, 0, 0, 0};
  if (have_driver) {
    /* The process's first module load costs the driver ~1-2 ms once; report it apart. */
    ctx = context_over(dir_a);
    kvjit_program *prog;
    kvjit_kernel *kernel;
    t0 = bench_now_ns();
    if ((st = kvjit_program_get(ctx, &prog, &origin, &progs[0].desc)) != KVJIT_OK) fail("get (first load)", st);
    if ((st = kvjit_program_kernel(prog, &kernel, NULL, 0)) != KVJIT_OK) fail("kernel", st);
    printf("disk hit to kernel, first load in process     %10.3f ms\n", ms_since(t0));
    kvjit_context_destroy(ctx);

    double disk_l[MAX_REPS];
    for (int i = 1; i <= reps; i++) {
      ctx = context_over(dir_a);
      t0 = bench_now_ns();
      if ((st = kvjit_program_get(ctx, &prog, &origin, &progs[i].desc)) != KVJIT_OK) fail("get (disk)", st);
      if ((st = kvjit_program_kernel(prog, &kernel, NULL, 0)) != KVJIT_OK) fail("kernel", st);
      disk_l[i - 1] = ms_since(t0);
      if (origin != KVJIT_FROM_DISK) fprintf(stderr, "bench_jit: disk load %d came from %d\n", i, (int)origin);
      if (i < reps) kvjit_context_destroy(ctx);
    }
    double disk_l_copy[MAX_REPS];
    memcpy(disk_l_copy, disk_l, sizeof disk_l);
    print_stats("disk hit to launchable kernel (fresh context)", disk_l_copy, (size_t)reps, "ms");
    disk_s = bench_summarize(disk_l, (size_t)reps);
    disk_what = "disk hit to launchable kernel";

    /* Memory hit: kvjit_program_get of a loaded program (key hash + table lookup). */
    enum { CALLS = 100000 };
    double mem[MAX_REPS];
    for (int r = 0; r < reps; r++) {
      t0 = bench_now_ns();
      for (int j = 0; j < CALLS; j++)
        if ((st = kvjit_program_get(ctx, &prog, &origin, &progs[reps].desc)) != KVJIT_OK) fail("get (memory)", st);
      mem[r] = (double)(bench_now_ns() - t0) / CALLS;
    }
    if (origin != KVJIT_FROM_MEMORY) fprintf(stderr, "bench_jit: memory probe came from %d\n", (int)origin);
    double mem_copy[MAX_REPS];
    memcpy(mem_copy, mem, sizeof mem);
    print_stats("memory hit, kvjit_program_get", mem_copy, (size_t)reps, "ns");
    mem_s = bench_summarize(mem, (size_t)reps);

    /* The same program through a prepared handle: description copied and keyed once. */
    kvjit_program_handle *handle = NULL;
    if ((st = kvjit_program_handle_create(ctx, &handle, &progs[reps].desc)) != KVJIT_OK) fail("handle", st);
    if ((st = kvjit_program_handle_get(handle, &prog, &origin)) != KVJIT_OK) fail("handle get", st);
    double hnd[MAX_REPS];
    for (int r = 0; r < reps; r++) {
      t0 = bench_now_ns();
      for (int j = 0; j < CALLS; j++)
        if ((st = kvjit_program_handle_get(handle, &prog, &origin)) != KVJIT_OK) fail("handle get", st);
      hnd[r] = (double)(bench_now_ns() - t0) / CALLS;
    }
    double hnd_copy[MAX_REPS];
    memcpy(hnd_copy, hnd, sizeof hnd);
    print_stats("memory hit, kvjit_program_handle_get", hnd_copy, (size_t)reps, "ns");
    handle_s = bench_summarize(hnd, (size_t)reps);
    kvjit_program_handle_destroy(handle);

    /* The op's own hot lookup: prepare of a loaded variant (validate + plan + lock-free table). */
    CUdeviceptr buf;
    if (drv->cuMemAlloc(&buf, 1 << 20) == CUDA_SUCCESS) {
      kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
      a.k = a.v = a.indices = (void *)(uintptr_t)buf;
      a.k_cache = a.v_cache = (void *)(uintptr_t)buf;
      a.batch = 1;
      a.k_row_bytes = a.v_row_bytes = o.row;
      a.num_slots = 1;
      a.pdl = plan.pdl ? KVJIT_PDL_ON : KVJIT_PDL_OFF;
      if ((st = kvjit_store_kv_cache_prepare(ctx, &a)) == KVJIT_OK) {
        double prep[MAX_REPS];
        for (int r = 0; r < reps; r++) {
          t0 = bench_now_ns();
          for (int j = 0; j < CALLS; j++) kvjit_store_kv_cache_prepare(ctx, &a);
          prep[r] = (double)(bench_now_ns() - t0) / CALLS;
        }
        double prep_copy[MAX_REPS];
        memcpy(prep_copy, prep, sizeof prep);
        print_stats("store_kv_cache_prepare, variant loaded", prep_copy, (size_t)reps, "ns");
        prep_s = bench_summarize(prep, (size_t)reps);
      } else {
        fprintf(stderr, "bench_jit: store prepare: %s\n", kvjit_last_error());
      }
      drv->cuMemFree(buf);
    }
    kvjit_context_destroy(ctx);
  } else {
    printf("disk hit to launchable kernel, memory hit       skipped: no GPU driver\n");
  }

  /* 3b. What header keying costs on a hit (no driver needed: kvjit_program_build, which keys and
   * looks up like kvjit_program_get, without the load check): a small program including 0, 1 or
   * 10 headers through -I (one stat per header), and one including toolkit headers. */
  build_hits(tmp_root, reps, &progs[reps].desc, o.arch, build_hit_s);

  /* 4. The op's cold prewarm: every kernel the automatic choice may pick for this variant. */
  ctx = context_over(dir_b);
  char store_line[256];
  snprintf(store_line, sizeof store_line, "store_kv_cache arch=%d k_row_bytes=%lld v_row_bytes=%lld index=int64 pdl=%s split=0 vec=16",
           o.arch, (long long)o.row, (long long)o.row, plan.pdl ? "on" : "off");
  kvjit_variant v;
  st = kvjit_variant_parse(&v, store_line);
  unsigned compiled = 0, cached = 0;
  t0 = bench_now_ns();
  if (st == KVJIT_OK) st = kvjit_variant_prewarm(ctx, &v, &compiled, &cached);
  const double t_prewarm = ms_since(t0);
  if (st == KVJIT_OK)
    printf("store_kv_cache prewarm of it, cold cache      %10.3f ms for %u kernels (one program, %.1f ms each)\n",
           t_prewarm, compiled, compiled ? t_prewarm / compiled : 0.0);
  else
    fprintf(stderr, "bench_jit: prewarm: %s: %s\n", kvjit_status_name(st), kvjit_last_error());
  kvjit_context_destroy(ctx);

  /* 4b. The README's main prewarm set (scripts/main.sh: 18 variants): bundles, in one share and in
   * one share per core; then one kernel of a bundle looked up alone (through its alias). */
  jit_prewarm_result pw;
  int have_pw = jit_prewarm_measure(&pw, tmp_root, o.arch, reps, have_driver) == 0;
  if (have_pw) {
    printf("main prewarm set, first time in process       %10.3f ms (not timed for the target)\n", pw.first_ms);
    printf("main prewarm set, one thread                  %10.3f ms: %u variants, %u kernels in %u programs: "
           "%.2f ms per kernel, %.2f per variant\n",
           pw.one_share_ms, pw.variants, pw.kernels, pw.programs, pw.one_share_ms / pw.kernels,
           pw.one_share_ms / pw.variants);
    printf("main prewarm set, %2u shares on %2u threads      %10.3f ms: %.2f ms per kernel, %.2f per variant\n", pw.shares,
           pw.shares, pw.shares_ms, pw.shares_ms / pw.kernels, pw.shares_ms / pw.variants);
    printf("main prewarm set, %2u shares on %2u processes    %10.3f ms: %.2f ms per kernel, %.2f per variant "
           "(kvjit prewarm -j %u)\n",
           pw.shares, pw.shares, pw.procs_ms, pw.procs_ms / pw.kernels, pw.procs_ms / pw.variants, pw.shares);
    printf("%-46s median %10.3f ms   min %10.3f   max %10.3f   (n=%zu)\n", "disk hit through an alias, compile side",
           pw.alias_compile.median, pw.alias_compile.min, pw.alias_compile.max, pw.alias_compile.count);
    if (pw.alias_load.count)
      printf("%-46s median %10.3f ms   min %10.3f   max %10.3f   (n=%zu)\n", "disk hit through an alias to a kernel",
             pw.alias_load.median, pw.alias_load.min, pw.alias_load.max, pw.alias_load.count);
  } else {
    fprintf(stderr, "bench_jit: main prewarm set: %s\n", kvjit_last_error());
  }

  /* 4c. The runtime miss with each speed option (later compiles of distinct sources, each option
   * set in fresh processes; the SASS is the same with each, tests/test_group_sass.c). */
  jit_option_result opts[8];
  size_t num_opts = jit_options_measure(opts, 8, &progs[0].desc, reps);
  for (size_t i = 0; i < num_opts; i++) {
    char what[64];
    snprintf(what, sizeof what, "later compile, %s", opts[i].label);
    printf("%-46s median %10.3f ms   min %10.3f   max %10.3f   (n=%zu)  first %.1f ms, %.2fx none\n", what,
           opts[i].later.median, opts[i].later.min, opts[i].later.max, opts[i].later.count, opts[i].first,
           opts[0].later.median > 0 ? opts[i].later.median / opts[0].later.median : 0.0);
  }

  /* 5. nvcc -cubin of the same source, same standard and arch. */
  bench_stats nvcc_s = {0, 0, 0, 0};
  const char *nvcc = o.no_nvcc ? NULL : find_nvcc(&o);
  if (nvcc) {
    double t[MAX_REPS];
    int ok = 1;
    for (int i = 0; i < o.nvcc_reps && ok; i++) {
      char src[400], cmd[2048];
      snprintf(src, sizeof src, "%s/nvcc_%d.cu", tmp_root, i);
      FILE *f = fopen(src, "w");
      if (!f) return 2;
      program p;
      program_make(&p, 1000 + i);
      /* nvcc has no name expressions: the same instance, instantiated explicitly. */
      fprintf(f, "%s\ntemplate __global__ void %s(const __grid_constant__ kvjit_store_kv_params);\n", p.source,
              base_program.kernel);
      fclose(f);
      free(p.source);
      snprintf(cmd, sizeof cmd, "'%s' -cubin -arch=sm_%d -std=c++17 -o '%s/nvcc_%d.cubin' '%s' > '%s/nvcc.log' 2>&1",
               nvcc, o.arch, tmp_root, i, src, tmp_root);
      t0 = bench_now_ns();
      const int rc = system(cmd);
      t[i] = ms_since(t0);
      if (rc != 0) {
        char log_path[320];
        snprintf(log_path, sizeof log_path, "%s/nvcc.log", tmp_root);
        fprintf(stderr, "bench_jit: nvcc failed (status %d): %s\n", rc, cmd);
        FILE *lf = fopen(log_path, "r");
        char line[256];
        while (lf && fgets(line, sizeof line, lf)) fputs(line, stderr);
        if (lf) fclose(lf);
        ok = 0;
      }
    }
    if (ok) {
      double t_copy[MAX_REPS];
      memcpy(t_copy, t, sizeof t);
      char what[80];
      snprintf(what, sizeof what, "nvcc -cubin -arch=sm_%d (same source)", o.arch);
      print_stats(what, t_copy, (size_t)o.nvcc_reps, "ms");
      nvcc_s = bench_summarize(t, (size_t)o.nvcc_reps);
    }
  } else {
    printf("nvcc                                            skipped: %s\n", o.no_nvcc ? "--no-nvcc" : "not found");
  }

  printf("\ntargets:\n");
  printf("  runtime miss of one store variant (later NVRTC compile): %.1f ms (target <= 12 ms) %s\n", later_s.median,
         later_s.median <= 12 ? "pass" : "MISS");
  if (nvcc_s.count)
    printf("  nvcc / later NVRTC compile: %.1fx (median %.1f ms / %.1f ms; target >= 30x) %s\n",
           nvcc_s.median / later_s.median, nvcc_s.median, later_s.median,
           nvcc_s.median / later_s.median >= 30 ? "pass" : "MISS");
  /* A "variant" of the measurement is one kernel instance of a bundle. */
  if (have_pw)
    printf("  prewarm, amortized: %.2f ms per kernel on %u processes as kvjit prewarm -j runs it (%u kernels of %u "
           "variants; one thread %.2f, %u threads %.2f; target <= 4 ms) %s\n",
           pw.procs_ms / pw.kernels, pw.shares, pw.kernels, pw.variants, pw.one_share_ms / pw.kernels, pw.shares,
           pw.shares_ms / pw.kernels, pw.procs_ms / pw.kernels <= 4 ? "pass" : "MISS");
  if (have_pw)
    printf("  disk hit through an alias (%s): %.3f ms (target <= 0.5 ms) %s\n", pw.alias_load.count ? "to a kernel" : "compile side",
           pw.alias_load.count ? pw.alias_load.median : pw.alias_compile.median,
           (pw.alias_load.count ? pw.alias_load.median : pw.alias_compile.median) <= 0.5 ? "pass" : "MISS");
  printf("  %s: %.3f ms (target <= 0.5 ms) %s\n", disk_what, disk_s.median, disk_s.median <= 0.5 ? "pass" : "MISS");
  if (mem_s.count)
    printf("  memory hit, kvjit_program_get: %.1f ns (target <= 100 ns) %s\n", mem_s.median,
           mem_s.median <= 100 ? "pass" : "MISS");
  if (handle_s.count)
    printf("  memory hit, kvjit_program_handle_get: %.1f ns (target <= 100 ns) %s\n", handle_s.median,
           handle_s.median <= 100 ? "pass" : "MISS");

  /* Machine-readable lines for scripts: metric,median,min,max,unit */
  printf("\ncsv: metric,median,min,max,unit\n");
  printf("csv: nvrtc_first,%.4f,%.4f,%.4f,ms\n", t_first, t_first, t_first);
  printf("csv: nvrtc_later,%.4f,%.4f,%.4f,ms\n", later_s.median, later_s.min, later_s.max);
  printf("csv: %s,%.4f,%.4f,%.4f,ms\n", have_driver ? "disk_hit_load" : "disk_hit_compile_side", disk_s.median,
         disk_s.min, disk_s.max);
  if (mem_s.count) printf("csv: memory_hit,%.2f,%.2f,%.2f,ns\n", mem_s.median, mem_s.min, mem_s.max);
  if (handle_s.count) printf("csv: handle_hit,%.2f,%.2f,%.2f,ns\n", handle_s.median, handle_s.min, handle_s.max);
  static const char *const hit_names[] = {"build_hit_store_source", "build_hit_0_headers", "build_hit_1_header",
                                          "build_hit_10_headers", "build_hit_toolkit_headers"};
  for (int i = 0; i < 5; i++)
    if (build_hit_s[i].count)
      printf("csv: %s,%.2f,%.2f,%.2f,ns\n", hit_names[i], build_hit_s[i].median, build_hit_s[i].min, build_hit_s[i].max);
  if (prep_s.count) printf("csv: store_prepare_hot,%.2f,%.2f,%.2f,ns\n", prep_s.median, prep_s.min, prep_s.max);
  if (nvcc_s.count) printf("csv: nvcc_cubin,%.4f,%.4f,%.4f,ms\n", nvcc_s.median, nvcc_s.min, nvcc_s.max);
  if (have_pw) {
    printf("csv: prewarm_main_first,%.4f,%.4f,%.4f,ms\n", pw.first_ms, pw.first_ms, pw.first_ms);
    printf("csv: prewarm_main_one_thread,%.4f,%.4f,%.4f,ms\n", pw.one_share_ms, pw.one_share_ms, pw.one_share_ms);
    printf("csv: prewarm_main_per_kernel,%.4f,%.4f,%.4f,ms\n", pw.one_share_ms / pw.kernels,
           pw.one_share_ms / pw.kernels, pw.one_share_ms / pw.kernels);
    printf("csv: prewarm_main_all_cores,%.4f,%.4f,%.4f,ms\n", pw.shares_ms, pw.shares_ms, pw.shares_ms);
    printf("csv: prewarm_main_all_cores_processes,%.4f,%.4f,%.4f,ms\n", pw.procs_ms, pw.procs_ms, pw.procs_ms);
    printf("csv: alias_hit_compile_side,%.4f,%.4f,%.4f,ms\n", pw.alias_compile.median, pw.alias_compile.min,
           pw.alias_compile.max);
    if (pw.alias_load.count)
      printf("csv: alias_hit_load,%.4f,%.4f,%.4f,ms\n", pw.alias_load.median, pw.alias_load.min, pw.alias_load.max);
  }
  for (size_t i = 0; i < num_opts; i++)
    printf("csv: later_compile_%s,%.4f,%.4f,%.4f,ms\n", opts[i].csv, opts[i].later.median, opts[i].later.min,
           opts[i].later.max);

  for (int i = 0; i <= reps; i++) free(progs[i].source);
  free(progs);
  remove_tree(tmp_root);
  return 0;
}
