/*
 * Bad entries of a cache (quarantine.c): moved aside into D/v2/quarantine (the newest few, for a
 * day), or, in a layer that cannot be written, remembered per cache object so that each is
 * reported once.
 */
#ifndef KVJIT_QUARANTINE_H
#define KVJIT_QUARANTINE_H

#include <sys/stat.h>

#include "cache_internal.h"

file_id cache_file_id(const struct stat *st);

/* Remember a bad file that stays in place, so later lookups skip it without a second report. */
void cache_remember_bad(kvjit_cache *c, const struct stat *st);

/* 1 when this very file was found bad before. */
int cache_known_bad(kvjit_cache *c, const struct stat *st);

/*
 * Move dir/name aside into dir/quarantine (when it is still the file @p judged; NULL: whatever is
 * there), then keep the quarantine small. Falls back to unlinking when there is no usable
 * quarantine dir. 1 when the file is out of the way.
 */
int cache_quarantine(kvjit_cache *c, const char *dir, const char *name, const struct stat *judged);

/* Remove quarantined files past QUARANTINE_KEEP_SECONDS and all but the newest
 * QUARANTINE_KEEP_FILES. */
void cache_trim_quarantine(const char *dir);

#endif
