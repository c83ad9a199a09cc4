/*
 * kvjit: the command-line tool. Fills the cubin cache on a build machine (no GPU, no driver needed),
 * then inspects and maintains it. This file parses the command word and dispatches; each command
 * lives in its own file (prewarm.c, cache.c, info.c), and all of them use the public API only.
 *
 * Exit status: 0 success; 1 a library call failed, a variant failed to compile or verify found bad
 * entries; 2 bad command line (one line on stderr naming the flag and the value).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* ------------------------------------------------------------------------------------------ */
/* main                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void print_usage(FILE *out) {
  fputs("Usage: kvjit COMMAND [options]\n"
        "Compile kvjit's kernels ahead of time and maintain the cubin cache.\n"
        "\n"
        "Commands:\n"
        "  prewarm        compile an op's variants (store_kv_cache, transfer_kv) into the cache for\n"
        "                 given archs (no GPU needed)\n"
        "  cache ls       list the entries: target, size, age, compiler, which op variant each is\n"
        "  cache check    would a server hit? prewarm's options, looked up instead of compiled\n"
        "  cache verify   check every entry; quarantine bad ones\n"
        "  cache export FILE   write the cache as one verified file (a pack)\n"
        "  cache import FILE   import a pack into the cache\n"
        "  cache prune    evict least recently used entries down to a size; also: clear, path\n"
        "  info           versions, archs NVRTC builds, driver and GPUs, cache dirs, remote\n"
        "\n"
        "  -h, --help      this help ('kvjit COMMAND --help' for a command's)\n"
        "  -V, --version   print the library version\n"
        "\n"
        "Ship a cache: 'kvjit prewarm --arch sm_90 --cache-dir DIR' on a build machine, copy DIR into\n"
        "the image, and run the server with KVJIT_CACHE_PATH=DIR: it starts with no compile.\n"
        "\n"
        "Durations (milliseconds, plain digits; out of range: a warning and the default):\n"
        "  KVJIT_LOCK_TIMEOUT_MS            0 (do not wait) to 86400000, default 60000\n"
        "  KVJIT_REMOTE_TIMEOUT_MS          1 to 600000, default 2000 (0 never means 'no limit')\n"
        "  KVJIT_REMOTE_CONNECT_TIMEOUT_MS  1 to 600000, default 500\n"
        "  KVJIT_REMOTE_BACKOFF_MS          0 to 86400000, default 30000\n"
        "The README's Environment section lists every variable.\n",
        out);
}

/* An unknown command word, with the nearest command or option when it looks like a typo of one. */
static int unknown_command(const char *command) {
  static const char *const words[] = {"prewarm", "cache", "info", "help", "--help", "--version"};
  const char *near = nearest_word(command, words, ARRAY_SIZE(words));
  const char *kind = command[0] == '-' ? "option" : "command";
  if (near != NULL)
    fprintf(stderr, "kvjit: unknown %s '%s'; did you mean '%s'? (see 'kvjit --help')\n", kind, command, near);
  else
    fprintf(stderr, "kvjit: unknown %s '%s' (see 'kvjit --help')\n", kind, command);
  return EXIT_USAGE;
}

/* A closed stdin, stdout or stderr is /dev/null from here on: else the first file opened (a cache
 * lock, an entry) would take its number and receive what is printed. */
static void reopen_closed_stdio(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int null = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null >= 0 && null != fd) close(null); /* not the lowest free fd after all: leave it closed */
  }
}

/* Exit status 1 when stdout could not take everything printed (a full disk, a closed pipe): a
 * listing or a dry run that was cut short must not report success. */
static int finish_stdout(int rc) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
  int err = errno;
  fprintf(stderr, "kvjit: cannot write to standard output%s%s\n", err ? ": " : "", err ? strerror(err) : "");
  return rc == 0 ? EXIT_FAILURE : rc;
}

static int run(int argc, char **argv) {
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
  return unknown_command(command);
}

int main(int argc, char **argv) {
  reopen_closed_stdio();
  return finish_stdout(run(argc, argv));
}
