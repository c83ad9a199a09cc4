/* kvjit cache ls | verify | prune | clear | path | export | import (check: prewarm.c). */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------------------------------------------ */
/* cache                                                                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct cache_cmd_opts {
  cache_opts cache;
  bool in_place; /* verify: the dir cannot be written, bad entries stay where they are */
  bool all;
  bool long_format;
  bool have_max_size;
  uint64_t max_size;
  bool json;        /* ls --json */
  const char *file; /* export / import: the pack */
} cache_cmd_opts;

/* A dir the library refuses (or cannot resolve) lists as empty: say why, once, on stderr. */
static void note_unused_dir(const char *cmd, kvjit_context *ctx) {
  kvjit_cache_info info;
  if (kvjit_context_cache_info(ctx, &info) == KVJIT_OK && info.write_dir == NULL && info.degraded_reason)
    fprintf(stderr, "kvjit %s: note: no writable cache dir listed (%s)\n", cmd, info.degraded_reason);
}

/* @p text as a JSON string (quotes, backslashes and control bytes escaped). */
static void json_string(const char *text) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\') printf("\\%c", *p);
    else if (*p < 0x20) printf("\\u%04x", *p);
    else putchar(*p);
  }
  putchar('"');
}

/* Would this process's lookup of the entry's variant hit, and if not why (kvjit_variant_explain()):
 * the cause's name ("none": it hits) and the explanation; "" for an entry without a variant (the
 * generic loader's, a bundle). The last few variants' answers are reused: a variant has an entry
 * per kernel. */
typedef struct variant_answer {
  char line[512];
  kvjit_miss_info why;
} variant_answer;

static const kvjit_miss_info *explain_variant(kvjit_context *ctx, const char *line, variant_answer *memo, size_t cap,
                                              size_t *next) {
  for (size_t i = 0; i < cap; i++)
    if (memo[i].line[0] && strcmp(memo[i].line, line) == 0) return &memo[i].why;
  kvjit_variant v;
  variant_answer *a = &memo[*next % cap];
  if (strlen(line) >= sizeof a->line || kvjit_variant_parse(&v, line) != KVJIT_OK ||
      kvjit_variant_explain(ctx, &v, &a->why) != KVJIT_OK)
    return NULL;
  snprintf(a->line, sizeof a->line, "%s", line);
  ++*next;
  return &a->why;
}

/* One JSON object per entry, in an array: what `cache ls` shows, for tools. */
static void print_json(kvjit_context *ctx, const entry_table *table) {
  enum { MEMO = 16 };
  variant_answer *memo = calloc(MEMO, sizeof *memo);
  size_t next = 0;
  puts("[");
  for (size_t i = 0; i < table->count; i++) {
    const entry_row *r = &table->rows[i];
    char target[32];
    const char *fields[][2] = {{"key", r->key},         {"target", arch_name(r->arch, target, sizeof target)},
                               {"op", r->op},           {"variant", r->variant},
                               {"compiler", r->compiler}, {"program", r->program},
                               {"kernels", r->kernels}, {"path", r->path},
                               {"dir", r->read_only ? "ro" : "rw"}, {"status", kvjit_status_name(r->status)},
                               {"reason", r->reason}, {"bundle", r->bundle ? r->bundle : ""},
                               {"miss", ""}, {"explanation", ""}};
    const kvjit_miss_info *why = memo && r->variant[0] ? explain_variant(ctx, r->variant, memo, MEMO, &next) : NULL;
    if (why) {
      fields[ARRAY_SIZE(fields) - 2][1] = kvjit_miss_cause_name(why->cause);
      fields[ARRAY_SIZE(fields) - 1][1] = why->cause == KVJIT_MISS_NONE ? "" : why->message;
    }
    fputs("  {", stdout);
    for (size_t f = 0; f < ARRAY_SIZE(fields); f++) {
      printf("%s\"%s\": ", f ? ", " : "", fields[f][0]);
      json_string(fields[f][1]);
    }
    printf(", \"bytes\": %" PRIu64 ", \"mtime\": %" PRId64 "}%s\n", r->bytes, r->mtime, i + 1 < table->count ? "," : "");
  }
  puts("]");
  free(memo);
}

static int cache_ls(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  note_unused_dir(cmd, ctx);
  entry_table table = {0};
  int rc = list_entries(cmd, ctx, o->all, false, &table, NULL);
  if (rc != 0) {
    entry_table_free(&table);
    return rc;
  }
  if (o->json) {
    print_json(ctx, &table);
    entry_table_free(&table);
    return 0;
  }
  int cwidth = 8, pwidth = 7;
  for (size_t i = 0; i < table.count; i++) {
    int len = (int)strlen(table.rows[i].compiler);
    if (len > cwidth) cwidth = len < 24 ? len : 24;
    len = (int)strlen(table.rows[i].program);
    if (len > pwidth) pwidth = len < 48 ? len : 48;
  }
  uint64_t total = 0;
  int64_t now = (int64_t)time(NULL);
  /* The key's first 12 hex digits tell entries apart; WHAT is an op's variant as its manifest
   * line, or the kernels of a generic loader program; --long prints the path. */
  enum { KEY_DIGITS = 12, INDENT = 11 + 1 + 7 + 1 + 5 + 1 + 3 + 1 + KEY_DIGITS };
  if (table.count != 0)
    printf("%-11s %7s %5s %-3s %-*s %-*s %-*s %s\n", "TARGET", "SIZE", "AGE", "DIR", KEY_DIGITS, "KEY", cwidth,
           "COMPILER", pwidth, "PROGRAM", o->long_format ? "WHAT / PATH" : "WHAT");
  for (size_t i = 0; i < table.count; i++) {
    const entry_row *r = &table.rows[i];
    char arch[32], size[32], age[32];
    /* An alias: its kernel lives in a bundle (named by the first digits of its key). */
    char bundle[32] = "";
    if (r->bundle) snprintf(bundle, sizeof bundle, " (in bundle %.*s)", KEY_DIGITS, r->bundle);
    /* An entry that cannot be read says so, not a made-up target and blank fields. */
    const bool bad = r->status != KVJIT_OK && r->arch == 0;
    char what[320];
    if (bad) snprintf(what, sizeof what, "unreadable: %s ('kvjit cache verify' quarantines it)",
                      r->reason[0] ? r->reason : kvjit_status_string(r->status));
    printf("%-11s %7s %5s %-3s %-*.*s %-*s %-*s %s%s\n", bad ? "?" : arch_name(r->arch, arch, sizeof arch),
           human_size(r->bytes, size, sizeof size), human_age(now - r->mtime, age, sizeof age),
           r->read_only ? "ro" : "rw", KEY_DIGITS, KEY_DIGITS, r->key, cwidth, r->compiler[0] ? r->compiler : "-",
           pwidth, bad ? "-" : r->program, bad ? what : r->variant[0] ? r->variant : r->kernels, bundle);
    if (o->long_format) printf("%*s %s\n", INDENT + 2 + cwidth + pwidth, "", r->path);
    total += r->bytes;
  }
  char size[32];
  printf("%zu entries, %s\n", table.count, human_size(total, size, sizeof size));
  entry_table_free(&table);
  return 0;
}

static int cache_verify(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  entry_table table = {0};
  uint64_t bad = 0;
  int rc = list_entries(cmd, ctx, o->all, true, &table, &bad);
  if (rc == 0) {
    size_t orphans = 0, removed = 0;
    for (size_t i = 0; i < table.count; i++) {
      const entry_row *r = &table.rows[i];
      if (r->status == KVJIT_OK) continue;
      if (r->status == KVJIT_ERR_NOT_FOUND && r->bundle) {
        /* Not corrupt: a lookup of it misses and compiles its kernel alone, which replaces it. */
        printf("orphan: %s: alias into bundle %s, which is gone or does not hold its kernel (%s)\n", r->path,
               r->bundle, r->reason[0] ? r->reason : "left in place");
        orphans++;
        removed += strcmp(r->reason, "removed") == 0;
        continue;
      }
      printf("bad: %s: %s (%s)\n", r->path, r->reason[0] ? r->reason : kvjit_status_string(r->status),
             r->read_only || o->in_place ? "read-only dir, left in place"
             : r->status == KVJIT_ERR_IO ? "left in place"
                                         : "quarantined");
    }
    printf("verified %zu entries: %" PRIu64 " bad", table.count, bad);
    if (orphans) printf(", %zu aliases orphaned (%zu removed)", orphans, removed);
    putchar('\n');
    if (bad != 0) rc = EXIT_FAILURE;
  }
  entry_table_free(&table);
  return rc;
}

/*
 * Before a command that changes the writable dir: a read-only look at it, so that one that does not
 * exist is neither created nor reported as fine, and one the library refuses is named. 0 (go on),
 * -1 (nothing there: *rc is the command's answer) or an exit status.
 */
static int look_before(const char *cmd, const cache_cmd_opts *o, bool is_verify, int *rc) {
  kvjit_context *ctx = NULL;
  int status = open_context_mode(cmd, &o->cache, true, &ctx);
  if (status != 0) return status;
  kvjit_cache_info info;
  kvjit_context_cache_info(ctx, &info);
  status = 0;
  if (info.write_dir == NULL) {
    fprintf(stderr, "kvjit %s: no writable cache dir (%s)\n", cmd,
            info.degraded_reason ? info.degraded_reason : "disk cache disabled");
    status = EXIT_FAILURE;
  } else if (access(info.write_dir, F_OK) != 0) {
    if (is_verify) {
      fprintf(stderr, "kvjit %s: %s does not exist: nothing to verify\n", cmd, info.write_dir);
      status = EXIT_FAILURE;
    } else {
      printf("%s does not exist: removed 0 entries\n", info.write_dir);
      *rc = 0;
      status = -1;
    }
  }
  /* verify --all still checks the read-only dirs before it fails on the writable one. */
  if (status == EXIT_FAILURE && is_verify && o->all) {
    int layers = cache_verify(cmd, ctx, o);
    (void)layers;
  }
  kvjit_context_destroy(ctx);
  return status;
}

static int cache_prune(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  kvjit_cache_info info;
  int rc = need_write_dir(cmd, ctx, &info);
  if (rc != 0) return rc;
  uint64_t max_bytes = o->have_max_size ? o->max_size : info.max_bytes;
  uint64_t entries = 0, bytes = 0;
  kvjit_status status = kvjit_cache_prune(ctx, max_bytes, &entries, &bytes);
  if (status != KVJIT_OK) return library_error(cmd, "pruning the cache", status);
  char limit[32], removed[32];
  printf("pruned %s to at most %s: removed %" PRIu64 " entries, %s\n", info.write_dir,
         human_size(max_bytes, limit, sizeof limit), entries, human_size(bytes, removed, sizeof removed));
  return 0;
}

static int cache_clear(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  (void)o;
  kvjit_cache_info info;
  int rc = need_write_dir(cmd, ctx, &info);
  if (rc != 0) return rc;
  uint64_t entries = 0;
  kvjit_status status = kvjit_cache_clear(ctx, &entries);
  if (status != KVJIT_OK) return library_error(cmd, "clearing the cache", status);
  printf("removed %" PRIu64 " entries from %s\n", entries, info.write_dir);
  return 0;
}


static void print_read_dir(const char *dir, void *user) {
  (void)user;
  printf("read:  %s\n", dir);
}

static int cache_path(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  (void)o;
  kvjit_cache_info info;
  kvjit_status status = kvjit_context_cache_info(ctx, &info);
  if (status != KVJIT_OK) return library_error(cmd, "cache info", status);
  if (info.write_dir != NULL)
    printf("write: %s\n", info.write_dir);
  else
    printf("write: none (memory only: %s)\n", info.degraded_reason ? info.degraded_reason : "disabled");
  for_each_dir(info.read_dirs, print_read_dir, NULL);
  return 0;
}

static int cache_export(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  uint64_t entries = 0;
  kvjit_status status = kvjit_cache_export(ctx, o->file, o->all, &entries);
  if (status != KVJIT_OK) return library_error(cmd, "exporting the cache", status);
  printf("exported %" PRIu64 " entries to %s\n", entries, o->file);
  return 0;
}

static int cache_import(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  uint64_t imported = 0, present = 0, bad = 0;
  kvjit_status status = kvjit_cache_import(ctx, o->file, &imported, &present, &bad);
  if (status != KVJIT_OK) return library_error(cmd, "importing the pack", status);
  printf("imported %" PRIu64 " entries from %s (%" PRIu64 " already cached, %" PRIu64 " bad)\n", imported, o->file,
         present, bad);
  return bad != 0 ? EXIT_FAILURE : 0;
}

typedef int (*cache_action)(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o);

static const struct cache_command {
  const char *name;
  cache_action action;
  const char *summary;
  const char *help; /* options beyond the cache ones */
} cache_commands[] = {
    {"ls", cache_ls, "list entries: target, size, age, dir (rw/ro), compiler, and what each is (an op's variant)",
     "  -a, --all               also list the read-only dirs ($KVJIT_CACHE_PATH)\n"
     "  -l, --long              also print each entry's path\n"
     "      --json              one JSON object per entry (an array), for tools; \"miss\" says whether\n"
     "                          this process's lookup of its variant would miss (\"none\": it hits; else\n"
     "                          the cause) and \"explanation\" why, as `kvjit cache check` does\n"},
    {"verify", cache_verify, "check every entry's checksum and alias; quarantine bad ones (exit 1 if any)",
     "  -a, --all               also check the read-only dirs (bad ones are reported, not moved)\n"},
    {"prune", cache_prune, "evict least recently used entries down to a size",
     "      --max-size SIZE     e.g. 500M, 2G, 1048576 (K, M, G, T: powers of 1024, also KiB or KB;\n"
     "                          default: the budget, $KVJIT_CACHE_MAX_SIZE or 2G)\n"},
    {"clear", cache_clear, "remove every entry of the writable dir", ""},
    {"path", cache_path, "print the writable dir and the read-only dirs", ""},
    {"export", cache_export, "write every good entry to one verified file FILE (a pack)",
     "  -a, --all               also export the read-only dirs' entries\n"},
    {"import", cache_import, "import a pack FILE (made by export) into the writable dir", ""},
};

static void print_cache_help(FILE *out) {
  fputs("Usage: kvjit cache COMMAND [options]\n\nCommands:\n", out);
  for (size_t i = 0; i < ARRAY_SIZE(cache_commands); i++)
    fprintf(out, "  %-8s %s\n", cache_commands[i].name, cache_commands[i].summary);
  fprintf(out, "  %-8s %s\n", "check", "would a server hit? prewarm's variant options, looked up in the local dirs and the remote");
  fputs("\nexport and import take the pack's path: 'kvjit cache export FILE', 'kvjit cache import FILE'.\n"
        "Each takes --cache-dir DIR, --cache-path DIRS and --help.\n", out);
}

int cmd_cache(int argc, char **argv) {
  if (argc < 2) {
    print_cache_help(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    print_cache_help(stdout);
    return 0;
  }
  if (strcmp(argv[1], "check") == 0) return cmd_check(argc - 1, argv + 1);
  const struct cache_command *command = NULL;
  for (size_t i = 0; i < ARRAY_SIZE(cache_commands) && command == NULL; i++)
    if (strcmp(argv[1], cache_commands[i].name) == 0) command = &cache_commands[i];
  if (command == NULL) {
    const char *words[ARRAY_SIZE(cache_commands) + 1] = {"check"};
    for (size_t i = 0; i < ARRAY_SIZE(cache_commands); i++) words[i + 1] = cache_commands[i].name;
    const char *near = nearest_word(argv[1], words, ARRAY_SIZE(words));
    if (near != NULL) return usage_error("cache", "unknown command '%s'; did you mean '%s'?", argv[1], near);
    return usage_error("cache", "unknown command '%s'", argv[1]);
  }

  char cmd[32];
  snprintf(cmd, sizeof cmd, "cache %s", command->name);
  enum { OPT_MAX_SIZE = 300, OPT_JSON };
  static const struct option long_options[] = {
      {"all", no_argument, NULL, 'a'},
      {"json", no_argument, NULL, OPT_JSON},
      {"long", no_argument, NULL, 'l'},
      {"max-size", required_argument, NULL, OPT_MAX_SIZE},
      {"help", no_argument, NULL, 'h'},
      CACHE_LONG_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  bool is_ls = command->action == cache_ls, is_verify = command->action == cache_verify;
  bool is_export = command->action == cache_export, takes_file = is_export || command->action == cache_import;
  cache_cmd_opts o;
  memset(&o, 0, sizeof o);
  argc--;
  argv++;
  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, ":alh", long_options, NULL)) != -1) {
    if (c == 'h') {
      printf("Usage: kvjit %s [options]%s\n%s.\n\nOptions:\n%s" CACHE_OPTIONS_HELP
             "  -h, --help              this help\n",
             cmd, takes_file ? " FILE" : "", command->summary, command->help);
      return 0;
    }
    if (c == 'a' && (is_ls || is_verify || is_export)) o.all = true;
    else if (c == OPT_JSON && is_ls) o.json = true;
    else if (c == 'l' && is_ls) o.long_format = true;
    else if (c == OPT_MAX_SIZE && command->action == cache_prune) {
      o.have_max_size = true;
      if (kvjit_parse_size(optarg, &o.max_size) != KVJIT_OK)
        rc = usage_error(cmd, "bad value '%s' for --max-size (%s)", optarg, kvjit_last_error());
      else if (o.max_size == 0) /* as KVJIT_CACHE_MAX_SIZE: a budget is at least one byte */
        rc = usage_error(cmd, "bad value '%s' for --max-size (at least 1 byte; 'kvjit cache clear' removes "
                              "every entry)", optarg);
    } else if (c == '?' || c == ':') {
      rc = getopt_error(cmd, c, argv, long_options);
    } else if (!cache_option(c, &o.cache)) {
      /* An option another cache command takes. */
      const char *name = "?";
      for (const struct option *opt = long_options; opt->name != NULL; opt++)
        if (opt->val == c) name = opt->name;
      rc = usage_error(cmd, "--%s does not apply here", name);
    }
  }
  if (rc == 0 && takes_file) {
    if (optind + 1 != argc) rc = usage_error(cmd, "needs one FILE (the pack)");
    else if (argv[optind][0] == '\0') rc = usage_error(cmd, "FILE: empty");
    else o.file = argv[optind++];
  }
  if (rc == 0) rc = check_no_operands(cmd, argc, argv);
  if (rc != 0) return rc;

  /* ls and path only look: they create nothing, not even a missing dir. The others look first. */
  bool looks_only = command->action == cache_ls || command->action == cache_path || is_export;
  if (!looks_only && command->action != cache_import) { /* import makes the dir it fills */
    int answer = 0;
    rc = look_before(cmd, &o, is_verify, &answer);
    if (rc == -1) return answer;
    if (rc != 0) return rc;
  }
  kvjit_context *ctx = NULL;
  rc = open_context_mode(cmd, &o.cache, looks_only, &ctx);
  if (rc != 0) return rc;
  kvjit_cache_info info;
  if (is_verify && kvjit_context_cache_info(ctx, &info) == KVJIT_OK && info.write_dir == NULL) {
    /* There, but not writable (a read-only mount): check every entry all the same, move none. */
    fprintf(stderr, "kvjit %s: note: %s; bad entries are reported and left in place\n", cmd,
            info.degraded_reason ? info.degraded_reason : "the cache dir is not writable");
    kvjit_context_destroy(ctx);
    rc = open_context_mode(cmd, &o.cache, true, &ctx);
    if (rc != 0) return rc;
    o.in_place = true;
  }
  rc = command->action(cmd, ctx, &o);
  kvjit_context_destroy(ctx);
  return rc;
}
