/*
 * Listing and verifying a cache's entries (cache_list.c): `kvjit cache ls`, `verify`, `info`.
 */
#ifndef KVJIT_CACHE_LIST_H
#define KVJIT_CACHE_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "cache_types.h"
#include "entry.h"
#include "key.h"
#include "kvjit_tools.h"

kvjit_status kvjit_cache_visit(kvjit_cache *cache, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                               void *user, uint64_t *bad);

#endif
