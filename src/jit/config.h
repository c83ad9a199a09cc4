/*
 * A context's configuration: its options, then the environment through the strict parser
 * (parse.h), then the defaults, resolved once at kvjit_context_create().
 */
#ifndef KVJIT_CONFIG_H
#define KVJIT_CONFIG_H

#include "cache.h"
#include "kvjit_tools.h"

typedef struct kvjit_context_config {
  int log;                       /* -1 warnings only, 0 silent, 1 verbose */
  kvjit_compile_mode compile_mode;
  kvjit_cache_config cache;      /* its strings point into the options, the environment or below */
  char *remote_header;           /* the auth header line, read from a file or the environment */
} kvjit_context_config;

/** Resolve @p options (a checked version); KVJIT_ERR_INVALID_ARGUMENT names a bad field. */
kvjit_status kvjit_context_config_make(const kvjit_context_options *options, kvjit_context_config *out);
void kvjit_context_config_free(kvjit_context_config *config);

#endif
