/* The CLI's shared helpers: messages, units, option parsing, opening a context. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"

/* ------------------------------------------------------------------------------------------ */
/* Messages                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* "kvjit CMD: MESSAGE" on stderr; returns the usage exit status so callers can `return`. */
int usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kvjit %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputs(" (see 'kvjit ", stderr);
  fputs(cmd, stderr);
  fputs(" --help')\n", stderr);
  va_end(ap);
  return EXIT_USAGE;
}

/* A failed library call: its thread-local detail, else the status's own message. */
int library_error(const char *cmd, const char *what, kvjit_status status) {
  const char *detail = kvjit_last_error();
  fprintf(stderr, "kvjit %s: %s: %s [%s]\n", cmd, what, detail[0] ? detail : kvjit_status_string(status),
          kvjit_status_name(status));
  return EXIT_FAILURE;
}

int out_of_memory(const char *cmd) {
  fprintf(stderr, "kvjit %s: out of memory\n", cmd);
  return EXIT_FAILURE;
}

/* Bytes in binary units, "512B", "1.5K", "2.0G". */
const char *human_size(uint64_t bytes, char *buf, size_t capacity) {
  static const char units[] = "KMGTP";
  if (bytes < 1024) {
    snprintf(buf, capacity, "%" PRIu64 "B", bytes);
    return buf;
  }
  double value = (double)bytes / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof units - 1) {
    value /= 1024.0;
    unit++;
  }
  snprintf(buf, capacity, "%.1f%c", value, units[unit]);
  return buf;
}

/* Seconds in the largest unit that fits, "42s", "7m", "3h", "12d". */
const char *human_age(int64_t seconds, char *buf, size_t capacity) {
  if (seconds < 0) seconds = 0;
  if (seconds < 120)
    snprintf(buf, capacity, "%" PRId64 "s", seconds);
  else if (seconds < 2 * 3600)
    snprintf(buf, capacity, "%" PRId64 "m", seconds / 60);
  else if (seconds < 2 * 86400)
    snprintf(buf, capacity, "%" PRId64 "h", seconds / 3600);
  else
    snprintf(buf, capacity, "%" PRId64 "d", seconds / 86400);
  return buf;
}

/* "sm_90", or "compute_90" for PTX entries (negative arch). */
const char *arch_name(int arch, char *buf, size_t capacity) {
  if (kvjit_target_name(arch, buf, capacity) != KVJIT_OK) snprintf(buf, capacity, "target_%d", arch);
  return buf;
}

const char *plural(uint64_t n) { return n == 1 ? "" : "s"; }

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------------ */
/* Option parsing                                                                              */
/* ------------------------------------------------------------------------------------------ */

/*
 * getopt_long() reports problems as '?' (unknown option) or ':' (missing value, optstring starts
 * with ':'); turn them into one line naming the flag as the user typed it.
 */
int getopt_error(const char *cmd, int c, char *const argv[], const struct option *options) {
  const char *element = argv[optind - 1];
  char flag[64];
  if (strncmp(element, "--", 2) == 0 || optopt <= 0 || optopt >= 256) {
    snprintf(flag, sizeof flag, "%s", element);
    flag[strcspn(flag, "=")] = '\0';
  } else {
    snprintf(flag, sizeof flag, "-%c", optopt);
  }
  if (c == ':') return usage_error(cmd, "%s needs a value", flag);
  if (c == '?' && optopt != 0 && strchr(element, '=') != NULL && strncmp(element, "--", 2) == 0)
    return usage_error(cmd, "%s takes no value", flag);
  /* A long option one typo away from one of the command's: name it. */
  enum { MAX_NAMES = 64 };
  const char *names[MAX_NAMES];
  char spelled[MAX_NAMES][48];
  size_t count = 0;
  for (const struct option *o = options; o != NULL && o->name != NULL && count < MAX_NAMES; o++, count++) {
    snprintf(spelled[count], sizeof spelled[count], "--%s", o->name);
    names[count] = spelled[count];
  }
  const char *near = strncmp(flag, "--", 2) == 0 ? nearest_word(flag, names, count) : NULL;
  if (near != NULL) return usage_error(cmd, "unknown option '%s'; did you mean '%s'?", flag, near);
  return usage_error(cmd, "unknown option '%s'", flag);
}

/* Anything getopt_long() left over is an error: no command takes positional arguments. */
int check_no_operands(const char *cmd, int argc, char *const argv[]) {
  if (optind < argc) return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  return 0;
}

/* Whole-string decimal integer in [min, max] (min >= 0): the library's parser, so a flag takes
 * the grammar the environment does (kvjit_parse_uint()). */
bool parse_int(const char *text, long min, long max, long *out) {
  uint64_t value = 0;
  if (min < 0 || kvjit_parse_uint(text, (uint64_t)min, (uint64_t)max, &value) != KVJIT_OK) return false;
  *out = (long)value;
  return true;
}

/* Handles a cache option; false when @p c is not one. */
bool cache_option(int c, cache_opts *opts) {
  /* An empty --cache-dir means unset, as an empty KVJIT_CACHE_DIR does (never "/"). */
  if (c == OPT_CACHE_DIR) opts->cache_dir = optarg[0] != '\0' ? optarg : NULL;
  else if (c == OPT_CACHE_PATH) opts->cache_path = optarg;
  else return false;
  return true;
}

int open_context(const char *cmd, const cache_opts *opts, kvjit_context **out) {
  return open_context_mode(cmd, opts, false, out);
}

static int open_context_with(const char *cmd, const cache_opts *opts, bool read_only, bool quiet,
                             kvjit_context **out) {
  kvjit_context_options options = KVJIT_CONTEXT_OPTIONS_INIT;
  options.cache_dir = opts->cache_dir;
  options.cache_path = opts->cache_path;
  options.read_only = read_only;
  if (quiet) options.log = 0;
  /* The CLI compiles only when told to (prewarm): KVJIT_COMPILE=never is for servers. */
  options.compile_mode = KVJIT_COMPILE_ALWAYS;
  kvjit_status status = kvjit_context_create(out, &options);
  if (status != KVJIT_OK) return library_error(cmd, "cannot create the context", status);
  return 0;
}

int open_context_mode(const char *cmd, const cache_opts *opts, bool read_only, kvjit_context **out) {
  return open_context_with(cmd, opts, read_only, false, out);
}

int open_context_quiet(const char *cmd, const cache_opts *opts, kvjit_context **out) {
  return open_context_with(cmd, opts, false, true, out);
}

/* Exit status 1 with a message when the context has no writable dir to fill or maintain. */
int need_write_dir(const char *cmd, kvjit_context *ctx, kvjit_cache_info *info) {
  kvjit_status status = kvjit_context_cache_info(ctx, info);
  if (status != KVJIT_OK) return library_error(cmd, "cache info", status);
  if (info->write_dir == NULL) {
    fprintf(stderr, "kvjit %s: no writable cache dir (%s)\n", cmd,
            info->degraded_reason ? info->degraded_reason : "disk cache disabled");
    return EXIT_FAILURE;
  }
  return 0;
}
/* Calls @p fn once per dir of a colon-separated list (empty items skipped). */
void for_each_dir(const char *dirs, void (*fn)(const char *dir, void *user), void *user) {
  if (dirs == NULL) return;
  const char *p = dirs;
  while (*p != '\0') {
    size_t len = strcspn(p, ":");
    if (len != 0 && len < PATH_MAX) {
      char dir[PATH_MAX];
      memcpy(dir, p, len);
      dir[len] = '\0';
      fn(dir, user);
    }
    p += len;
    if (*p == ':') p++;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* Suggestions                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* Edit distance (insert, delete, replace, swap two neighbours), any case; long words cost too much. */
static size_t edit_distance(const char *a, const char *b) {
  enum { MAX_LEN = 64 };
  size_t la = strlen(a), lb = strlen(b);
  if (la >= MAX_LEN || lb >= MAX_LEN) return SIZE_MAX;
  size_t d[MAX_LEN + 1][MAX_LEN + 1];
  for (size_t i = 0; i <= la; i++) d[i][0] = i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      size_t cost = lower(a[i - 1]) != lower(b[j - 1]);
      size_t best = d[i - 1][j - 1] + cost;
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]) &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb];
}

const char *nearest_word(const char *typed, const char *const *words, size_t count) {
  const char *best = NULL;
  size_t best_distance = SIZE_MAX;
  /* A typo is a few edits, fewer than a third of the word: "--versoin", "prewram", "llama-3.1-9b". */
  size_t limit = strlen(typed) / 3;
  if (limit < 1) limit = 1;
  if (limit > 3) limit = 3;
  for (size_t i = 0; i < count; i++) {
    if (words[i] == NULL) continue;
    size_t distance = edit_distance(typed, words[i]);
    if (distance <= limit && distance < best_distance) {
      best = words[i];
      best_distance = distance;
    }
  }
  return best;
}

int use_nvrtc(const char *cmd, const char *path) {
  struct stat st;
  errno = 0;
  if (path[0] == '\0' || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    return usage_error(cmd, "bad value '%s' for --nvrtc (expected a libnvrtc.so file: %s)", path,
                       path[0] == '\0' ? "empty" : errno ? strerror(errno) : "not a regular file");
  if (setenv("KVJIT_NVRTC", path, 1) != 0) return out_of_memory(cmd);
  return 0;
}
