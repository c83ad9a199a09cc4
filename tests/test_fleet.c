/*
 * A fleet sharing one cubin cache (issue 20), through the public API with real NVRTC compiles and
 * real servers on loopback: a prewarm pushes to nginx; a second client with an empty dir and
 * KVJIT_COMPILE=never gets every kernel from it with no compile; a miss under never fails with
 * KVJIT_ERR_NOT_CACHED; every remote fault costs bounded time, compiles nothing twice and loads
 * nothing bad; 16 processes cold against one remote and one local dir compile each kernel once.
 * usage: test_fleet FAULT_SERVER.py NGINX_DAV.sh   (exit 77 without nginx or python3)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvjit.h"
#include "kvjit_tools.h"
#include "remote_servers.h"
#include "test_util.h"

static const char *fault_script, *nginx_script;
static remote_servers servers;
static int dir_seq;

/* Three store variants: 4 + 3 + 3 kernels (a plan per distinct batch class). */
static const char *const lines[] = {
    "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16",
    "store_kv_cache arch=90 k_row_bytes=512 v_row_bytes=512 index=int64 pdl=auto split=0 vec=16",
    "store_kv_cache arch=90 k_row_bytes=2048 v_row_bytes=0 index=int32 pdl=auto split=0 vec=16",
};
enum { LINES = 3 };

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void fresh_dir(char *out, size_t cap) { snprintf(out, cap, "%s/c%d", servers.dir, dir_seq++); }

static kvjit_context *client(const char *dir, const char *remote, int rw, kvjit_compile_mode mode) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = "";
  o.log = 0;
  o.disable_cache = 0;
  o.compile_mode = mode;
  o.remote_cache = remote;
  o.remote_read_write = rw;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static kvjit_stats stats_of(kvjit_context *ctx) {
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  return s;
}

/* Prewarm every line; the kernels compiled and found cached, summed. */
static void prewarm_all(kvjit_context *ctx, unsigned *compiled, unsigned *cached) {
  *compiled = *cached = 0;
  for (int i = 0; i < LINES; i++) {
    unsigned c = 0, h = 0;
    kvjit_status st = kvjit_prewarm_line(ctx, lines[i], &c, &h);
    if (st != KVJIT_OK) fail_msg("%s: %s", lines[i], kvjit_last_error());
    *compiled += c;
    *cached += h;
  }
}

/* Every entry in @p dir passes verify (nothing bad was written from a lying remote). */
static void expect_all_good(const char *dir) {
  kvjit_context *ctx = client(dir, NULL, 0, KVJIT_COMPILE_ALWAYS);
  uint64_t bad = 9;
  assert_int_equal(kvjit_cache_list(ctx, 0, 1, NULL, NULL, &bad), KVJIT_OK);
  assert_int_equal(bad, 0);
  kvjit_context_destroy(ctx);
}

/* The kernels of the lines, and the NVRTC programs (bundles) a prewarm of them compiles. */
static unsigned kernels_total;
static uint64_t programs_total;

static void test_push_then_serve_with_never(void **state) {
  (void)state;
  char a[300], b[300], remote[600];
  fresh_dir(a, sizeof a);
  fresh_dir(b, sizeof b);
  snprintf(remote, sizeof remote, "%s/push", servers.nginx_url);
  kvjit_context *build = client(a, remote, 1, KVJIT_COMPILE_ALWAYS);
  unsigned compiled, cached;
  prewarm_all(build, &compiled, &cached);
  kernels_total = compiled;
  assert_true(compiled >= LINES);
  assert_int_equal(cached, 0);
  kvjit_stats s = stats_of(build);
  programs_total = s.compiles;
  /* Each bundle and each kernel's alias goes up. */
  assert_int_equal(s.remote_writes, compiled + programs_total);
  assert_int_equal(s.remote_errors + s.remote_timeouts, 0);
  kvjit_context_destroy(build);

  /* A server: an empty dir, the remote read only, compiling forbidden. */
  double t0 = now_ms();
  kvjit_context *server = client(b, remote, 0, KVJIT_COMPILE_NEVER);
  prewarm_all(server, &compiled, &cached);
  double took = now_ms() - t0;
  s = stats_of(server);
  printf("# never: %u kernels (%llu bundles) from the remote in %.0f ms, %llu compiles\n", cached,
         (unsigned long long)programs_total, took,
         (unsigned long long)s.compiles);
  assert_int_equal(compiled, 0);
  assert_int_equal(cached, kernels_total);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.remote_hits, kernels_total + programs_total); /* the aliases and their bundles */
  assert_true(s.remote_bytes_in > 0);
  /* A variant nobody built: its own status, naming it; nothing compiled. */
  const char *missing = "store_kv_cache arch=90 k_row_bytes=4096 v_row_bytes=4096 index=int64 pdl=auto split=0 vec=16";
  assert_int_equal(kvjit_prewarm_line(server, missing, &compiled, &cached), KVJIT_ERR_NOT_CACHED);
  assert_non_null(strstr(kvjit_last_error(), "k_row_bytes=4096"));
  assert_non_null(strstr(kvjit_last_error(), "KVJIT_COMPILE=never"));
  s = stats_of(server);
  assert_int_equal(s.compiles, 0);
  assert_true(s.not_cached >= 1); /* one per kernel of the variant */
  kvjit_context_destroy(server);
  /* What the server fetched is now local: another process hits with no remote at all. */
  kvjit_context *local = client(b, NULL, 0, KVJIT_COMPILE_NEVER);
  prewarm_all(local, &compiled, &cached);
  assert_int_equal(cached, kernels_total);
  kvjit_context_destroy(local);
  expect_all_good(b);
}

/* Prewarm against a failing remote: everything compiled exactly once, locally good, in bounded
 * time, and the fault counted. */
static void run_fault(const char *mode, unsigned timeout_ms, int expect_timeouts) {
  char dir[300], remote[300];
  fresh_dir(dir, sizeof dir);
  if (strcmp(mode, "down") == 0) snprintf(remote, sizeof remote, "http://127.0.0.1:1");
  else snprintf(remote, sizeof remote, "%s/%s", servers.fault_base, mode);
  kvjit_context *ctx = client(dir, remote, 1, KVJIT_COMPILE_ALWAYS);
  unsigned compiled, cached;
  double t0 = now_ms();
  prewarm_all(ctx, &compiled, &cached);
  double took = now_ms() - t0;
  kvjit_stats s = stats_of(ctx);
  printf("# %-9s %5.0f ms for %u kernels: compiles %llu, remote hits %llu, errors %llu, timeouts %llu, skipped %llu\n",
         mode, took, compiled + cached, (unsigned long long)s.compiles, (unsigned long long)s.remote_hits,
         (unsigned long long)s.remote_errors, (unsigned long long)s.remote_timeouts, (unsigned long long)s.remote_skipped);
  assert_int_equal(compiled, kernels_total);
  assert_int_equal(s.compiles, programs_total); /* nothing compiled twice */
  assert_int_equal(s.remote_hits, 0);          /* nothing accepted from a lying remote */
  if (expect_timeouts) assert_true(s.remote_timeouts >= 1);
  else assert_true(s.remote_errors >= 1);
  /* One timeout at most, then the remote is skipped: well under a timeout per kernel. */
  assert_true(took < timeout_ms + 60.0 * kernels_total + 2000.0);
  kvjit_context_destroy(ctx);
  expect_all_good(dir);
}

static void test_faults_are_bounded_and_counted(void **state) {
  (void)state;
  assert_true(kernels_total > 0); /* after test_push_then_serve_with_never */
  setenv("KVJIT_REMOTE_TIMEOUT_MS", "400", 1);
  /* Objects for the lying modes: the fault server's store holds real entries. */
  char dir[300], store[300];
  fresh_dir(dir, sizeof dir);
  snprintf(store, sizeof store, "%s/store", servers.fault_base);
  kvjit_context *seed = client(dir, store, 1, KVJIT_COMPILE_ALWAYS);
  unsigned compiled, cached;
  prewarm_all(seed, &compiled, &cached);
  assert_int_equal(stats_of(seed).remote_writes, kernels_total + programs_total);
  kvjit_context_destroy(seed);
  run_fault("down", 400, 0);
  run_fault("sleep", 400, 1);
  run_fault("500", 400, 0);
  run_fault("429", 400, 0);
  run_fault("truncate", 400, 0);
  run_fault("corrupt", 400, 0);
  run_fault("otherkey", 400, 0);
  run_fault("huge", 400, 0);
  unsetenv("KVJIT_REMOTE_TIMEOUT_MS");
}

/* A refused PUT stops writes for a while; reads go on. */
static void test_refused_writes_keep_reading(void **state) {
  (void)state;
  char dir[300], remote[300];
  fresh_dir(dir, sizeof dir);
  snprintf(remote, sizeof remote, "%s/403put", servers.fault_base);
  kvjit_context *ctx = client(dir, remote, 1, KVJIT_COMPILE_NEVER);
  unsigned compiled, cached;
  /* The store mode's objects (seeded above) are served by 403put's GET too. */
  prewarm_all(ctx, &compiled, &cached);
  kvjit_stats s = stats_of(ctx);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(s.remote_hits, kernels_total + programs_total);
  kvjit_context_destroy(ctx);
  fresh_dir(dir, sizeof dir);
  ctx = client(dir, remote, 1, KVJIT_COMPILE_ALWAYS);
  const char *fresh = "store_kv_cache arch=90 k_row_bytes=8192 v_row_bytes=8192 index=int32 pdl=auto split=0 vec=16";
  assert_int_equal(kvjit_prewarm_line(ctx, fresh, &compiled, &cached), KVJIT_OK);
  s = stats_of(ctx);
  assert_int_equal(s.remote_writes, 0);
  assert_int_equal(s.remote_errors, 1);      /* the first PUT (the bundle), refused */
  assert_int_equal(s.remote_skipped, compiled); /* its aliases' PUTs not even tried */
  kvjit_context_destroy(ctx);
}

/* 16 processes, one remote, one local dir, nothing there: each kernel is compiled once. */
static void test_sixteen_cold_processes(void **state) {
  (void)state;
  enum { PROCS = 16 };
  char dir[300], remote[600];
  fresh_dir(dir, sizeof dir);
  snprintf(remote, sizeof remote, "%s/cold", servers.nginx_url);
  int fds[PROCS][2];
  pid_t pids[PROCS];
  double t0 = now_ms();
  for (int i = 0; i < PROCS; i++) {
    assert_int_equal(pipe(fds[i]), 0);
    pids[i] = fork();
    if (pids[i] == 0) {
      close(fds[i][0]);
      kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
      o.cache_dir = dir;
      o.cache_path = "";
      o.log = 0;
      o.compile_mode = KVJIT_COMPILE_ALWAYS;
      o.remote_cache = remote;
      o.remote_read_write = 1;
      kvjit_context *ctx = NULL;
      uint64_t result[2] = {UINT64_MAX, 0};
      if (kvjit_context_create(&ctx, &o) == KVJIT_OK) {
        int ok = 1;
        for (int l = 0; l < LINES; l++) ok &= kvjit_prewarm_line(ctx, lines[l], NULL, NULL) == KVJIT_OK;
        kvjit_stats s = KVJIT_STATS_INIT;
        kvjit_context_stats(ctx, &s);
        result[0] = ok ? s.compiles : UINT64_MAX;
        result[1] = s.remote_hits;
        kvjit_context_destroy(ctx);
      }
      ssize_t w = write(fds[i][1], result, sizeof result);
      _exit(w == (ssize_t)sizeof result ? 0 : 1);
    }
    close(fds[i][1]);
  }
  uint64_t compiles = 0, hits = 0;
  for (int i = 0; i < PROCS; i++) {
    uint64_t result[2] = {UINT64_MAX, 0};
    ssize_t r = read(fds[i][0], result, sizeof result);
    close(fds[i][0]);
    int status = 0;
    waitpid(pids[i], &status, 0);
    assert_int_equal(r, (ssize_t)sizeof result);
    assert_true(result[0] != UINT64_MAX);
    compiles += result[0];
    hits += result[1];
  }
  printf("# 16 cold processes: %llu compiles (bundles) for %u kernels, %llu remote hits, %.0f ms\n",
         (unsigned long long)compiles, kernels_total, (unsigned long long)hits, now_ms() - t0);
  assert_int_equal(compiles, programs_total);
  expect_all_good(dir);
}

/* A server whose dir is empty misses a program the remote has only with other options: the
 * explanation names the remote's entry (through the hint a push leaves, cache/FORMAT.md). */
static void test_remote_miss_explained(void **state) {
  (void)state;
  char a[300], b[300], remote[600];
  fresh_dir(a, sizeof a);
  fresh_dir(b, sizeof b);
  snprintf(remote, sizeof remote, "%s/explain", servers.nginx_url);
  static const char *const names[] = {"k"};
  static const char *options[1];
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "fleet_explain.cu";
  d.source = "extern \"C\" __global__ void k(int *x) { x[0] = VALUE; }\n";
  d.kernels = names;
  d.num_kernels = 1;
  d.options = options;
  d.num_options = 1;
  d.arch = 90;
  options[0] = "-DVALUE=1";
  kvjit_context *build = client(a, remote, 1, KVJIT_COMPILE_ALWAYS);
  kvjit_program *p = NULL;
  assert_int_equal(kvjit_program_build(build, &p, NULL, &d), KVJIT_OK);
  assert_int_equal(stats_of(build).remote_writes, 1);
  kvjit_context_destroy(build);
  options[0] = "-DVALUE=2";
  kvjit_context *server = client(b, remote, 0, KVJIT_COMPILE_ALWAYS);
  assert_int_equal(kvjit_program_build(server, &p, NULL, &d), KVJIT_OK);
  kvjit_miss_info why;
  size_t n = 0;
  assert_int_equal(kvjit_context_misses(server, &why, 1, &n), KVJIT_OK);
  assert_int_equal(n, 1);
  assert_int_equal(why.cause, KVJIT_MISS_OPTIONS);
  if (strstr(why.message, "cached on the remote with other compile options") == NULL) fail_msg("%s", why.message);
  kvjit_stats s = stats_of(server);
  assert_int_equal(s.misses_options, 1);
  assert_int_equal(s.remote_errors + s.remote_timeouts, 0);
  kvjit_context_destroy(server);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_fleet FAULT_SERVER.py NGINX_DAV.sh\n");
    return 1;
  }
  fault_script = argv[1];
  nginx_script = argv[2];
  if (!remote_servers_available()) {
    fprintf(stderr, "test_fleet: no python3 or nginx: skipped\n");
    return 77;
  }
  unsetenv("KVJIT_REMOTE_CACHE");
  unsetenv("KVJIT_COMPILE");
  setenv("KVJIT_REMOTE_BACKOFF_MS", "60000", 1);
  if (remote_servers_start(&servers, fault_script, nginx_script, "fleet") != 0) {
    fprintf(stderr, "test_fleet: the servers did not start\n");
    remote_servers_stop(&servers, nginx_script);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_push_then_serve_with_never),
      cmocka_unit_test(test_remote_miss_explained),
      cmocka_unit_test(test_faults_are_bounded_and_counted),
      cmocka_unit_test(test_refused_writes_keep_reading),
      cmocka_unit_test(test_sixteen_cold_processes),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  remote_servers_stop(&servers, nginx_script);
  return failed;
}
