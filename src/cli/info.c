/* kvjit info: library, NVRTC, driver and GPUs, cache dirs. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------------------------------------------ */
/* info                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct dir_usage {
  const entry_table *table;
  bool read_only;
} dir_usage;

static void print_dir_usage(const char *dir, void *user) {
  const dir_usage *u = user;
  uint64_t entries = 0, bytes = 0;
  for (size_t i = 0; i < u->table->count; i++) {
    if (!under_dir(u->table->rows[i].path, dir)) continue;
    entries++;
    bytes += u->table->rows[i].bytes;
  }
  char size[32];
  const char *state = access(dir, F_OK) != 0 ? "missing" : access(dir, W_OK) == 0 ? "writable" : "not writable";
  printf("  %s %s: %" PRIu64 " entries, %s, %s\n", u->read_only ? "read: " : "write:", dir, entries,
         human_size(bytes, size, sizeof size), state);
}

int cmd_info(int argc, char **argv) {
  static const char cmd[] = "info";
  static const struct option long_options[] = {
      {"help", no_argument, NULL, 'h'},
      CACHE_LONG_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  cache_opts cache = {NULL, NULL};
  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    if (c == 'h') {
      fputs("Usage: kvjit info [options]\n"
            "Library, NVRTC and driver versions, the archs NVRTC builds, GPUs, cache dirs.\n\nOptions:\n"
            CACHE_OPTIONS_HELP "  -h, --help              this help\n",
            stdout);
      return 0;
    }
    if (!cache_option(c, &cache)) rc = getopt_error(cmd, c, argv, long_options);
  }
  if (rc == 0) rc = check_no_operands(cmd, argc, argv);
  if (rc != 0) return rc;

  printf("kvjit:   %s\n", kvjit_version_string());

  int major = 0, minor = 0;
  kvjit_status status = kvjit_nvrtc_version(&major, &minor);
  if (status == KVJIT_ERR_NO_NVRTC) {
    /* Not an error: everything but compiling works (a warm cache serves). */
    printf("nvrtc:   none (%s)\n", kvjit_last_error());
  } else if (status != KVJIT_OK) {
    return library_error(cmd, "NVRTC version", status);
  } else {
    int archs[128];
    size_t count = 0;
    status = kvjit_nvrtc_archs(archs, ARRAY_SIZE(archs), &count);
    if (status != KVJIT_OK) return library_error(cmd, "NVRTC archs", status);
    printf("nvrtc:   %d.%d, builds", major, minor);
    for (size_t i = 0; i < count && i < ARRAY_SIZE(archs); i++) printf(" sm_%d", archs[i]);
    putchar('\n');
    const char *path = NULL, *why = NULL;
    /* The NVRTC version is in every key: which one this is, and why, explains a cache that misses. */
    if (kvjit_nvrtc_info(&path, &why) == KVJIT_OK) printf("         %s\n         chosen: %s\n", path, why);
  }

  int driver = 0;
  status = kvjit_driver_version(&driver);
  if (status == KVJIT_ERR_NO_DRIVER) {
    puts("driver:  none");
  } else if (status != KVJIT_OK) {
    rc = library_error(cmd, "driver version", status);
  } else {
    printf("driver:  %d.%d\n", driver / 1000, driver % 1000 / 10);
    int devices = 0;
    status = kvjit_device_count(&devices);
    if (status != KVJIT_OK && status != KVJIT_ERR_NO_DEVICE) rc = library_error(cmd, "device count", status);
    for (int i = 0; i < devices; i++) {
      char name[256];
      int sm = 0;
      status = kvjit_device_info(i, name, sizeof name, &sm);
      if (status != KVJIT_OK) rc = library_error(cmd, "device info", status);
      else printf("gpu %d:   %s (sm_%d)\n", i, name, sm);
    }
    if (devices == 0) puts("gpus:    none");
  }

  kvjit_context *ctx = NULL;
  int ctx_rc = open_context_mode(cmd, &cache, true, &ctx); /* info creates nothing */
  if (ctx_rc != 0) return ctx_rc;
  entry_table table = {0};
  ctx_rc = list_entries(cmd, ctx, true, false, &table, NULL);
  if (ctx_rc == 0) {
    kvjit_cache_info info;
    kvjit_context_cache_info(ctx, &info); /* succeeded inside list_entries() */
    char budget[32];
    printf("cache:   budget %s\n", human_size(info.max_bytes, budget, sizeof budget));
    dir_usage write = {&table, false}, read = {&table, true};
    if (info.write_dir != NULL)
      print_dir_usage(info.write_dir, &write);
    else
      printf("  write: none (memory only: %s)\n", info.degraded_reason ? info.degraded_reason : "disabled");
    for_each_dir(info.read_dirs, print_dir_usage, &read);
    const char *urls = "";
    int read_write = 0, reachable = 0;
    if (kvjit_context_remote(ctx, &urls, &read_write, 1, &reachable) == KVJIT_OK && urls[0] != '\0')
      printf("  remote: %s (%s): %s\n", urls, read_write ? "read-write" : "read-only",
             reachable ? "answers" : "does not answer (see the warning above)");
    else
      puts("  remote: none ($KVJIT_REMOTE_CACHE)");
  }
  entry_table_free(&table);
  kvjit_context_destroy(ctx);
  return rc != 0 ? rc : ctx_rc;
}
