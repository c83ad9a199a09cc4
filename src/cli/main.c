/*
 * kvjit: the command-line tool. Fills the cubin cache on a build machine (no GPU, no driver needed),
 * then inspects and maintains it. This file parses the command word and dispatches; each command
 * lives in its own file (prewarm.c, cache.c, info.c), and all of them use the public API only.
 *
 * Exit status: 0 success; 1 a library call failed, a variant failed to compile or verify found bad
 * entries; 2 bad command line (one line on stderr naming the flag and the value).
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ------------------------------------------------------------------------------------------ */
/* main                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void print_usage(FILE *out) {
  fputs("Usage: kvjit COMMAND [options]\n"
        "Compile kvjit's kernels ahead of time and maintain the cubin cache.\n"
        "\n"
        "Commands:\n"
        "  prewarm     compile store_kv_cache variants into the cache for given archs (no GPU needed)\n"
        "  cache       ls | verify | prune | clear | path\n"
        "  info        versions, archs NVRTC builds, driver and GPUs, cache dirs\n"
        "\n"
        "  -h, --help      this help ('kvjit COMMAND --help' for a command's)\n"
        "  -V, --version   print the library version\n"
        "\n"
        "Ship a cache: 'kvjit prewarm --arch sm_90 --cache-dir DIR' on a build machine, copy DIR into\n"
        "the image, and run the server with KVJIT_CACHE_PATH=DIR: it starts with no compile.\n",
        out);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[1];
  if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 || strcmp(command, "help") == 0) {
    print_usage(stdout);
    return 0;
  }
  if (strcmp(command, "-V") == 0 || strcmp(command, "--version") == 0) {
    printf("kvjit %s\n", kvjit_version_string());
    return 0;
  }
  /* getopt_long() then sees the command as argv[0] and only its options. */
  opterr = 0;
  if (strcmp(command, "prewarm") == 0) return cmd_prewarm(argc - 1, argv + 1);
  if (strcmp(command, "cache") == 0) return cmd_cache(argc - 1, argv + 1);
  if (strcmp(command, "info") == 0) return cmd_info(argc - 1, argv + 1);
  fprintf(stderr, "kvjit: unknown command '%s' (see 'kvjit --help')\n", command);
  return EXIT_USAGE;
}
