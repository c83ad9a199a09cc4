/* Status codes and the thread-local last-error detail (internal). */
#ifndef KVJIT_STATUS_INTERNAL_H
#define KVJIT_STATUS_INTERNAL_H

#include "kvjit_tools.h"

#if defined(__GNUC__)
#define KVJIT_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
/* A function only failures call: the compiler moves the paths to it out of the hot code (an op
 * call's validation is mostly such paths, and runs between driver calls that evict it). */
#define KVJIT_COLD __attribute__((cold))
#else
#define KVJIT_PRINTF(fmt, args)
#define KVJIT_COLD
#endif

/** Set the thread's last-error detail and return @p status, so that `return kvjit_fail(...)` reads well. */
kvjit_status kvjit_fail(kvjit_status status, const char *fmt, ...) KVJIT_PRINTF(2, 3) KVJIT_COLD;

/**
 * The one check of every versioned struct (libgit2's GIT_ERROR_CHECK_VERSION): 1 <= @p version
 * <= @p newest, or KVJIT_ERR_INVALID_ARGUMENT "what->version: V, expected 1..N (use INIT)".
 * A caller built against an older header passes an older version; the library then reads and
 * writes only the fields that version has.
 */
kvjit_status kvjit_check_version(unsigned version, unsigned newest, const char *what, const char *init);

/**
 * The body of every public kvjit_*_init(ptr, version): @p out gets the defaults @p defaults (the
 * struct's _INIT) for the caller's @p version, exactly the bytes that version has (@p ends[v]: a
 * caller built against an older header has a smaller struct), its version field (the first
 * member) set to @p version. KVJIT_ERR_INVALID_ARGUMENT names @p what on a NULL or a bad version.
 */
kvjit_status kvjit_struct_init(void *out, unsigned version, const void *defaults, const size_t *ends, unsigned newest,
                               const char *what);

/** Clear the thread's last-error detail (at the start of public calls that succeed silently). */
void kvjit_clear_error(void);

/** Write one "kvjit: ..." line to stderr (logging and warnings). */
void kvjit_log_line(const char *fmt, ...) KVJIT_PRINTF(1, 2);

#endif
