/*
 * Temp dirs for the CPU test programs: one mkdtemp'd dir under /tmp per program (or per case),
 * removed with everything under it, read-only parts included.
 */
#ifndef KVJIT_TEST_UTIL_H
#define KVJIT_TEST_UTIL_H

#include <stddef.h>

/** mkdtemp "/tmp/kvjit-test-NAME-XXXXXX" into @p dir. @return 0, or -1 (errno set). */
int test_dir_make(char *dir, size_t capacity, const char *name);

/** Remove @p dir and everything under it (made writable first). @return 0, or -1. */
int test_dir_remove(const char *dir);

#endif
