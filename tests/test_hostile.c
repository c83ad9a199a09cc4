/*
 * Issue 15, "hostile environments, round two", with real NVRTC compiles and no GPU:
 *  - special files at every path kvjit opens (entries in the writable dir and in read-only layers,
 *    the lock file, the quarantine dir, the manifest, fds 0-2 closed): each call returns promptly
 *    (an alarm kills a hang), nothing is read past what the format allows;
 *  - lying entries (checksums made good): a forged lowered name, a kernel list or target fields
 *    that disagree with the key, a payload of another arch or kind, modes and owners the loader
 *    refuses: each detected, quarantined, rebuilt once, counted, and reported by verify;
 *  - hygiene: stale temp files swept on the write path, a bounded quarantine that counts toward
 *    the budget, future mtimes evicted first, a read-only layer that is the writable dir;
 *  - paths, in a private temp root: empty means unset, relative dirs, a dir others can write.
 */
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "entry.h"
#include "context.h"
#include "internal_util.h"
#include "kvjit.h"
#include "safe_fs.h"
#include "test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "hostile");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmpdir);
}

/* Every case must return promptly: a hang is killed and fails the suite. */
static void guard(unsigned seconds) { alarm(seconds); }

static kvjit_context *ctx_on(const char *dir, const char *read_path, uint64_t max_bytes) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.cache_path = read_path ? read_path : "";
  o.log = 0;
  o.disable_cache = 0;
  o.lock_timeout_ms = 2000;
  o.cache_max_bytes = max_bytes;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  return ctx;
}

typedef struct program {
  char source[200];
  const char *names[1];
  kvjit_program_desc desc;
} program;

static void program_init(program *p, int n, int arch) {
  snprintf(p->source, sizeof p->source, "extern \"C\" __global__ void k(int *x) { x[threadIdx.x] = %d; }\n", n);
  p->names[0] = "k";
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "hostile.cu";
  d.source = p->source;
  d.kernels = p->names;
  d.num_kernels = 1;
  d.arch = arch;
  p->desc = d;
}

static kvjit_origin compile_ok(kvjit_context *ctx, int n) {
  program p;
  program_init(&p, n, 90);
  kvjit_origin origin = 0;
  kvjit_status st = kvjit_program_compile(ctx, &origin, &p.desc);
  if (st != KVJIT_OK) fail_msg("compile %d: %s: %s", n, kvjit_status_name(st), kvjit_last_error());
  return origin;
}

static kvjit_stats stats_of(kvjit_context *ctx) {
  kvjit_stats s = KVJIT_STATS_INIT;
  assert_int_equal(kvjit_context_stats(ctx, &s), KVJIT_OK);
  return s;
}

/* The entry file of program @p n (arch 90) under @p dir. */
static void entry_path(const char *dir, int n, char *out, size_t cap) {
  program p;
  program_init(&p, n, 90);
  kvjit_key_target t = {90, KVJIT_PAYLOAD_CUBIN, 0, 0, 0};
  assert_int_equal(kvjit_nvrtc_version(&t.nvrtc_major, &t.nvrtc_minor), KVJIT_OK);
  kvjit_key key;
  kvjit_key_compute(&key, &p.desc, &t);
  char hex[33];
  kvjit_key_hex(&key, hex);
  snprintf(out, cap, "%s/v2/%s.kvjit", dir, hex);
}

static int count_in(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.' && (needle == NULL || strstr(e->d_name, needle) != NULL);
  closedir(d);
  return n;
}

static int quarantined(const char *dir) {
  char q[600];
  snprintf(q, sizeof q, "%s/v2/quarantine", dir);
  return count_in(q, NULL);
}

static uint8_t *slurp(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  uint8_t *buf = malloc((size_t)st.st_size + 1);
  assert_non_null(buf);
  assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
  close(fd);
  *len = (size_t)st.st_size;
  return buf;
}

static void spit(const char *path, const void *data, size_t len) {
  char tmp[700];
  snprintf(tmp, sizeof tmp, "%s.new", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
  assert_int_equal(rename(tmp, path), 0);
}

static void make_sparse(const char *path, off_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  /* Starts like an entry, so only the size can give it away. */
  assert_int_equal(write(fd, KVJIT_ENTRY_MAGIC, 8), 8);
  assert_int_equal(ftruncate(fd, size), 0);
  close(fd);
}

static void make_socket(const char *path) {
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(s >= 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  assert_true(strlen(path) < sizeof a.sun_path);
  strcpy(a.sun_path, path);
  assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  close(s);
}

static long max_rss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* ---- special files ------------------------------------------------------------------------------ */

typedef enum { FIFO, SOCKET, DIRECTORY, SYMLINK, SPARSE, MODE_0666 } special_kind;
static const char *const special_names[] = {"fifo", "socket", "dir", "symlink", "sparse-1GiB", "mode-0666"};

static void plant(special_kind kind, const char *path, const char *elsewhere) {
  unlink(path);
  rmdir(path);
  switch (kind) {
  case FIFO: assert_int_equal(mkfifo(path, 0600), 0); break;
  case SOCKET: make_socket(path); break;
  case DIRECTORY: assert_int_equal(mkdir(path, 0700), 0); break;
  case SYMLINK: assert_int_equal(symlink(elsewhere, path), 0); break;
  case SPARSE: make_sparse(path, (off_t)1 << 30); break;
  case MODE_0666: {
    size_t len;
    uint8_t *good = slurp(elsewhere, &len);
    spit(path, good, len);
    free(good);
    assert_int_equal(chmod(path, 0666), 0);
    break;
  }
  }
}

static void test_special_files_at_entry_paths(void **state) {
  (void)state;
  char good_dir[512], good[700];
  snprintf(good_dir, sizeof good_dir, "%s/special-good", tmpdir);
  kvjit_context *ctx = ctx_on(good_dir, NULL, 0);
  assert_int_equal(compile_ok(ctx, 1), KVJIT_FROM_COMPILE);
  kvjit_context_destroy(ctx);
  entry_path(good_dir, 1, good, sizeof good);

  for (int kind = FIFO; kind <= MODE_0666; kind++) {
    guard(60);
    /* In the writable dir: refused without opening it, moved aside, rebuilt, counted once. */
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/special-w-%s", tmpdir, special_names[kind]);
    ctx = ctx_on(dir, NULL, 0);
    entry_path(dir, 1, path, sizeof path);
    plant((special_kind)kind, path, good);
    long rss = max_rss_kb();
    assert_int_equal(compile_ok(ctx, 1), KVJIT_FROM_COMPILE);
    kvjit_stats s = stats_of(ctx);
    if (s.bad_entries != 1 || s.compiles != 1) fail_msg("%s: %llu bad, %llu compiles", special_names[kind],
                                                         (unsigned long long)s.bad_entries, (unsigned long long)s.compiles);
    assert_true(max_rss_kb() - rss < 64 * 1024); /* the 1 GiB file was not read */
    assert_int_equal(compile_ok(ctx, 1), KVJIT_FROM_DISK);
    kvjit_context_destroy(ctx);

    /* In a read-only layer: skipped, reported once per cache however often it is looked up. */
    char layer[512], local[512];
    snprintf(layer, sizeof layer, "%s/special-ro-%s", tmpdir, special_names[kind]);
    snprintf(local, sizeof local, "%s/special-local-%s", tmpdir, special_names[kind]);
    ctx = ctx_on(layer, NULL, 0);
    kvjit_context_destroy(ctx);
    entry_path(layer, 1, path, sizeof path);
    plant((special_kind)kind, path, good);
    ctx = ctx_on(local, layer, 0);
    for (int i = 0; i < 3; i++) compile_ok(ctx, 1);
    s = stats_of(ctx);
    assert_int_equal(s.bad_entries, 1);
    assert_int_equal(s.compiles, 1);
    assert_int_equal(s.disk_hits, 2);
    /* A listing of the layer costs an lstat for the big one, not a read. */
    rss = max_rss_kb();
    uint64_t bad = 0;
    assert_int_equal(kvjit_cache_list(ctx, 1, 0, NULL, NULL, &bad), KVJIT_OK);
    assert_true(max_rss_kb() - rss < 64 * 1024);
    kvjit_context_destroy(ctx);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0); /* a read-only layer is never changed */
    alarm(0);
  }
}

static void test_special_lock_and_quarantine(void **state) {
  (void)state;
  guard(60);
  char dir[512], lock[700], elsewhere[700];
  snprintf(dir, sizeof dir, "%s/lock-fifo", tmpdir);
  snprintf(lock, sizeof lock, "%s/v2/lock", dir);
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", tmpdir);
  spit(elsewhere, "keep", 4);
  for (int kind = 0; kind < 2; kind++) {
    kvjit_context *ctx = ctx_on(dir, NULL, 0);
    unlink(lock);
    if (kind == 0) assert_int_equal(mkfifo(lock, 0600), 0);
    else assert_int_equal(symlink(elsewhere, lock), 0);
    /* No lock can be taken there: the compile goes private and the entry is not published. */
    program p;
    program_init(&p, 20 + kind, 90);
    kvjit_origin origin = 0;
    assert_int_equal(kvjit_program_compile(ctx, &origin, &p.desc), KVJIT_ERR_IO);
    assert_int_equal(origin, KVJIT_FROM_COMPILE);
    assert_non_null(strstr(kvjit_last_error(), "lock"));
    kvjit_context_destroy(ctx);
  }
  size_t len;
  uint8_t *kept = slurp(elsewhere, &len);
  assert_int_equal(len, 4); /* never written through the link */
  free(kept);

  /* The quarantine dir replaced by a FIFO or a link elsewhere: the bad entry is removed instead,
   * and nothing lands in the link's target. */
  for (int kind = 0; kind < 2; kind++) {
    char qdir[512], q[700], path[700], target[700];
    snprintf(qdir, sizeof qdir, "%s/quarantine-%d", tmpdir, kind);
    snprintf(q, sizeof q, "%s/v2/quarantine", qdir);
    snprintf(target, sizeof target, "%s/q-target-%d", tmpdir, kind);
    assert_int_equal(mkdir(target, 0700), 0);
    kvjit_context *ctx = ctx_on(qdir, NULL, 0);
    compile_ok(ctx, 30);
    assert_int_equal(rmdir(q), 0);
    if (kind == 0) assert_int_equal(mkfifo(q, 0600), 0);
    else assert_int_equal(symlink(target, q), 0);
    entry_path(qdir, 30, path, sizeof path);
    spit(path, "garbage", 7);
    assert_int_equal(compile_ok(ctx, 30), KVJIT_FROM_COMPILE);
    assert_int_equal(stats_of(ctx).bad_entries, 1);
    assert_int_equal(count_in(target, NULL), 0);
    assert_int_equal(compile_ok(ctx, 30), KVJIT_FROM_DISK);
    kvjit_context_destroy(ctx);
  }
  alarm(0);
}

/* stderr of the calling process into @p path; restore with the returned fd. */
static int stderr_to(const char *path) {
  fflush(stderr);
  int saved = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0 && saved >= 0);
  dup2(fd, 2);
  close(fd);
  return saved;
}

static void stderr_back(int saved) {
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
}

static int lines_in(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += needle == NULL || strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

static void test_special_manifest(void **state) {
  (void)state;
  guard(30);
  char fifo[512], dir[512], link[512], missing[512], good[512], err[512];
  snprintf(fifo, sizeof fifo, "%s/manifest-fifo", tmpdir);
  snprintf(dir, sizeof dir, "%s/manifest-dir", tmpdir);
  snprintf(link, sizeof link, "%s/manifest-link", tmpdir);
  snprintf(missing, sizeof missing, "%s/no/such/dir/manifest", tmpdir);
  snprintf(good, sizeof good, "%s/manifest-good", tmpdir);
  snprintf(err, sizeof err, "%s/manifest.err", tmpdir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(mkdir(dir, 0700), 0);
  spit(good, "", 0);
  assert_int_equal(symlink(good, link), 0);
  const char *paths[] = {fifo, dir, link, missing};
  const char *why[] = {"not a regular file", "Is a directory", "symbolic links", "No such file"};
  for (size_t i = 0; i < 4; i++) {
    kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
    o.disable_cache = 1;
    o.log = KVJIT_FROM_ENV;
    o.manifest_path = paths[i];
    kvjit_context *ctx = NULL;
    unsetenv("KVJIT_LOG");
    assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
    int saved = stderr_to(err);
    for (int k = 0; k < 3; k++) kvjit_context_record(ctx, "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 "
                                                         "index=int64 pdl=auto split=0 vec=16");
    stderr_back(saved);
    setenv("KVJIT_LOG", "0", 1);
    kvjit_context_destroy(ctx);
    /* One warning naming the path and the errno, however many lines were dropped. */
    if (lines_in(err, NULL) != 1 || lines_in(err, paths[i]) != 1 || lines_in(err, why[i]) != 1) {
      fail_msg("manifest %s: %d lines, expected one naming it and \"%s\"", paths[i], lines_in(err, NULL), why[i]);
    }
  }
  size_t len;
  free(slurp(good, &len));
  assert_int_equal(len, 0); /* not written through the link */
  alarm(0);
}

static void test_no_library_fd_on_stdio(void **state) {
  (void)state;
  char dir[512], file[600];
  snprintf(dir, sizeof dir, "%s/stdio", tmpdir);
  snprintf(file, sizeof file, "%s/stdio-file", tmpdir);
  spit(file, "x", 1);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(0);
    close(1);
    close(2);
    int fd = kvjit_open_regular(file, O_RDONLY, 0, NULL);
    if (fd < 3) _exit(1);
    close(fd);
    DIR *d = kvjit_open_dir(tmpdir);
    if (d == NULL || dirfd(d) < 3) _exit(2);
    closedir(d);
    kvjit_cache_config cc = {.write_dir = dir, .read_dirs = "", .max_bytes = 1 << 20, .lock_timeout_ms = 1000, .log = 0};
    kvjit_cache *cache = NULL;
    if (kvjit_cache_open(&cache, &cc) != KVJIT_OK || !kvjit_cache_writable(cache)) _exit(3);
    kvjit_key key = {1, 2};
    kvjit_cache_lock lock;
    if (!kvjit_cache_lock_key(cache, &key, &lock) || lock.fd < 3) _exit(4);
    /* 0, 1 and 2 are still closed: nothing of the library took them. */
    for (int i = 0; i < 3; i++) {
      if (fcntl(i, F_GETFD) != -1) _exit(5);
    }
    kvjit_cache_unlock_key(&lock);
    kvjit_cache_close(cache);
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- lying entries ------------------------------------------------------------------------------ */

/* An entry's fields as the encoder takes them, copied out of a parsed file so they can be edited. */
typedef struct forged {
  kvjit_entry_meta meta;
  char program[256], op[256], variant[600], compiler[64];
  char names[4][128], lowered[4][128];
  const char *name_ptrs[4], *lowered_ptrs[4];
  uint8_t *payload;
  size_t payload_len;
} forged;

static void copy_field(char *out, size_t cap, const char *s, size_t n) { snprintf(out, cap, "%.*s", (int)n, s); }

static void load_forged(const char *path, forged *f) {
  size_t len;
  uint8_t *buf = slurp(path, &len);
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, NULL, 1), KVJIT_OK);
  memset(f, 0, sizeof *f);
  copy_field(f->program, sizeof f->program, v.program, v.program_len);
  copy_field(f->op, sizeof f->op, v.op, v.op_len);
  copy_field(f->variant, sizeof f->variant, v.variant, v.variant_len);
  copy_field(f->compiler, sizeof f->compiler, v.compiler, v.compiler_len);
  assert_true(v.num_kernels <= 4);
  for (uint32_t i = 0; i < v.num_kernels; i++) {
    const char *n, *l;
    size_t nl, ll;
    kvjit_entry_kernel(&v, i, &n, &nl, &l, &ll);
    copy_field(f->names[i], sizeof f->names[i], n, nl);
    copy_field(f->lowered[i], sizeof f->lowered[i], l, ll);
    f->name_ptrs[i] = f->names[i];
    f->lowered_ptrs[i] = f->lowered[i];
  }
  f->payload_len = (size_t)v.payload_len;
  f->payload = malloc(f->payload_len + 1);
  memcpy(f->payload, v.payload, f->payload_len);
  f->meta = (kvjit_entry_meta){.key = v.key,
                               .content = v.content,
                               .target = v.target,
                               .created = v.created,
                               .program = f->program,
                               .op = f->op,
                               .variant = f->variant,
                               .compiler = f->compiler,
                               .num_kernels = v.num_kernels,
                               .kernels = f->name_ptrs,
                               .lowered = f->lowered_ptrs};
  free(buf);
}

/* Encode (both checksums made good) and put it in place of @p path. */
static void store_forged(const char *path, forged *f) {
  uint8_t *enc = NULL;
  size_t len = 0;
  assert_int_equal(kvjit_entry_encode(&enc, &len, &f->meta, f->payload, f->payload_len), KVJIT_OK);
  spit(path, enc, len);
  free(enc);
  free(f->payload);
  f->payload = NULL;
}

typedef void (*lie_fn)(forged *f, const char *other_arch_entry);

static void lie_lowered_name(forged *f, const char *o) {
  (void)o;
  snprintf(f->lowered[0], sizeof f->lowered[0], "_Z6forgedPi"); /* not in the key: only the payload can tell */
}
static void lie_two_kernels_own_key(forged *f, const char *o) {
  (void)o;
  snprintf(f->names[1], sizeof f->names[1], "k2");
  snprintf(f->lowered[1], sizeof f->lowered[1], "k2");
  f->name_ptrs[1] = f->names[1];
  f->lowered_ptrs[1] = f->lowered[1];
  f->meta.num_kernels = 2;
  kvjit_key_derive(&f->meta.key, &f->meta.target, 2, f->name_ptrs, &f->meta.content); /* a self-consistent header */
}
static void lie_two_kernels_asked_key(forged *f, const char *o) {
  lie_two_kernels_own_key(f, o);
  kvjit_key_derive(&f->meta.key, &f->meta.target, 1, f->name_ptrs, &f->meta.content); /* the key that was asked for */
}
static void lie_arch(forged *f, const char *o) {
  (void)o;
  f->meta.target.arch = 80;
}
static void lie_nvrtc(forged *f, const char *o) {
  (void)o;
  f->meta.target.nvrtc_minor += 1;
}
static void lie_kind(forged *f, const char *o) {
  (void)o;
  f->meta.target.kind = KVJIT_PAYLOAD_PTX;
}
static void lie_suffix(forged *f, const char *o) {
  (void)o;
  f->meta.target.suffix = 'a';
}
static void lie_payload_other_arch(forged *f, const char *other) {
  forged g;
  load_forged(other, &g);
  free(f->payload);
  f->payload = g.payload;
  f->payload_len = g.payload_len;
}
static void lie_payload_ptx(forged *f, const char *o) {
  (void)o;
  static const char ptx[] = ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k(\n.param .u64 p)\n{\nret;\n}\n";
  free(f->payload);
  f->payload = (uint8_t *)strdup(ptx);
  f->payload_len = sizeof ptx;
}
static void lie_payload_truncated_elf(forged *f, const char *o) {
  (void)o;
  f->payload_len = 200; /* an ELF header whose section table lies past the end */
}

typedef struct reasons {
  int bad;
  char reason[400];
} reasons;

static int collect_reason(const kvjit_cache_entry_info *e, void *user) {
  reasons *r = user;
  if (e->status != KVJIT_OK) {
    r->bad++;
    snprintf(r->reason, sizeof r->reason, "%s", e->reason ? e->reason : "");
  }
  return 0;
}

static void test_lying_entries(void **state) {
  (void)state;
  static const struct {
    const char *name;
    lie_fn lie;
    const char *why;
  } lies[] = {
      {"forged lowered name", lie_lowered_name, "lowered name"},
      {"two kernels, their own key", lie_two_kernels_own_key, "key mismatch"},
      {"two kernels, the key asked for", lie_two_kernels_asked_key, "derive its key"},
      {"arch", lie_arch, "derive its key"},
      {"NVRTC version", lie_nvrtc, "derive its key"},
      {"payload kind", lie_kind, "derive its key"},
      {"target suffix", lie_suffix, "derive its key"},
      {"a cubin of another arch", lie_payload_other_arch, "cubin for sm_80"},
      {"PTX in a cubin entry", lie_payload_ptx, "not an ELF"},
      {"a truncated ELF", lie_payload_truncated_elf, "section headers"},
  };
  /* The same program for sm_80: a payload to swap in. */
  char other_dir[512], other[700];
  snprintf(other_dir, sizeof other_dir, "%s/lie-sm80", tmpdir);
  kvjit_context *ctx = ctx_on(other_dir, NULL, 0);
  program p;
  program_init(&p, 40, 80);
  assert_int_equal(kvjit_program_compile(ctx, NULL, &p.desc), KVJIT_OK);
  kvjit_context_destroy(ctx);
  DIR *d = opendir(other_dir);
  assert_non_null(d);
  closedir(d);
  char v2[600];
  snprintf(v2, sizeof v2, "%s/v2", other_dir);
  d = opendir(v2);
  struct dirent *e;
  other[0] = '\0';
  while ((e = readdir(d)) != NULL) {
    if (strstr(e->d_name, ".kvjit")) snprintf(other, sizeof other, "%s/%s", v2, e->d_name);
  }
  closedir(d);
  assert_true(other[0] != '\0');

  for (size_t i = 0; i < sizeof lies / sizeof *lies; i++) {
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/lie-%zu", tmpdir, i);
    ctx = ctx_on(dir, NULL, 0);
    assert_int_equal(compile_ok(ctx, 40), KVJIT_FROM_COMPILE);
    entry_path(dir, 40, path, sizeof path);

    /* verify reports it (and why), and quarantines it. */
    forged f;
    load_forged(path, &f);
    lies[i].lie(&f, other);
    store_forged(path, &f);
    reasons r = {0, ""};
    uint64_t bad = 0;
    assert_int_equal(kvjit_cache_list(ctx, 0, 1, collect_reason, &r, &bad), KVJIT_OK);
    if (bad != 1 || r.bad != 1 || strstr(r.reason, lies[i].why) == NULL) {
      fail_msg("%s: verify found %llu bad (\"%s\"), expected 1 saying \"%s\"", lies[i].name, (unsigned long long)bad,
               r.reason, lies[i].why);
    }
    assert_int_equal(quarantined(dir), 1);
    assert_int_equal(compile_ok(ctx, 40), KVJIT_FROM_COMPILE);

    /* The loader's read path: detected, quarantined, rebuilt once, counted. */
    load_forged(path, &f);
    lies[i].lie(&f, other);
    store_forged(path, &f);
    kvjit_stats before = stats_of(ctx);
    assert_int_equal(compile_ok(ctx, 40), KVJIT_FROM_COMPILE);
    kvjit_stats after = stats_of(ctx);
    if (after.bad_entries - before.bad_entries != 1 || after.compiles - before.compiles != 1) {
      fail_msg("%s: %llu bad, %llu compiles", lies[i].name, (unsigned long long)(after.bad_entries - before.bad_entries),
               (unsigned long long)(after.compiles - before.compiles));
    }
    assert_int_equal(quarantined(dir), 2);
    assert_int_equal(compile_ok(ctx, 40), KVJIT_FROM_DISK);
    assert_int_equal(kvjit_cache_list(ctx, 0, 1, NULL, NULL, &bad), KVJIT_OK);
    assert_int_equal(bad, 0);
    kvjit_context_destroy(ctx);
  }
}

static void test_verify_applies_the_loaders_trust(void **state) {
  (void)state;
  char dir[512], path[700];
  snprintf(dir, sizeof dir, "%s/trust", tmpdir);
  kvjit_context *ctx = ctx_on(dir, NULL, 0);
  compile_ok(ctx, 50);
  entry_path(dir, 50, path, sizeof path);
  assert_int_equal(chmod(path, 0666), 0);
  reasons r = {0, ""};
  uint64_t bad = 0;
  assert_int_equal(kvjit_cache_list(ctx, 0, 1, collect_reason, &r, &bad), KVJIT_OK);
  assert_int_equal(bad, 1);
  assert_non_null(strstr(r.reason, "writable by other users"));
  assert_int_equal(compile_ok(ctx, 50), KVJIT_FROM_COMPILE);
  if (geteuid() == 0) { /* another owner: only root can make one */
    assert_int_equal(chown(path, 4321, 4321), 0);
    r.bad = 0;
    assert_int_equal(kvjit_cache_list(ctx, 0, 1, collect_reason, &r, &bad), KVJIT_OK);
    assert_int_equal(bad, 1);
    assert_non_null(strstr(r.reason, "owned by another user"));
    kvjit_stats before = stats_of(ctx);
    assert_int_equal(compile_ok(ctx, 50), KVJIT_FROM_COMPILE);
    assert_int_equal(stats_of(ctx).bad_entries - before.bad_entries, 0); /* verify moved it aside already */
  }
  kvjit_context_destroy(ctx);
}

typedef struct archs_seen {
  int entries, ptx;
} archs_seen;

static int count_archs(const kvjit_cache_entry_info *e, void *user) {
  archs_seen *a = user;
  a->entries++;
  a->ptx += (e->arch & KVJIT_TARGET_PTX) != 0;
  return 0;
}

static void test_real_payloads_pass_the_check(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/real", tmpdir);
  kvjit_context *ctx = ctx_on(dir, NULL, 0);
  /* Every arch this NVRTC builds, and the other target kinds: PTX, arch- and family-specific. */
  int targets[72];
  size_t n = 0;
  assert_int_equal(kvjit_nvrtc_archs(targets, 64, &n), KVJIT_OK);
  if (n > 64) n = 64;
  static const char *const others[] = {"compute_90", "sm_90a", "sm_100a", "sm_100f"};
  size_t ptx = 0;
  for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
    int code = 0;
    if (kvjit_parse_target(others[i], &code) == KVJIT_OK) {
      targets[n++] = code;
      ptx += (code & KVJIT_TARGET_PTX) != 0;
    }
  }
  for (size_t i = 0; i < n; i++) {
    program p;
    program_init(&p, 60, targets[i]);
    if (kvjit_program_compile(ctx, NULL, &p.desc) != KVJIT_OK) fail_msg("target %#x: %s", targets[i], kvjit_last_error());
  }
  archs_seen a = {0, 0};
  uint64_t bad = 9;
  assert_int_equal(kvjit_cache_list(ctx, 0, 1, count_archs, &a, &bad), KVJIT_OK);
  assert_int_equal(bad, 0);
  assert_int_equal(a.ptx, (int)ptx);
  assert_int_equal(a.entries, (int)n);
  assert_int_equal(stats_of(ctx).write_failures, 0);
  kvjit_context_destroy(ctx);
}

/* ---- hygiene ------------------------------------------------------------------------------------ */

static void age(const char *path, time_t when) {
  struct timespec t[2] = {{when, 0}, {when, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static void test_stale_temp_files_swept_on_the_write_path(void **state) {
  (void)state;
  char dir[512], stale[700], young[700];
  snprintf(dir, sizeof dir, "%s/sweep-write", tmpdir);
  kvjit_context *ctx = ctx_on(dir, NULL, 0);
  snprintf(stale, sizeof stale, "%s/v2/.tmp-00000000000000000000000000000000-99999-1", dir);
  snprintf(young, sizeof young, "%s/v2/.tmp-00000000000000000000000000000000-99999-2", dir);
  spit(stale, "partial", 7);
  spit(young, "partial", 7);
  age(stale, time(NULL) - 11 * 60);
  assert_int_equal(compile_ok(ctx, 70), KVJIT_FROM_COMPILE); /* no ledger yet: this write scans */
  assert_int_not_equal(access(stale, F_OK), 0);
  assert_int_equal(access(young, F_OK), 0); /* a live writer's file stays */
  kvjit_context_destroy(ctx);
}

static void test_quarantine_is_bounded_and_counted(void **state) {
  (void)state;
  char dir[512], q[600], f[800], path[700];
  snprintf(dir, sizeof dir, "%s/qbound", tmpdir);
  snprintf(q, sizeof q, "%s/v2/quarantine", dir);
  kvjit_context *ctx = ctx_on(dir, NULL, 0);
  compile_ok(ctx, 80);
  for (int i = 0; i < 20; i++) {
    snprintf(f, sizeof f, "%s/planted-%02d.bad", q, i);
    spit(f, "x", 1);
    age(f, time(NULL) - (i < 3 ? 2 * 86400 : 100 + i));
  }
  entry_path(dir, 80, path, sizeof path);
  spit(path, "garbage", 7);
  assert_int_equal(compile_ok(ctx, 80), KVJIT_FROM_COMPILE);
  assert_int_equal(count_in(q, NULL), 8); /* the newest 8, the new .bad among them */
  assert_int_equal(count_in(q, ".kvjit."), 1);
  snprintf(f, sizeof f, "%s/planted-00.bad", q);
  assert_int_not_equal(access(f, F_OK), 0);
  kvjit_context_destroy(ctx);

  /* Quarantined bytes count toward the budget and are the first to go. */
  snprintf(f, sizeof f, "%s/big.bad", q);
  static uint8_t big[200 << 10];
  spit(f, big, sizeof big);
  ctx = ctx_on(dir, NULL, 150 << 10);
  assert_int_equal(kvjit_cache_prune(ctx, 150 << 10, NULL, NULL), KVJIT_OK);
  assert_int_not_equal(access(f, F_OK), 0);
  assert_int_equal(compile_ok(ctx, 80), KVJIT_FROM_DISK); /* the entry itself fit */
  kvjit_context_destroy(ctx);
}

static void test_future_mtime_is_evicted_first(void **state) {
  (void)state;
  char dir[512], a[700], b[700], c[700];
  snprintf(dir, sizeof dir, "%s/future", tmpdir);
  kvjit_context *ctx = ctx_on(dir, NULL, 0);
  for (int i = 0; i < 3; i++) compile_ok(ctx, 90 + i);
  entry_path(dir, 90, a, sizeof a);
  entry_path(dir, 91, b, sizeof b);
  entry_path(dir, 92, c, sizeof c);
  age(a, time(NULL) - 3000);
  age(b, 4102444800); /* 2100-01-01 */
  age(c, time(NULL) - 1000);
  struct stat sa, sb, sc;
  stat(a, &sa);
  stat(b, &sb);
  stat(c, &sc);
  uint64_t total = (uint64_t)(sa.st_size + sb.st_size + sc.st_size);
  uint64_t removed = 0;
  assert_int_equal(kvjit_cache_prune(ctx, total - 1, &removed, NULL), KVJIT_OK);
  assert_int_equal(removed, 1);
  assert_int_not_equal(access(b, F_OK), 0); /* the one "from 2100" went first */
  assert_int_equal(access(a, F_OK), 0);
  kvjit_context_destroy(ctx);
}

static void test_layer_that_is_the_writable_dir(void **state) {
  (void)state;
  char dir[512], path[700], twice[1200];
  snprintf(dir, sizeof dir, "%s/same", tmpdir);
  kvjit_context *ctx = ctx_on(dir, NULL, 0);
  compile_ok(ctx, 100);
  kvjit_context_destroy(ctx);
  snprintf(twice, sizeof twice, "%s:%s/../same:%s", dir, dir, dir);
  ctx = ctx_on(dir, twice, 0);
  entry_path(dir, 100, path, sizeof path);
  /* One entry, listed once. */
  archs_seen seen = {0, 0};
  assert_int_equal(kvjit_cache_list(ctx, 1, 0, count_archs, &seen, NULL), KVJIT_OK);
  assert_int_equal(seen.entries, 1);
  /* A hit refreshes the LRU clock (it is found in the writable dir, not a "read-only" copy). */
  age(path, time(NULL) - 5000);
  assert_int_equal(compile_ok(ctx, 100), KVJIT_FROM_DISK);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(time(NULL) - st.st_mtime < 100);
  /* A bad one is counted once and quarantined. */
  spit(path, "garbage", 7);
  assert_int_equal(compile_ok(ctx, 100), KVJIT_FROM_COMPILE);
  assert_int_equal(stats_of(ctx).bad_entries, 1);
  assert_int_equal(quarantined(dir), 1);
  kvjit_context_destroy(ctx);
}

/* ---- paths -------------------------------------------------------------------------------------- */

/* In a child whose working dir is a private temp root: @p fn's exit status. */
static int in_root(int (*fn)(const char *root), const char *name) {
  char root[600];
  snprintf(root, sizeof root, "%s/root-%s", tmpdir, name);
  assert_int_equal(mkdir(root, 0700), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (chdir(root) != 0) _exit(90);
    unsetenv("KVJIT_CACHE_DIR");
    unsetenv("KVJIT_CACHE_PATH");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", root, 1);
    _exit(fn(root));
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

static int write_dir_of(const char *cache_dir, int read_only, char *out, size_t cap) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = cache_dir;
  o.cache_path = "";
  o.read_only = read_only;
  kvjit_context *ctx = NULL;
  if (kvjit_context_create(&ctx, &o) != KVJIT_OK) return -1;
  kvjit_cache_info info;
  kvjit_context_cache_info(ctx, &info);
  snprintf(out, cap, "%s", info.write_dir ? info.write_dir : info.degraded_reason ? info.degraded_reason : "?");
  int ok = info.write_dir != NULL;
  kvjit_context_destroy(ctx);
  return ok;
}

static int empty_means_unset(const char *root) {
  char want[700], got[700];
  setenv("KVJIT_LOG", "0", 1);
  /* cache_dir "" falls back to the environment, then to HOME: never "/v2". */
  snprintf(want, sizeof want, "%s/from-env", root);
  setenv("KVJIT_CACHE_DIR", want, 1);
  if (write_dir_of("", 0, got, sizeof got) != 1 || strcmp(got, want) != 0) return 1;
  setenv("KVJIT_CACHE_DIR", "", 1);
  snprintf(want, sizeof want, "%s/.cache/kvjit", root);
  if (write_dir_of("", 0, got, sizeof got) != 1 || strcmp(got, want) != 0) return 2;
  /* Relative ones are made absolute against the working dir. */
  setenv("KVJIT_CACHE_DIR", "rel/cache", 1);
  snprintf(want, sizeof want, "%s/rel/cache", root);
  if (write_dir_of(NULL, 0, got, sizeof got) != 1 || strcmp(got, want) != 0) return 3;
  snprintf(want, sizeof want, "%s/opt-rel", root);
  if (write_dir_of("opt-rel", 0, got, sizeof got) != 1 || strcmp(got, want) != 0) return 4;
  return 0;
}

static int relative_home_ignored(const char *root) {
  char err[700], got[700];
  snprintf(err, sizeof err, "%s/err", root);
  int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, 2) < 0) return 1;
  close(fd);
  unsetenv("KVJIT_LOG");
  setenv("HOME", "relative-home", 1);
  setenv("XDG_CACHE_HOME", "relative-xdg", 1);
  /* Read-only: nothing is created wherever the passwd entry's home is. */
  int r = write_dir_of(NULL, 1, got, sizeof got);
  fflush(stderr);
  if (strstr(got, "relative-") != NULL || got[0] != '/' || r < 0) return 2;
  if (lines_in(err, "HOME=\"relative-home\"") != 1 || lines_in(err, "XDG_CACHE_HOME=\"relative-xdg\"") != 1) return 3;
  if (access("relative-home", F_OK) == 0 || access("relative-xdg", F_OK) == 0) return 4;
  return 0;
}

static int shared_dir_untouched(const char *root) {
  char shared[700], v2[800], got[700], nested[800];
  setenv("KVJIT_LOG", "0", 1);
  snprintf(shared, sizeof shared, "%s/like-tmp", root);
  if (mkdir(shared, 0700) != 0 || chmod(shared, 01777) != 0) return 1;
  /* Refused before anything is made in it. */
  if (write_dir_of(shared, 0, got, sizeof got) != 0 || strstr(got, "other users") == NULL) return 2;
  snprintf(v2, sizeof v2, "%s/v2", shared);
  if (access(v2, F_OK) == 0) return 3;
  /* Read-only on a path that does not exist: reported as that path, and nothing is created. */
  snprintf(nested, sizeof nested, "%s/a/b/c", root);
  if (write_dir_of(nested, 1, got, sizeof got) != 1 || strcmp(got, nested) != 0) return 4;
  snprintf(nested, sizeof nested, "%s/a", root);
  if (access(nested, F_OK) == 0) return 5;
  return 0;
}

static void test_paths(void **state) {
  (void)state;
  struct stat st;
  int had_root_v2 = stat("/v2", &st) == 0;
  assert_int_equal(in_root(empty_means_unset, "empty"), 0);
  assert_int_equal(in_root(relative_home_ignored, "home"), 0);
  assert_int_equal(in_root(shared_dir_untouched, "shared"), 0);
  if (!had_root_v2) assert_int_not_equal(stat("/v2", &st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_special_files_at_entry_paths),
      cmocka_unit_test(test_special_lock_and_quarantine),
      cmocka_unit_test(test_special_manifest),
      cmocka_unit_test(test_no_library_fd_on_stdio),
      cmocka_unit_test(test_lying_entries),
      cmocka_unit_test(test_verify_applies_the_loaders_trust),
      cmocka_unit_test(test_real_payloads_pass_the_check),
      cmocka_unit_test(test_stale_temp_files_swept_on_the_write_path),
      cmocka_unit_test(test_quarantine_is_bounded_and_counted),
      cmocka_unit_test(test_future_mtime_is_evicted_first),
      cmocka_unit_test(test_layer_that_is_the_writable_dir),
      cmocka_unit_test(test_paths),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
