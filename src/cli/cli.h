/*
 * What the kvjit CLI's command files share: messages and exit statuses, option helpers, the cache
 * options every command takes, and the cache entry table `cache` and `info` both print. The CLI
 * uses the public API (kvjit.h, kvjit_tools.h) only, like zstd's programs/: main.c parses the command word and
 * dispatches; each command lives in its own file.
 */
#ifndef KVJIT_CLI_H
#define KVJIT_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kvjit.h"
#include "kvjit_tools.h"

/* Exit status of a bad command line (one line on stderr naming the flag and the value). */
enum { EXIT_USAGE = 2 };

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- messages (util.c) ---------------------------------------------------------------------- */

/* "kvjit CMD: MESSAGE (see 'kvjit CMD --help')" on stderr; returns EXIT_USAGE. */
__attribute__((format(printf, 2, 3))) int usage_error(const char *cmd, const char *fmt, ...);
/* A failed library call: its thread-local detail, else the status's own message; EXIT_FAILURE. */
int library_error(const char *cmd, const char *what, kvjit_status status);
int out_of_memory(const char *cmd);

/* Bytes in binary units, "512B", "1.5K", "2.0G". */
const char *human_size(uint64_t bytes, char *buf, size_t capacity);
/* Seconds in the largest unit that fits, "42s", "7m", "3h", "12d". */
const char *human_age(int64_t seconds, char *buf, size_t capacity);
/* "sm_90", or "compute_90" for PTX entries (negative arch). */
const char *arch_name(int arch, char *buf, size_t capacity);
double now_seconds(void);
/* "s" unless @p n is 1: "1 variant", "2 variants". */
const char *plural(uint64_t n);
/* The word of @p words (NULL items skipped) a typo of @p typed is likely meant for, any case; NULL
 * when none is near enough. */
const char *nearest_word(const char *typed, const char *const *words, size_t count);

/* ---- option parsing (util.c) ---------------------------------------------------------------- */

/* A getopt_long() '?' or ':' as one line naming the flag as typed (and the nearest of @p options,
 * the command's long options, for an unknown one); EXIT_USAGE. */
int getopt_error(const char *cmd, int c, char *const argv[], const struct option *options);
/* No command takes positional arguments: anything left is an error. */
int check_no_operands(const char *cmd, int argc, char *const argv[]);
/* Whole-string decimal integer in [min, max], min >= 0 (kvjit_parse_uint(): no sign, no overflow). */
bool parse_int(const char *text, long min, long max, long *out);
/* --nvrtc PATH: key and compile for that NVRTC (a regular file), as $KVJIT_NVRTC does, for this
 * process and the workers it starts; before anything loads NVRTC. Exit status. */
int use_nvrtc(const char *cmd, const char *path);

/* Options every command that opens a context takes. */
typedef struct cache_opts {
  const char *cache_dir;  /* NULL: $KVJIT_CACHE_DIR etc. */
  const char *cache_path; /* NULL: $KVJIT_CACHE_PATH */
} cache_opts;

enum { OPT_CACHE_DIR = 256, OPT_CACHE_PATH };
#define CACHE_LONG_OPTIONS                                                                       \
  {"cache-dir", required_argument, NULL, OPT_CACHE_DIR}, {"cache-path", required_argument, NULL, OPT_CACHE_PATH}
#define CACHE_OPTIONS_HELP                                                                       \
  "      --cache-dir DIR     writable cache dir (default: $KVJIT_CACHE_DIR, else\n"              \
  "                          $XDG_CACHE_HOME/kvjit, else ~/.cache/kvjit)\n"                      \
  "      --cache-path DIRS   colon-separated read-only cache dirs (default: $KVJIT_CACHE_PATH)\n"

/* Handles a cache option; false when @p c is not one. */
bool cache_option(int c, cache_opts *opts);
int open_context(const char *cmd, const cache_opts *opts, kvjit_context **out);
/* With @p read_only, a context that creates, writes and moves nothing (ls, info, path). */
int open_context_mode(const char *cmd, const cache_opts *opts, bool read_only, kvjit_context **out);
/* A writable context that prints no warning (its worker processes' contexts do). */
int open_context_quiet(const char *cmd, const cache_opts *opts, kvjit_context **out);
/* Exit status 1 with a message when the context has no writable dir to fill or maintain. */
int need_write_dir(const char *cmd, kvjit_context *ctx, kvjit_cache_info *info);
/* Calls @p fn once per dir of a colon-separated list (empty items skipped). */
void for_each_dir(const char *dirs, void (*fn)(const char *dir, void *user), void *user);

/* ---- the cache's entries (entries.c) -------------------------------------------------------- */

/* An entry copied out of the kvjit_cache_list() callback, whose strings live only for the call. */
typedef struct entry_row {
  char *path, *key, *program, *kernels;
  char *bundle; /* an alias's bundle key, NULL for an entry with its own binary */
  int arch;
  uint64_t bytes;
  int64_t mtime;
  bool read_only; /* found in a --cache-path dir, not the writable one */
  kvjit_status status;
  char *reason; /* why it is bad, "" when good */
  char *op, *variant, *compiler; /* what the entry says it is (format 2) */
} entry_row;

typedef struct entry_table {
  entry_row *rows;
  size_t count, capacity;
  const char *write_dir; /* to tell the writable dir's entries from the read-only ones */
  bool out_of_memory;
} entry_table;

/* 1 when @p path lies inside @p dir. */
bool under_dir(const char *path, const char *dir);
/* kvjit_cache_list() into @p table, sorted; exit status. */
int list_entries(const char *cmd, kvjit_context *ctx, bool all, bool verify, entry_table *table, uint64_t *bad);
void entry_table_free(entry_table *table);

/* ---- commands ------------------------------------------------------------------------------- */

int cmd_prewarm(int argc, char **argv); /* prewarm.c */
int cmd_cache(int argc, char **argv);   /* cache.c */
int cmd_info(int argc, char **argv);    /* info.c */
/* kvjit cache check: prewarm's variant options, looked up instead of compiled (prewarm.c). */
int cmd_check(int argc, char **argv);

#endif
