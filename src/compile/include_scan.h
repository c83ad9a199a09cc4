/*
 * The directive scanner of includes.c: finds every #include / #include_next / __has_include of a
 * text, in every preprocessor branch (a superset of what the preprocessor will read), skipping
 * comments and string and character literals (raw strings included).
 */
#ifndef KVJIT_INCLUDE_SCAN_H
#define KVJIT_INCLUDE_SCAN_H

#include <stddef.h>

#include "kvjit_tools.h"

typedef struct kvjit_scan_directive {
  size_t start, end; /* the name with its delimiters; for a computed one, where the directive is */
  int angled;        /* <...> */
  int computed;      /* the name is not a literal "..." or <...> (a macro): cannot be keyed */
  int has_include;   /* __has_include rather than #include */
} kvjit_scan_directive;

/**
 * Scan @p text (@p len bytes, NUL-terminated). @p out receives a malloc'd array (NULL when there are none).
 * #include_next is reported as computed: which file it reads depends on the dir the including
 * file was found in, which kvjit does not reproduce.
 */
kvjit_status kvjit_scan(const char *text, size_t len, kvjit_scan_directive **out, size_t *count);

#endif
