/*
 * The lock-free fast table of a context: exact 128-bit keys (ops pack their variant into one; no
 * hashing) to loaded kernels. Lookups are safe from any thread, allocate nothing and make no
 * syscall; entries are never removed while the table lives.
 */
#ifndef KVJIT_FAST_TABLE_H
#define KVJIT_FAST_TABLE_H

#include "jit.h"

typedef struct kvjit_fast_table kvjit_fast_table;

kvjit_status kvjit_fast_table_create(kvjit_fast_table **out);
void kvjit_fast_table_destroy(kvjit_fast_table *table);

/** The kernel published under @p key, or NULL. */
const kvjit_kernel *kvjit_fast_table_lookup(const kvjit_fast_table *table, kvjit_fast_key key);

/**
 * Publish key -> kernel (idempotent; the first insert of a key wins).
 * @return KVJIT_ERR_BUSY when the table is full (the caller still has its kernel: launch it anyway).
 */
kvjit_status kvjit_fast_table_insert(kvjit_fast_table *table, kvjit_fast_key key, const kvjit_kernel *kernel);

/** Visit every kernel in the table (not on a hot path). */
void kvjit_fast_table_foreach(const kvjit_fast_table *table, void (*visit)(const kvjit_kernel *kernel, void *user),
                              void *user);

#endif
