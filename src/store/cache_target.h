/*
 * Files kvjit writes outside its entries (exports, the manifest): never over a special file,
 * never inside a cache dir (cache_target.c).
 */
#ifndef KVJIT_CACHE_TARGET_H
#define KVJIT_CACHE_TARGET_H

#include "kvjit_tools.h"

/**
 * The one check of every file kvjit writes outside its entry names (cache export's pack, the
 * manifest it records to): the target must be absent or a regular file (kvjit_replaceable()), and
 * must not lie inside a kvjit cache dir, this cache's or any other (a dir that holds v2/lock, or
 * that dir's v2), whose files only the cache writes. @p what names the writer in the message.
 * @return KVJIT_OK, or KVJIT_ERR_INVALID_ARGUMENT naming the path, why and the errno.
 */
kvjit_status kvjit_cache_check_target(const char *path, const char *what);

#endif
