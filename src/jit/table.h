/*
 * A context's program table: one program per key, built once (the thread that inserts a BUILDING
 * program builds it; the others wait on ctx->built), failures remembered unless they may pass.
 * Every function here but kvjit_table_finish() and kvjit_table_has() runs under ctx->lock.
 */
#ifndef KVJIT_TABLE_H
#define KVJIT_TABLE_H

#include "context.h"
#include "key.h"
#include "kvjit_tools.h"
#include "program.h"

/** Under ctx->lock: the program of @p key, or NULL. */
kvjit_program *kvjit_table_find(kvjit_context *ctx, const kvjit_key *key);

/** Under ctx->lock: put @p p (not in the table) into it. */
void kvjit_table_insert(kvjit_context *ctx, kvjit_program *p);

/** 1 when failure @p st is the same on every try (remembered); out of memory, I/O and the like are not. */
int kvjit_table_failure_is_lasting(kvjit_status st);

/**
 * Finish a BUILDING program with @p st (its error the last error) and wake the threads waiting for
 * it. A failure that may pass (@p transient, or one that is not lasting) leaves the table, so that
 * a later call tries again; the program itself stays until the context goes (a reader may hold it).
 */
void kvjit_table_finish(kvjit_context *ctx, kvjit_program *p, kvjit_status st, int transient);

/** 1 when the table has @p key (built, building or failed). */
int kvjit_table_has(kvjit_context *ctx, const kvjit_key *key);

#endif
