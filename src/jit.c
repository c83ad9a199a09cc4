/*
 * The context: configuration, the in-memory program table (compile once per key, failures
 * remembered), disk cache and NVRTC behind it, driver loading, the lock-free fast table for op hot
 * paths, counters, and launches.
 */
#include "jit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "entry.h"
#include "compile.h"
#include "fast_table.h"
#include "pack.h"
#include "status.h"

#define PROGRAM_BUCKETS 256u
#define DEFAULT_MAX_BYTES (2ull << 30)
#define DEFAULT_LOCK_TIMEOUT_MS 60000u

typedef enum program_state { PROGRAM_BUILDING, PROGRAM_READY, PROGRAM_FAILED } program_state;

struct kvjit_program {
  kvjit_key key;
  char key_hex[33];
  char *name;
  int arch; /* negative: PTX finished by the driver */
  program_state state;
  kvjit_status status; /* of a failed build */
  char *error;         /* last-error line of a failed build */
  char *log;
  CUlibrary library;
  size_t num_kernels;
  struct kvjit_kernel *kernels;
  char **names;
  char **lowered;
  struct kvjit_program *next;
};

struct kvjit_context {
  kvjit_cache *cache;
  int log;
  char *manifest_path;
  pthread_mutex_t lock;
  pthread_cond_t built; /* a program left PROGRAM_BUILDING */
  struct kvjit_program *buckets[PROGRAM_BUCKETS];
  kvjit_fast_table *fast;
  atomic_uint_fast64_t memory_hits, disk_hits, compiles, compile_failures, compile_ns, loads, load_bad;
};

/* ---- context ------------------------------------------------------------------------------ */

static int env_flag(const char *name, int fallback) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == '\0') return fallback;
  if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on")) return 1;
  if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off")) return 0;
  return fallback;
}

/* "500M", "2G", "1048576" -> bytes; 0 when malformed. */
static uint64_t parse_size(const char *s) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return 0;
  uint64_t mul = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1ull << 10; end++; break;
    case 'm': case 'M': mul = 1ull << 20; end++; break;
    case 'g': case 'G': mul = 1ull << 30; end++; break;
    case 't': case 'T': mul = 1ull << 40; end++; break;
    default: return 0;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end != '\0') return 0;
  return (uint64_t)v * mul;
}

kvjit_status kvjit_context_create(kvjit_context **out, const kvjit_context_options *options) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  kvjit_context_options defaults = KVJIT_CONTEXT_OPTIONS_INIT;
  if (options == NULL) options = &defaults;
  if (options->version != KVJIT_CONTEXT_OPTIONS_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "options->version: %u, expected %u (use KVJIT_CONTEXT_OPTIONS_INIT)",
                      options->version, KVJIT_CONTEXT_OPTIONS_VERSION);
  }
  kvjit_context *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "context: out of memory");
  pthread_mutex_init(&ctx->lock, NULL);
  pthread_cond_init(&ctx->built, NULL);
  if (kvjit_fast_table_create(&ctx->fast) != KVJIT_OK) {
    kvjit_context_destroy(ctx);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "context: out of memory");
  }

  const char *log_env = getenv("KVJIT_LOG");
  ctx->log = options->log != KVJIT_FROM_ENV ? options->log : (log_env && log_env[0] ? env_flag("KVJIT_LOG", 1) : -1);

  kvjit_cache_config cc;
  memset(&cc, 0, sizeof cc);
  cc.write_dir = options->cache_dir;
  cc.read_dirs = options->cache_path;
  cc.disabled = options->disable_cache != KVJIT_FROM_ENV ? options->disable_cache : env_flag("KVJIT_CACHE_DISABLE", 0);
  cc.max_bytes = options->cache_max_bytes;
  if (cc.max_bytes == 0 && getenv("KVJIT_CACHE_MAX_SIZE")) cc.max_bytes = parse_size(getenv("KVJIT_CACHE_MAX_SIZE"));
  if (cc.max_bytes == 0) cc.max_bytes = DEFAULT_MAX_BYTES;
  cc.lock_timeout_ms = options->lock_timeout_ms;
  if (cc.lock_timeout_ms == 0 && getenv("KVJIT_LOCK_TIMEOUT_MS")) {
    cc.lock_timeout_ms = (unsigned)strtoul(getenv("KVJIT_LOCK_TIMEOUT_MS"), NULL, 10);
  }
  if (cc.lock_timeout_ms == 0) cc.lock_timeout_ms = DEFAULT_LOCK_TIMEOUT_MS;
  cc.allow_shared = options->allow_shared_dirs != KVJIT_FROM_ENV ? options->allow_shared_dirs
                                                                 : env_flag("KVJIT_CACHE_ALLOW_SHARED", 0);
  cc.log = ctx->log;
  kvjit_status st = kvjit_cache_open(&ctx->cache, &cc);
  if (st != KVJIT_OK) {
    kvjit_context_destroy(ctx);
    return st;
  }
  const char *manifest = options->manifest_path ? options->manifest_path : getenv("KVJIT_MANIFEST");
  if (manifest && manifest[0]) {
    ctx->manifest_path = strdup(manifest);
    if (ctx->manifest_path == NULL) {
      kvjit_context_destroy(ctx);
      return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "context: out of memory");
    }
  }
  kvjit_clear_error();
  *out = ctx;
  return KVJIT_OK;
}

static void program_free(kvjit_program *p, const kvjit_driver *drv) {
  if (p->library && drv) drv->cuLibraryUnload(p->library);
  for (size_t i = 0; i < p->num_kernels; i++) {
    if (p->names) free(p->names[i]);
    if (p->lowered) free(p->lowered[i]);
  }
  free(p->names);
  free(p->lowered);
  free(p->kernels);
  free(p->name);
  free(p->error);
  free(p->log);
  free(p);
}

void kvjit_context_destroy(kvjit_context *ctx) {
  if (ctx == NULL) return;
  const kvjit_driver *drv = NULL;
  int any_loaded = 0;
  for (size_t b = 0; b < PROGRAM_BUCKETS; b++) {
    for (kvjit_program *p = ctx->buckets[b]; p; p = p->next) any_loaded |= p->library != NULL;
  }
  if (any_loaded && kvjit_driver_get(&drv) != KVJIT_OK) drv = NULL;
  for (size_t b = 0; b < PROGRAM_BUCKETS; b++) {
    kvjit_program *p = ctx->buckets[b];
    while (p) {
      kvjit_program *next = p->next;
      program_free(p, drv);
      p = next;
    }
  }
  kvjit_fast_table_destroy(ctx->fast);
  kvjit_cache_close(ctx->cache);
  free(ctx->manifest_path);
  pthread_cond_destroy(&ctx->built);
  pthread_mutex_destroy(&ctx->lock);
  free(ctx);
}

kvjit_status kvjit_context_stats(const kvjit_context *ctx, kvjit_stats *out) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  const kvjit_cache_counters *cc = kvjit_cache_get_counters(ctx->cache);
  memset(out, 0, sizeof *out);
  out->memory_hits = atomic_load(&ctx->memory_hits);
  out->disk_hits = atomic_load(&ctx->disk_hits);
  out->compiles = atomic_load(&ctx->compiles);
  out->compile_failures = atomic_load(&ctx->compile_failures);
  out->compile_ns = atomic_load(&ctx->compile_ns);
  out->bad_entries = atomic_load(&cc->bad_entries) + atomic_load(&ctx->load_bad);
  out->disk_writes = atomic_load(&cc->disk_writes);
  out->write_failures = atomic_load(&cc->write_failures);
  out->lock_waits = atomic_load(&cc->lock_waits);
  out->lock_timeouts = atomic_load(&cc->lock_timeouts);
  out->loads = atomic_load(&ctx->loads);
  out->evictions = atomic_load(&cc->evictions);
  return KVJIT_OK;
}

kvjit_status kvjit_context_cache_info(const kvjit_context *ctx, kvjit_cache_info *out) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  kvjit_cache_get_info(ctx->cache, out);
  return KVJIT_OK;
}

int kvjit_context_logging(const kvjit_context *ctx) { return ctx->log == 1; }

void kvjit_context_record(kvjit_context *ctx, const char *line) {
  if (ctx->manifest_path == NULL) return;
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "%s\n", line);
  if (n <= 0 || (size_t)n >= sizeof buf) return;
  /* One write() with O_APPEND: lines from concurrent processes never interleave. */
  int fd = open(ctx->manifest_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, buf, (size_t)n);
  (void)w;
  close(fd);
}

/* ---- arch parsing -------------------------------------------------------------------------- */

kvjit_status kvjit_parse_arch(const char *text, int *sm) {
  if (text == NULL || sm == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "arch text or sm is NULL");
  const char *p = text;
  if (!strncmp(p, "sm_", 3) || !strncmp(p, "compute_", 8)) p += p[0] == 's' ? 3 : 8;
  int major = 0, minor = 0, digits = 0;
  if (p[0] >= '1' && p[0] <= '9' && p[1] == '.' && p[2] >= '0' && p[2] <= '9' && p[3] == '\0') {
    *sm = (p[0] - '0') * 10 + (p[2] - '0');
    return KVJIT_OK;
  }
  while (p[digits] >= '0' && p[digits] <= '9') digits++;
  const char *rest = p + digits;
  if ((digits == 2 || digits == 3) && (rest[0] == '\0' || ((rest[0] == 'a' || rest[0] == 'f') && rest[1] == '\0'))) {
    int v = atoi(p);
    major = v / 10;
    minor = v % 10;
    if (major >= 3) {
      *sm = major * 10 + minor;
      return KVJIT_OK;
    }
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "arch \"%s\": expected sm_XY (e.g. sm_90), XY or X.Y", text);
}

/* ---- program table ------------------------------------------------------------------------- */

static kvjit_status validate_desc(const kvjit_program_desc *desc) {
  if (desc == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc is NULL");
  if (desc->version != KVJIT_PROGRAM_DESC_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->version: %u, expected %u (use KVJIT_PROGRAM_DESC_INIT)",
                      desc->version, KVJIT_PROGRAM_DESC_VERSION);
  }
  if (desc->name == NULL || desc->name[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->name: empty");
  if (desc->source == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->source: NULL");
  if (desc->num_options > 0 && desc->options == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options: NULL with num_options %zu", desc->num_options);
  }
  for (size_t i = 0; i < desc->num_options; i++) {
    const char *o = desc->options[i];
    if (o == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu]: NULL", i);
    if (!strncmp(o, "--gpu-architecture", 18) || !strncmp(o, "-arch", 5)) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu] \"%s\": set the target with desc->arch", i, o);
    }
  }
  if (desc->num_headers > 0 && desc->headers == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->headers: NULL with num_headers %zu", desc->num_headers);
  }
  for (size_t i = 0; i < desc->num_headers; i++) {
    if (desc->headers[i].name == NULL || desc->headers[i].source == NULL) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->headers[%zu]: NULL name or source", i);
    }
  }
  if (desc->num_kernels == 0 || desc->kernels == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->kernels: at least one kernel name is needed");
  }
  for (size_t i = 0; i < desc->num_kernels; i++) {
    if (desc->kernels[i] == NULL || desc->kernels[i][0] == '\0') {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->kernels[%zu]: empty", i);
    }
  }
  if (desc->arch < 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->arch: %d", desc->arch);
  return KVJIT_OK;
}

static kvjit_program *table_find(kvjit_context *ctx, const kvjit_key *key) {
  for (kvjit_program *p = ctx->buckets[key->low % PROGRAM_BUCKETS]; p; p = p->next) {
    if (kvjit_key_equal(&p->key, key)) return p;
  }
  return NULL;
}

/* Write a fresh compile to the disk cache (best effort: a failure leaves it memory-only). */
static void publish(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_program_label *label,
                    const kvjit_key_target *target, const kvjit_key *key, const kvjit_compiled *compiled) {
  if (!kvjit_cache_writable(ctx->cache)) return;
  char compiler[32];
  snprintf(compiler, sizeof compiler, "NVRTC %d.%d", target->nvrtc_major, target->nvrtc_minor);
  kvjit_entry_meta meta = {.key = *key,
                           .target = *target,
                           .created = (int64_t)time(NULL),
                           .program = desc->name,
                           .op = label && label->op ? label->op : "",
                           .variant = label && label->variant ? label->variant : "",
                           .compiler = compiler,
                           .num_kernels = desc->num_kernels,
                           .kernels = desc->kernels,
                           .lowered = (const char *const *)compiled->lowered};
  kvjit_key_content(&meta.content, desc);
  uint8_t *buf = NULL;
  size_t len = 0;
  if (kvjit_entry_encode(&buf, &len, &meta, compiled->payload, compiled->payload_len) == KVJIT_OK) {
    kvjit_cache_write(ctx->cache, key, buf, len);
    free(buf);
  }
}

/* Get the payload for key: disk, or compile (under the cross-process lock) and publish. */
static kvjit_status obtain_payload(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_program_label *label,
                                   const kvjit_key_target *target,
                                   const kvjit_key *key, uint8_t **file, kvjit_entry_view *view,
                                   kvjit_compiled *compiled, kvjit_origin *origin) {
  if (kvjit_cache_read(ctx->cache, key, file, view) == KVJIT_OK) {
    *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  kvjit_cache_lock lock;
  int locked = kvjit_cache_lock_key(ctx->cache, key, &lock);
  /* Whoever held the lock may have published it meanwhile. */
  if (kvjit_cache_read(ctx->cache, key, file, view) == KVJIT_OK) {
    kvjit_cache_unlock_key(&lock);
    *origin = KVJIT_FROM_DISK;
    return KVJIT_OK;
  }
  kvjit_status st = kvjit_nvrtc_compile(compiled, desc, target);
  if (st == KVJIT_OK) {
    atomic_fetch_add(&ctx->compiles, 1);
    atomic_fetch_add(&ctx->compile_ns, compiled->ns);
    if (ctx->log == 1) {
      kvjit_log_line("compiled %s for %s_%d in %.1f ms", desc->name, target->kind == KVJIT_PAYLOAD_CUBIN ? "sm" : "compute",
                     target->arch, (double)compiled->ns / 1e6);
    }
    publish(ctx, desc, label, target, key, compiled);
  } else {
    atomic_fetch_add(&ctx->compile_failures, 1);
    if (ctx->log == 1) kvjit_log_line("compile of %s failed: %s", desc->name, kvjit_last_error());
  }
  if (locked) kvjit_cache_unlock_key(&lock);
  *origin = KVJIT_FROM_COMPILE;
  return st;
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* Fill a BUILDING program: payload from disk or NVRTC, then load it. Runs without ctx->lock. */
static kvjit_status build_program(kvjit_context *ctx, kvjit_program *p, const kvjit_program_desc *desc,
                                  const kvjit_program_label *label,
                                  const kvjit_key_target *target, int ptx_fallback, const kvjit_driver *drv,
                                  kvjit_origin *origin) {
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  memset(&compiled, 0, sizeof compiled);
  kvjit_status st;
  int retried = 0;
again:
  st = obtain_payload(ctx, desc, label, target, &p->key, &file, &view, &compiled, origin);
  if (compiled.log) {
    const char *note = ptx_fallback ? "kvjit: the device is newer than NVRTC knows; built PTX for the newest arch "
                                      "NVRTC supports, finished by the driver\n"
                                    : "";
    free(p->log);
    size_t n = strlen(note) + strlen(compiled.log) + 1;
    p->log = malloc(n);
    if (p->log) snprintf(p->log, n, "%s%s", note, compiled.log);
  }
  if (st != KVJIT_OK) goto done;

  const uint8_t *payload = *origin == KVJIT_FROM_DISK ? view.payload : compiled.payload;
  p->names = calloc(desc->num_kernels, sizeof *p->names);
  p->lowered = calloc(desc->num_kernels, sizeof *p->lowered);
  p->kernels = calloc(desc->num_kernels, sizeof *p->kernels);
  if (!p->names || !p->lowered || !p->kernels) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
    goto done;
  }
  p->num_kernels = desc->num_kernels;
  if (*origin == KVJIT_FROM_DISK && view.num_kernels != desc->num_kernels) {
    st = kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry %s lists %u kernels, expected %zu", p->key_hex, view.num_kernels,
                    desc->num_kernels);
    goto done;
  }
  for (size_t i = 0; i < desc->num_kernels; i++) {
    p->names[i] = strdup(desc->kernels[i]);
    if (*origin == KVJIT_FROM_DISK) {
      const char *n, *l;
      size_t nl, ll;
      kvjit_entry_kernel(&view, (uint32_t)i, &n, &nl, &l, &ll);
      p->lowered[i] = dup_n(l, ll);
    } else {
      p->lowered[i] = strdup(compiled.lowered[i]);
    }
    if (!p->names[i] || !p->lowered[i]) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
      goto done;
    }
  }
  CUresult res = drv->cuLibraryLoadData(&p->library, payload, NULL, NULL, 0, NULL, NULL, 0);
  if (res == CUDA_SUCCESS) atomic_fetch_add(&ctx->loads, 1);
  if (res != CUDA_SUCCESS && *origin == KVJIT_FROM_DISK && !retried &&
      (res == CUDA_ERROR_INVALID_IMAGE || res == CUDA_ERROR_INVALID_PTX || res == CUDA_ERROR_NO_BINARY_FOR_GPU)) {
    /* A well-formed entry the driver rejects (e.g. a cubin built by a buggy toolchain): rebuild it
     * from source once and overwrite it. */
    atomic_fetch_add(&ctx->load_bad, 1);
    free(file);
    file = NULL;
    for (size_t i = 0; i < p->num_kernels; i++) {
      free(p->names[i]);
      free(p->lowered[i]);
    }
    free(p->names);
    free(p->lowered);
    free(p->kernels);
    p->names = p->lowered = NULL;
    p->kernels = NULL;
    p->num_kernels = 0;
    retried = 1;
    /* Skip the disk: force a compile by going straight to NVRTC. */
    st = kvjit_nvrtc_compile(&compiled, desc, target);
    if (st != KVJIT_OK) goto done;
    atomic_fetch_add(&ctx->compiles, 1);
    atomic_fetch_add(&ctx->compile_ns, compiled.ns);
    *origin = KVJIT_FROM_COMPILE;
    publish(ctx, desc, label, target, &p->key, &compiled);
    kvjit_compiled_free(&compiled);
    goto again;
  }
  if (res != CUDA_SUCCESS) {
    p->library = NULL;
    st = kvjit_cuda_fail(drv, res, "cuLibraryLoadData");
    goto done;
  }
  for (size_t i = 0; i < p->num_kernels; i++) {
    p->kernels[i].program = p;
    p->kernels[i].name = p->names[i];
    p->kernels[i].lowered = p->lowered[i];
    res = drv->cuLibraryGetKernel(&p->kernels[i].handle, p->library, p->lowered[i]);
    if (res != CUDA_SUCCESS) {
      char what[300];
      snprintf(what, sizeof what, "cuLibraryGetKernel(\"%s\")", p->lowered[i]);
      st = kvjit_cuda_fail(drv, res, what);
      goto done;
    }
  }
done:
  free(file);
  kvjit_compiled_free(&compiled);
  return st;
}

static kvjit_status resolve_target(const kvjit_program_desc *desc, int arch, kvjit_key_target *target, kvjit_key *key,
                                   int *ptx_fallback) {
  kvjit_status st = kvjit_nvrtc_target(target, arch, ptx_fallback);
  if (st != KVJIT_OK) return st;
  kvjit_key_compute(key, desc, target);
  return KVJIT_OK;
}

kvjit_status kvjit_program_get(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                               const kvjit_program_desc *desc) {
  return kvjit_program_get_labeled(ctx, out, origin, desc, NULL);
}

kvjit_status kvjit_program_get_labeled(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                       const kvjit_program_desc *desc, const kvjit_program_label *label) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  *out = NULL;
  kvjit_status st = validate_desc(desc);
  if (st != KVJIT_OK) return st;
  const kvjit_driver *drv;
  st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  int arch = desc->arch;
  if (arch == 0 && (st = kvjit_driver_current_sm(drv, &arch, NULL)) != KVJIT_OK) return st;
  kvjit_key_target target;
  kvjit_key key;
  int ptx_fallback = 0;
  if ((st = resolve_target(desc, arch, &target, &key, &ptx_fallback)) != KVJIT_OK) return st;

  pthread_mutex_lock(&ctx->lock);
  kvjit_program *p = table_find(ctx, &key);
  if (p != NULL) {
    while (p->state == PROGRAM_BUILDING) pthread_cond_wait(&ctx->built, &ctx->lock);
    pthread_mutex_unlock(&ctx->lock);
    atomic_fetch_add(&ctx->memory_hits, 1);
    if (origin) *origin = KVJIT_FROM_MEMORY;
    *out = p;
    if (p->state == PROGRAM_FAILED) return kvjit_fail(p->status, "%s", p->error ? p->error : "earlier build failed");
    return KVJIT_OK;
  }
  p = calloc(1, sizeof *p);
  if (p == NULL || (p->name = strdup(desc->name)) == NULL) {
    pthread_mutex_unlock(&ctx->lock);
    free(p);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  p->key = key;
  kvjit_key_hex(&key, p->key_hex);
  p->arch = target.kind == KVJIT_PAYLOAD_PTX ? -target.arch : target.arch;
  p->state = PROGRAM_BUILDING;
  p->next = ctx->buckets[key.low % PROGRAM_BUCKETS];
  ctx->buckets[key.low % PROGRAM_BUCKETS] = p;
  pthread_mutex_unlock(&ctx->lock);

  kvjit_origin got = KVJIT_FROM_COMPILE;
  st = build_program(ctx, p, desc, label, &target, ptx_fallback, drv, &got);
  if (got == KVJIT_FROM_DISK) atomic_fetch_add(&ctx->disk_hits, 1);
  if (p->log == NULL) p->log = strdup("");

  pthread_mutex_lock(&ctx->lock);
  if (st == KVJIT_OK) {
    p->state = PROGRAM_READY;
  } else {
    /* Remembered: the same program is not rebuilt on every call. */
    p->status = st;
    p->error = strdup(kvjit_last_error());
    p->state = PROGRAM_FAILED;
  }
  pthread_cond_broadcast(&ctx->built);
  pthread_mutex_unlock(&ctx->lock);
  if (origin) *origin = got;
  *out = p;
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_compile(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc) {
  return kvjit_program_compile_labeled(ctx, origin, desc, NULL);
}

kvjit_status kvjit_program_compile_labeled(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc,
                                           const kvjit_program_label *label) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  kvjit_status st = validate_desc(desc);
  if (st != KVJIT_OK) return st;
  int arch = desc->arch;
  if (arch == 0) {
    st = kvjit_current_sm(&arch);
    if (st != KVJIT_OK) {
      return kvjit_fail(st, "desc->arch is 0 and there is no GPU to take it from (%s)", kvjit_last_error());
    }
  }
  kvjit_key_target target;
  kvjit_key key;
  int ptx_fallback = 0;
  if ((st = resolve_target(desc, arch, &target, &key, &ptx_fallback)) != KVJIT_OK) return st;
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  memset(&compiled, 0, sizeof compiled);
  kvjit_origin got;
  st = obtain_payload(ctx, desc, label, &target, &key, &file, &view, &compiled, &got);
  if (got == KVJIT_FROM_DISK) atomic_fetch_add(&ctx->disk_hits, 1);
  free(file);
  kvjit_compiled_free(&compiled);
  if (origin) *origin = got;
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

const char *kvjit_program_log(const kvjit_program *program) {
  return program && program->log ? program->log : "";
}

const char *kvjit_program_key(const kvjit_program *program) { return program ? program->key_hex : ""; }

int kvjit_program_arch(const kvjit_program *program) { return program ? program->arch : 0; }

kvjit_status kvjit_program_kernel(const kvjit_program *program, kvjit_kernel **out, const char *name, size_t index) {
  if (program == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program or out is NULL");
  if (program->state != PROGRAM_READY) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program %s failed to build; it has no kernels", program->name);
  }
  if (name == NULL) {
    if (index >= program->num_kernels) {
      return kvjit_fail(KVJIT_ERR_NOT_FOUND, "index %zu: program %s has %zu kernels", index, program->name,
                        program->num_kernels);
    }
    *out = &program->kernels[index];
    return KVJIT_OK;
  }
  for (size_t i = 0; i < program->num_kernels; i++) {
    if (strcmp(program->names[i], name) == 0 || strcmp(program->lowered[i], name) == 0) {
      *out = &program->kernels[i];
      return KVJIT_OK;
    }
  }
  return kvjit_fail(KVJIT_ERR_NOT_FOUND, "kernel \"%s\": not among the kernels of program %s", name, program->name);
}

kvjit_status kvjit_program_global(const kvjit_program *program, CUdeviceptr *ptr, size_t *bytes, const char *name) {
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  if (program->library == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program %s is not loaded", program->name);
  CUresult res = drv->cuLibraryGetGlobal(ptr, bytes, program->library, name);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLibraryGetGlobal");
  return KVJIT_OK;
}

/* ---- launch -------------------------------------------------------------------------------- */

kvjit_status kvjit_launch(const kvjit_kernel *kernel, const kvjit_launch_config *config, void **args) {
  if (kernel == NULL || config == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel or config is NULL");
  for (int i = 0; i < 3; i++) {
    if (config->grid[i] == 0 || config->block[i] == 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "config: grid %ux%ux%u block %ux%ux%u has a zero dimension",
                        config->grid[0], config->grid[1], config->grid[2], config->block[0], config->block[1],
                        config->block[2]);
    }
  }
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  CUlaunchAttribute attr;
  memset(&attr, 0, sizeof attr);
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = config->grid[0];
  lc.gridDimY = config->grid[1];
  lc.gridDimZ = config->grid[2];
  lc.blockDimX = config->block[0];
  lc.blockDimY = config->block[1];
  lc.blockDimZ = config->block[2];
  lc.sharedMemBytes = config->shared_bytes;
  lc.hStream = (CUstream)config->stream;
  lc.attrs = config->programmatic_serialization ? &attr : NULL;
  lc.numAttrs = config->programmatic_serialization ? 1 : 0;
  CUresult res = drv->cuLaunchKernelEx(&lc, (CUfunction)kernel->handle, args, NULL);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLaunchKernelEx");
  return KVJIT_OK;
}

/* ---- fast table ------------------------------------------------------------------------------ */

const kvjit_kernel *kvjit_fast_lookup(const kvjit_context *ctx, kvjit_fast_key key) {
  return kvjit_fast_table_lookup(ctx->fast, key);
}

kvjit_status kvjit_fast_insert(kvjit_context *ctx, kvjit_fast_key key, const kvjit_kernel *kernel) {
  return kvjit_fast_table_insert(ctx->fast, key, kernel);
}

void kvjit_fast_foreach(const kvjit_context *ctx, void (*visit)(const kvjit_kernel *kernel, void *user), void *user) {
  kvjit_fast_table_foreach(ctx->fast, visit, user);
}

/* ---- cache maintenance ------------------------------------------------------------------------ */

kvjit_status kvjit_cache_list(kvjit_context *ctx, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_visit(ctx->cache, include_read_dirs, verify, visit, user, bad);
}

kvjit_status kvjit_cache_prune(kvjit_context *ctx, uint64_t max_bytes, uint64_t *removed_entries,
                               uint64_t *removed_bytes) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_evict(ctx->cache, max_bytes, removed_entries, removed_bytes);
}

kvjit_status kvjit_cache_clear(kvjit_context *ctx, uint64_t *removed_entries) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_remove_all(ctx->cache, removed_entries);
}

kvjit_status kvjit_cache_export(kvjit_context *ctx, const char *path, int include_read_dirs, uint64_t *entries) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (path == NULL || path[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path: empty");
  return kvjit_pack_export(ctx->cache, path, include_read_dirs, entries);
}

kvjit_status kvjit_cache_import(kvjit_context *ctx, const char *path, uint64_t *imported, uint64_t *present,
                                uint64_t *bad) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (path == NULL || path[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path: empty");
  return kvjit_pack_import(ctx->cache, path, imported, present, bad);
}
