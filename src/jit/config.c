/* A context's configuration (config.h): options, then the environment, then defaults. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "parse.h"
#include "safe_fs.h"
#include "status.h"

#define DEFAULT_MAX_BYTES (2ull << 30)
#define DEFAULT_LOCK_TIMEOUT_MS 60000u
/* The remote tier: one slow or dead remote costs at most this, then is skipped for a while. */
#define DEFAULT_REMOTE_TIMEOUT_MS 2000u
#define DEFAULT_REMOTE_CONNECT_TIMEOUT_MS 500u
#define DEFAULT_REMOTE_BACKOFF_MS 30000u
/* Every duration's range (README's variable table): finite, and never 0 where a lower layer reads
 * 0 as "no limit" (libcurl's timeouts): a dead server costs at most the maximum. */
#define MAX_LOCK_TIMEOUT_MS KVJIT_MAX_DURATION_MS
#define MIN_REMOTE_TIMEOUT_MS 1u
#define MAX_REMOTE_TIMEOUT_MS 600000u
#define MAX_REMOTE_BACKOFF_MS KVJIT_MAX_DURATION_MS
#define MAX_HEADER_BYTES 4096

/* A tri-state option: KVJIT_FROM_ENV, 0 or 1. */
static kvjit_status check_switch(const char *field, int value) {
  if (value == KVJIT_FROM_ENV || value == 0 || value == 1) return KVJIT_OK;
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "options->%s: %d, expected 0, 1 or KVJIT_FROM_ENV (-1)", field, value);
}

static void warn(int log, const char *what, const char *value, const char *fallback) {
  if (log != 0) kvjit_log_line("warning: %s=\"%s\" is not valid; using %s", what, value, fallback);
}

/* $KVJIT_COMPILE: always, warn or never. @p overridden: the context's option decides, the variable is only checked. */
static kvjit_compile_mode env_compile_mode(int overridden, int log) {
  const char *v = kvjit_env_text("KVJIT_COMPILE");
  if (v == NULL || strcmp(v, "always") == 0) return KVJIT_COMPILE_ALWAYS;
  if (strcmp(v, "warn") == 0) return KVJIT_COMPILE_WARN;
  if (strcmp(v, "never") == 0) return KVJIT_COMPILE_NEVER;
  warn(log, "KVJIT_COMPILE", v,
       overridden ? "the program's own compile mode (expected always, warn or never)"
                  : "always (expected always, warn or never)");
  return KVJIT_COMPILE_ALWAYS;
}

/* $KVJIT_REMOTE_CACHE_MODE: ro (the default) or rw. */
static int env_remote_read_write(int log) {
  const char *v = kvjit_env_text("KVJIT_REMOTE_CACHE_MODE");
  if (v == NULL || strcmp(v, "ro") == 0) return 0;
  if (strcmp(v, "rw") == 0) return 1;
  warn(log, "KVJIT_REMOTE_CACHE_MODE", v, "ro (expected ro or rw)");
  return 0;
}

/* One "Name: value" line, no CR or LF inside (a header must not smuggle another). */
static int header_line_ok(const char *h) {
  const char *colon = strchr(h, ':');
  return colon != NULL && colon != h && strpbrk(h, "\r\n") == NULL;
}

/* The auth header: $KVJIT_REMOTE_HEADER, else the first line of $KVJIT_REMOTE_HEADER_FILE. Its
 * value is never logged: warnings name the variable only. */
static char *remote_header(int log) {
  const char *v = kvjit_env_text("KVJIT_REMOTE_HEADER");
  if (v != NULL) {
    if (header_line_ok(v)) return strdup(v);
    if (log != 0) kvjit_log_line("warning: KVJIT_REMOTE_HEADER is not one \"Name: value\" line; no header sent");
    return NULL;
  }
  const char *path = kvjit_env_text("KVJIT_REMOTE_HEADER_FILE");
  if (path == NULL) return NULL;
  char *line = NULL;
  struct stat st;
  int fd = kvjit_open_regular(path, O_RDONLY, 0, &st);
  if (fd >= 0) {
    char buf[MAX_HEADER_BYTES + 1];
    ssize_t n = read(fd, buf, MAX_HEADER_BYTES);
    close(fd);
    if (n > 0) {
      buf[n] = '\0';
      buf[strcspn(buf, "\r\n")] = '\0';
      if (header_line_ok(buf)) line = strdup(buf);
    }
  }
  if (line == NULL && log != 0) {
    kvjit_log_line("warning: KVJIT_REMOTE_HEADER_FILE=%s: not a readable file starting with one \"Name: value\" "
                   "line; no header sent", path);
  }
  return line;
}

kvjit_status kvjit_context_config_make(const kvjit_context_options *options, kvjit_context_config *out) {
  memset(out, 0, sizeof *out);
  kvjit_status st;
  if ((st = check_switch("log", options->log)) != KVJIT_OK ||
      (st = check_switch("disable_cache", options->disable_cache)) != KVJIT_OK ||
      (st = check_switch("allow_shared_dirs", options->allow_shared_dirs)) != KVJIT_OK) {
    return st;
  }
  int read_only = options->version >= 2 ? options->read_only : 0; /* a version 1 struct ends before it */
  if (read_only != 0 && read_only != 1) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "options->read_only: %d, expected 0 or 1", read_only);
  }
  /* KVJIT_LOG first: it decides whether the other variables' warnings are printed. */
  out->log = options->log != KVJIT_FROM_ENV ? options->log : kvjit_env_bool("KVJIT_LOG", KVJIT_FROM_ENV, KVJIT_FROM_ENV);
  
  out->cache.log = out->log;
  out->cache.read_only = read_only;
  out->cache.write_dir = options->cache_dir && options->cache_dir[0] ? options->cache_dir : NULL;
  out->cache.read_dirs = options->cache_path;
  out->cache.disabled = options->disable_cache != KVJIT_FROM_ENV ? options->disable_cache
                                                          : kvjit_env_bool("KVJIT_CACHE_DISABLE", 0, out->log);
  out->cache.max_bytes = options->cache_max_bytes != 0
                      ? options->cache_max_bytes
                      : kvjit_env_size("KVJIT_CACHE_MAX_SIZE", 1, UINT64_MAX, DEFAULT_MAX_BYTES, out->log);
  if (options->lock_timeout_ms > MAX_LOCK_TIMEOUT_MS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "options->lock_timeout_ms: %u, expected at most %u (ms)",
                      options->lock_timeout_ms, MAX_LOCK_TIMEOUT_MS);
  }
  out->cache.lock_timeout_ms = options->lock_timeout_ms != 0
                            ? options->lock_timeout_ms
                            : (unsigned)kvjit_env_duration_ms("KVJIT_LOCK_TIMEOUT_MS", 0, MAX_LOCK_TIMEOUT_MS,
                                                              DEFAULT_LOCK_TIMEOUT_MS, out->log);
  out->cache.allow_shared = options->allow_shared_dirs != KVJIT_FROM_ENV
                         ? options->allow_shared_dirs
                         : kvjit_env_bool("KVJIT_CACHE_ALLOW_SHARED", 0, out->log);
  /* version 3: the compile mode and the remote tier */
  kvjit_compile_mode mode = options->version >= 3 ? options->compile_mode : KVJIT_COMPILE_FROM_ENV;
  if (mode != KVJIT_COMPILE_FROM_ENV && mode != KVJIT_COMPILE_ALWAYS && mode != KVJIT_COMPILE_WARN &&
      mode != KVJIT_COMPILE_NEVER) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "options->compile_mode: %d, expected KVJIT_COMPILE_ALWAYS/_WARN/_NEVER or _FROM_ENV", (int)mode);
  }
  /* Read (and a bad value warned about) even when the option decides: a typo in the environment
   * is reported by every door alike, the CLI's included. */
  kvjit_compile_mode env_mode = env_compile_mode(mode != KVJIT_COMPILE_FROM_ENV, out->log);
  out->compile_mode = mode != KVJIT_COMPILE_FROM_ENV ? mode : env_mode;
  int rw = options->version >= 3 ? options->remote_read_write : KVJIT_FROM_ENV;
  if ((st = check_switch("remote_read_write", rw)) != KVJIT_OK) return st;
  const char *urls = options->version >= 3 && options->remote_cache && options->remote_cache[0]
                         ? options->remote_cache
                         : kvjit_env_text("KVJIT_REMOTE_CACHE");
  if (urls != NULL && !out->cache.disabled) {
    kvjit_remote_config *r = &out->cache.remote;
    r->urls = urls;
    r->read_write = rw != KVJIT_FROM_ENV ? rw : env_remote_read_write(out->log);
    r->timeout_ms = (unsigned)kvjit_env_duration_ms("KVJIT_REMOTE_TIMEOUT_MS", MIN_REMOTE_TIMEOUT_MS,
                                                    MAX_REMOTE_TIMEOUT_MS, DEFAULT_REMOTE_TIMEOUT_MS, out->log);
    r->connect_timeout_ms = (unsigned)kvjit_env_duration_ms("KVJIT_REMOTE_CONNECT_TIMEOUT_MS", MIN_REMOTE_TIMEOUT_MS,
                                                            MAX_REMOTE_TIMEOUT_MS, DEFAULT_REMOTE_CONNECT_TIMEOUT_MS,
                                                            out->log);
    if (r->connect_timeout_ms > r->timeout_ms) r->connect_timeout_ms = r->timeout_ms;
    r->backoff_ms = (unsigned)kvjit_env_duration_ms("KVJIT_REMOTE_BACKOFF_MS", 0, MAX_REMOTE_BACKOFF_MS,
                                                    DEFAULT_REMOTE_BACKOFF_MS, out->log);
    r->log = out->log;
    out->remote_header = remote_header(out->log);
    r->header = out->remote_header;
  }
  return KVJIT_OK;
}

void kvjit_context_config_free(kvjit_context_config *config) {
  free(config->remote_header);
  config->remote_header = NULL;
  config->cache.remote.header = NULL;
}
