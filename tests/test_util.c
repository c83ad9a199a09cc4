#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>

int test_dir_make(char *dir, size_t capacity, const char *name) {
  int n = snprintf(dir, capacity, "/tmp/kvjit-test-%s-XXXXXX", name);
  if (n < 0 || (size_t)n >= capacity) return -1;
  return mkdtemp(dir) ? 0 : -1;
}

int test_dir_remove(const char *dir) {
  char cmd[1200];
  int n = snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", dir, dir);
  if (n < 0 || (size_t)n >= sizeof cmd) return -1;
  if (system(cmd) != 0) {
    fprintf(stderr, "could not remove %s\n", dir);
    return -1;
  }
  return 0;
}
