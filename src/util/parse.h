/*
 * kvjit's environment variables, read through the strict parser of parse.c (kvjit_parse_size()
 * and friends, declared in kvjit.h). A variable that is unset or empty takes its default; one
 * whose value does not parse, or is out of range, takes it too, with one warning line naming the
 * variable, the value and the default (unless logging is off).
 */
#ifndef KVJIT_PARSE_H
#define KVJIT_PARSE_H

#include <stdint.h>

#include "kvjit_tools.h"

/** $name, or NULL when it is unset or empty (empty means unset everywhere). */
const char *kvjit_env_text(const char *name);

/**
 * $name as a boolean (kvjit_parse_bool()), else @p fallback. @p log: -1 warnings only, 0 silent,
 * 1 verbose (see kvjit_cache_config); a bad value warns unless @p log is 0.
 */
int kvjit_env_bool(const char *name, int fallback, int log);

/** $name as a size (kvjit_parse_size()) in [@p min, @p max], else @p fallback (with a warning). */
uint64_t kvjit_env_size(const char *name, uint64_t min, uint64_t max, uint64_t fallback, int log);

/**
 * $name as milliseconds (kvjit_parse_duration_ms()) in [@p min, @p max], else @p fallback (with a
 * warning). Every duration has a finite range: a bound of 0 where 0 would mean "wait forever" to
 * a lower layer (libcurl) is @p min 1.
 */
uint64_t kvjit_env_duration_ms(const char *name, uint64_t min, uint64_t max, uint64_t fallback, int log);

#endif
