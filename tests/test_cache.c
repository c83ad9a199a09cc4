/* The disk cache with real NVRTC compiles (no GPU): corruption on disk, many processes at once,
 * unusable dirs, read-only layers, trust, eviction. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
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

#include "kvjit.h"
#include "kvjit_tools.h"
#include "test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "cache");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmpdir);
}

/* Options for a context on @p dir only: no env dirs, no log lines, the disk cache on. */
static kvjit_context_options isolated_options(const char *dir, const char *read_path) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = read_path ? read_path : "";
  o.log = 0;
  o.disable_cache = 0;
  return o;
}

static kvjit_context *ctx_at(const char *dir, const char *read_path) {
  kvjit_context_options o = isolated_options(dir, read_path);
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

static kvjit_program_desc desc_n(int n, char *buf, size_t cap) {
  snprintf(buf, cap, "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] = %d; }\n", n);
  static const char *names[] = {"k"};
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "cache_test.cu";
  d.source = buf;
  d.kernels = names;
  d.num_kernels = 1;
  d.arch = 90;
  return d;
}

static kvjit_origin compile_n(kvjit_context *ctx, int n) {
  char src[200];
  kvjit_program_desc d = desc_n(n, src, sizeof src);
  kvjit_origin origin = 0;
  assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_OK);
  return origin;
}

/* Path of the single entry in dir/v2 (asserts there is exactly one). */
static void only_entry(const char *dir, char *out, size_t cap) {
  char vdir[512];
  snprintf(vdir, sizeof vdir, "%s/v2", dir);
  DIR *d = opendir(vdir);
  assert_non_null(d);
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strstr(e->d_name, ".kvjit") && e->d_name[0] != '.') {
      snprintf(out, cap, "%s/%s", vdir, e->d_name);
      found++;
    }
  }
  closedir(d);
  assert_int_equal(found, 1);
}

static int count_files(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
  closedir(d);
  return n;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
}

static size_t read_bytes(const char *path, uint8_t *buf, size_t cap) {
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  ssize_t n = read(fd, buf, cap);
  close(fd);
  assert_true(n > 0);
  return (size_t)n;
}

typedef void (*damage_fn)(const char *entry, const char *other_entry);

static uint8_t big[1 << 20];

static void dmg_truncate(const char *p, const char *o) {
  (void)o;
  size_t n = read_bytes(p, big, sizeof big);
  write_bytes(p, big, n / 2);
}
static void dmg_flip(const char *p, const char *o) {
  (void)o;
  size_t n = read_bytes(p, big, sizeof big);
  big[n - 10] ^= 0xff;
  write_bytes(p, big, n);
}
static void dmg_zero(const char *p, const char *o) {
  (void)o;
  write_bytes(p, "", 0);
}
static void dmg_magic(const char *p, const char *o) {
  (void)o;
  size_t n = read_bytes(p, big, sizeof big);
  big[0] = 'Z';
  write_bytes(p, big, n);
}
static void dmg_version(const char *p, const char *o) {
  (void)o;
  size_t n = read_bytes(p, big, sizeof big);
  big[8] = 9;
  write_bytes(p, big, n);
}
static void dmg_other_key(const char *p, const char *o) {
  size_t n = read_bytes(o, big, sizeof big);
  write_bytes(p, big, n);
}
static void dmg_directory(const char *p, const char *o) {
  (void)o;
  assert_int_equal(unlink(p), 0);
  assert_int_equal(mkdir(p, 0700), 0);
}
static void dmg_symlink(const char *p, const char *o) {
  assert_int_equal(unlink(p), 0);
  assert_int_equal(symlink(o, p), 0); /* a link, even to a good file, is never followed */
}

static void test_bad_entries_are_quarantined_and_rebuilt(void **state) {
  (void)state;
  static const struct {
    const char *name;
    damage_fn damage;
  } cases[] = {{"truncated", dmg_truncate}, {"flipped", dmg_flip},          {"zero-length", dmg_zero},
               {"magic", dmg_magic},        {"version", dmg_version},       {"other-key", dmg_other_key},
               {"directory", dmg_directory}, {"symlink", dmg_symlink}};
  /* An entry of another key, to rename into place and to link to. */
  char other_dir[512], other[600];
  snprintf(other_dir, sizeof other_dir, "%s/other", tmpdir);
  kvjit_context *octx = ctx_at(other_dir, NULL);
  compile_n(octx, 999);
  kvjit_context_destroy(octx);
  only_entry(other_dir, other, sizeof other);

  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char dir[512], entry[600], q[600];
    snprintf(dir, sizeof dir, "%s/bad-%s", tmpdir, cases[i].name);
    kvjit_context *ctx = ctx_at(dir, NULL);
    assert_int_equal(compile_n(ctx, 1), KVJIT_FROM_COMPILE);
    only_entry(dir, entry, sizeof entry);
    cases[i].damage(entry, other);
    /* Next use: detected, counted, moved aside, recompiled; never fatal. */
    assert_int_equal(compile_n(ctx, 1), KVJIT_FROM_COMPILE);
    kvjit_stats s = KVJIT_STATS_INIT;
    kvjit_context_stats(ctx, &s);
    if (s.bad_entries != 1) fail_msg("case %s: bad_entries %llu", cases[i].name, (unsigned long long)s.bad_entries);
    assert_int_equal(s.compiles, 2);
    snprintf(q, sizeof q, "%s/v2/quarantine", dir);
    assert_int_equal(count_files(q, ".bad"), 1);
    /* And the rebuilt entry is good again. */
    assert_int_equal(compile_n(ctx, 1), KVJIT_FROM_DISK);
    uint64_t bad = 9;
    assert_int_equal(kvjit_cache_list(ctx, 0, 1, NULL, NULL, &bad), KVJIT_OK);
    assert_int_equal(bad, 0);
    kvjit_context_destroy(ctx);
  }
}

static void test_processes_compile_each_key_once(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/race", tmpdir);
  enum { PROCS = 8 };
  int pipefd[2];
  assert_int_equal(pipe(pipefd), 0);
  pid_t pids[PROCS];
  for (int p = 0; p < PROCS; p++) {
    pids[p] = fork();
    assert_true(pids[p] >= 0);
    if (pids[p] == 0) {
      close(pipefd[1]);
      char go;
      if (read(pipefd[0], &go, 1) < 0) _exit(90); /* EOF: all start together */
      kvjit_context *ctx = NULL;
      kvjit_context_options o = isolated_options(dir, NULL);
      if (kvjit_context_create(&ctx, &o) != KVJIT_OK) _exit(91);
      int compiled = 0;
      for (int k = 0; k < 4; k++) {
        char src[200];
        kvjit_program_desc d = desc_n(100 + k, src, sizeof src);
        kvjit_origin origin = 0;
        if (kvjit_program_compile(ctx, &origin, &d) != KVJIT_OK) _exit(92);
        compiled += origin == KVJIT_FROM_COMPILE;
      }
      kvjit_context_destroy(ctx);
      _exit(compiled);
    }
  }
  close(pipefd[0]);
  close(pipefd[1]); /* EOF releases every child at once */
  int total = 0;
  for (int p = 0; p < PROCS; p++) {
    int status = 0;
    assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
    assert_true(WIFEXITED(status));
    assert_true(WEXITSTATUS(status) <= 4);
    total += WEXITSTATUS(status);
  }
  assert_int_equal(total, 4); /* 4 keys, each compiled exactly once across 8 processes */
  char vdir[600];
  snprintf(vdir, sizeof vdir, "%s/v2", dir);
  assert_int_equal(count_files(vdir, ".tmp-"), 0);
  assert_int_equal(count_files(vdir, ".kvjit"), 4);
}

/* A child that takes write locks on bytes [start, start + len) of @p lockpath (len 0: to the end)
 * and then hangs until killed. */
static pid_t hang_holding(const char *lockpath, off_t start, off_t len) {
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t holder = fork();
  assert_true(holder >= 0);
  if (holder == 0) {
    close(go[0]);
    int fd = open(lockpath, O_RDWR | O_CREAT, 0600);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0) _exit(1);
    if (write(go[1], "x", 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(go[1]);
  char c;
  ssize_t n = read(go[0], &c, 1);
  close(go[0]);
  if (n != 1) {
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    fail_msg("lock holder did not start");
  }
  return holder;
}

static void test_stale_lock_holder_does_not_hang(void **state) {
  (void)state;
  char dir[512], lockpath[600];
  snprintf(dir, sizeof dir, "%s/stale", tmpdir);
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_context_destroy(ctx);
  /* Hold every per-key byte of the lock file from another process that then hangs: the wait is
   * bounded, and the entry is still published (the dir lock is free). */
  snprintf(lockpath, sizeof lockpath, "%s/v2/lock", dir);
  pid_t holder = hang_holding(lockpath, 0, 1 << 20);
  kvjit_context_options o = isolated_options(dir, NULL);
  o.lock_timeout_ms = 300;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  char src[200];
  kvjit_program_desc d = desc_n(7, src, sizeof src);
  kvjit_origin origin = 0;
  kvjit_status st = kvjit_program_compile(ctx, &origin, &d);
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  assert_int_equal(st, KVJIT_OK);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_int_equal(s.lock_timeouts, 1);
  assert_int_equal(s.disk_writes, 1);
  /* Killed holder: its lock is gone with it; the next key locks at once. */
  assert_int_equal(compile_n(ctx, 8), KVJIT_FROM_COMPILE);
  kvjit_context_stats(ctx, &s);
  assert_int_equal(s.lock_timeouts, 1);

  /* A hung holder of the dir lock: publication waits a bounded time, then says it could not
   * write (the compile itself succeeded). */
  holder = hang_holding(lockpath, 1 << 20, 1);
  d = desc_n(9, src, sizeof src);
  st = kvjit_program_compile(ctx, &origin, &d);
  char detail[512];
  snprintf(detail, sizeof detail, "%s", kvjit_last_error());
  kill(holder, SIGKILL);
  waitpid(holder, NULL, 0);
  assert_int_equal(st, KVJIT_ERR_IO);
  assert_int_equal(origin, KVJIT_FROM_COMPILE);
  assert_non_null(strstr(detail, "dir lock"));
  kvjit_context_stats(ctx, &s);
  assert_int_equal(s.write_failures, 1);
  assert_int_equal(compile_n(ctx, 9), KVJIT_FROM_COMPILE); /* and publishes once the holder is gone */
  assert_int_equal(compile_n(ctx, 9), KVJIT_FROM_DISK);
  kvjit_context_destroy(ctx);
}

static void test_unusable_dirs_degrade_to_memory_only(void **state) {
  (void)state;
  char file[512], under_file[600], longpath[5000];
  snprintf(file, sizeof file, "%s/a-file", tmpdir);
  write_bytes(file, "x", 1);
  snprintf(under_file, sizeof under_file, "%s/sub", file);
  memset(longpath, 'a', sizeof longpath - 1);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  const char *places[] = {file, under_file, "/proc/self/kvjit-cache", longpath};
  for (size_t i = 0; i < sizeof places / sizeof *places; i++) {
    kvjit_context *ctx = ctx_at(places[i], NULL);
    kvjit_cache_info info;
    kvjit_context_cache_info(ctx, &info);
    assert_null(info.write_dir);
    assert_non_null(info.degraded_reason);
    /* Still compiles, but says that the result is not cached. */
    char src[200];
    kvjit_program_desc d = desc_n(3, src, sizeof src);
    kvjit_origin origin = 0;
    assert_int_equal(kvjit_program_compile(ctx, &origin, &d), KVJIT_ERR_IO);
    assert_int_equal(origin, KVJIT_FROM_COMPILE);
    assert_non_null(strstr(kvjit_last_error(), "not cached"));
    kvjit_context_destroy(ctx);
  }
}

static void test_shared_writable_dir_is_not_trusted(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/shared", tmpdir);
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  kvjit_context *ctx = ctx_at(dir, NULL);
  kvjit_cache_info info;
  kvjit_context_cache_info(ctx, &info);
  assert_null(info.write_dir);
  assert_non_null(strstr(info.degraded_reason, "other users"));
  kvjit_context_destroy(ctx);
  /* Explicitly allowed. */
  kvjit_context_options o = isolated_options(dir, NULL);
  o.allow_shared_dirs = 1;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  kvjit_context_cache_info(ctx, &info);
  assert_non_null(info.write_dir);
  kvjit_context_destroy(ctx);
}

static void test_read_only_layer_is_searched_first(void **state) {
  (void)state;
  char image[512], local[512];
  snprintf(image, sizeof image, "%s/image", tmpdir);
  snprintf(local, sizeof local, "%s/local", tmpdir);
  kvjit_context *ctx = ctx_at(image, NULL);
  compile_n(ctx, 11);
  kvjit_context_destroy(ctx);
  char path[1100];
  snprintf(path, sizeof path, "/nonexistent/layer:%s", image);
  ctx = ctx_at(local, path);
  assert_int_equal(compile_n(ctx, 11), KVJIT_FROM_DISK); /* from the image layer */
  assert_int_equal(compile_n(ctx, 12), KVJIT_FROM_COMPILE);
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  assert_int_equal(s.disk_writes, 1); /* only the new one goes to the local dir */
  kvjit_context_destroy(ctx);
}

static void test_eviction_keeps_the_budget(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/budget", tmpdir);
  kvjit_context *ctx = ctx_at(dir, NULL);
  for (int i = 0; i < 6; i++) compile_n(ctx, 200 + i);
  uint64_t total = 0;
  kvjit_status st = kvjit_cache_list(ctx, 0, 0, NULL, NULL, NULL);
  assert_int_equal(st, KVJIT_OK);
  uint64_t removed = 0, removed_bytes = 0;
  /* Make entry 200 the most recently used: it must survive a prune to about half. */
  sleep(1);
  assert_int_equal(compile_n(ctx, 200), KVJIT_FROM_DISK);
  char vdir[600];
  snprintf(vdir, sizeof vdir, "%s/v2", dir);
  DIR *d = opendir(vdir);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strstr(e->d_name, ".kvjit")) continue;
    struct stat stt;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", vdir, e->d_name);
    stat(p, &stt);
    total += (uint64_t)stt.st_size;
  }
  closedir(d);
  assert_int_equal(kvjit_cache_prune(ctx, total / 2, &removed, &removed_bytes), KVJIT_OK);
  assert_true(removed >= 3);
  assert_true(total - removed_bytes <= total / 2);
  assert_int_equal(compile_n(ctx, 200), KVJIT_FROM_DISK);
  uint64_t cleared = 0;
  assert_int_equal(kvjit_cache_clear(ctx, &cleared), KVJIT_OK);
  assert_int_equal(cleared, 6 - removed);
  assert_int_equal(count_files(vdir, ".kvjit"), 0);
  kvjit_context_destroy(ctx);

  /* The automatic budget: a context whose budget fits about two entries keeps about two. */
  kvjit_context_options o = isolated_options(dir, NULL);
  o.cache_max_bytes = (total / 6) * 2 + (total / 12);
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  for (int i = 0; i < 6; i++) compile_n(ctx, 300 + i);
  assert_true(count_files(vdir, ".kvjit") <= 2);
  kvjit_stats s = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s);
  assert_true(s.evictions >= 4);
  kvjit_context_destroy(ctx);
}

static void test_stale_temp_files_are_swept(void **state) {
  (void)state;
  char dir[512], tmp[700];
  snprintf(dir, sizeof dir, "%s/sweep", tmpdir);
  kvjit_context *ctx = ctx_at(dir, NULL);
  snprintf(tmp, sizeof tmp, "%s/v2/.tmp-deadbeef-1-1", dir);
  write_bytes(tmp, "partial", 7);
  struct timespec old[2] = {{1000, 0}, {1000, 0}};
  assert_int_equal(utimensat(AT_FDCWD, tmp, old, 0), 0);
  assert_int_equal(kvjit_cache_prune(ctx, UINT64_MAX, NULL, NULL), KVJIT_OK);
  assert_int_not_equal(access(tmp, F_OK), 0);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_entries_are_quarantined_and_rebuilt),
      cmocka_unit_test(test_processes_compile_each_key_once),
      cmocka_unit_test(test_stale_lock_holder_does_not_hang),
      cmocka_unit_test(test_unusable_dirs_degrade_to_memory_only),
      cmocka_unit_test(test_shared_writable_dir_is_not_trusted),
      cmocka_unit_test(test_read_only_layer_is_searched_first),
      cmocka_unit_test(test_eviction_keeps_the_budget),
      cmocka_unit_test(test_stale_temp_files_are_swept),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
