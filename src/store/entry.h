/*
 * The cache entry file format (one self-describing file per key). Specified in cache/FORMAT.md;
 * this file and entry.c are the only code that knows the layout.
 */
#ifndef KVJIT_ENTRY_H
#define KVJIT_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"
#include "kvjit_tools.h"

#define KVJIT_ENTRY_MAGIC "KVJITENT"
#define KVJIT_ENTRY_FIXED_BYTES 88u
/** Largest header and payload the format allows; a file past their sum is not an entry. */
#define KVJIT_ENTRY_MAX_HEADER_BYTES (1u << 20)
#define KVJIT_ENTRY_MAX_PAYLOAD_BYTES (256ull << 20)
#define KVJIT_ENTRY_MAX_BYTES (KVJIT_ENTRY_MAX_HEADER_BYTES + KVJIT_ENTRY_MAX_PAYLOAD_BYTES)
#define KVJIT_ENTRY_MAX_KERNELS 4096u
/* Entry files of version 3 add the key inputs' digests (below) to version 2's header; both read.
 * Keys, dir names and remote URLs keep KVJIT_CACHE_FORMAT_VERSION (2): the key did not change. */
#define KVJIT_ENTRY_VERSION 3u
#define KVJIT_ENTRY_DIGESTS_BYTES 64u

/**
 * Digests of the inputs a key was computed from, recorded so that a miss can say which one
 * differs (miss.h). Not the inputs: no path, source or option text. A zero digest is unknown
 * (nvrtc: the library has no build id) or absent (toolkit: the program uses no toolkit header).
 */
typedef struct kvjit_entry_digests {
  kvjit_key nvrtc;   /* the NVRTC build: XXH3-128 of its ELF build id (the version is in the target) */
  kvjit_key toolkit; /* the toolkit header tree the program included from */
  kvjit_key options; /* the options NVRTC got, in order */
  kvjit_key sources; /* source, in-memory headers, headers read from disk and what each include resolved to */
} kvjit_entry_digests;

/**
 * What an op says about a program it asks for, recorded in the program's cache entry so that a
 * shipped cache can be audited (`kvjit cache ls`): the op's name and the variant as its manifest
 * line. Not part of the key: two variants that plan the same program share one entry.
 */
typedef struct kvjit_entry_label {
  const char *op;      /* e.g. "store_kv_cache" */
  const char *variant; /* e.g. "store_kv_cache arch=90 k_row_bytes=256 ..." */
} kvjit_entry_label;

/** What an entry says about itself besides the payload. */
typedef struct kvjit_entry_meta {
  kvjit_key key;
  kvjit_key content;             /* content digest (see key.h): with the fields below it gives the key */
  kvjit_key_target target;
  int64_t created;
  const char *program;           /* NUL-terminated */
  const char *op;                /* the op that asked for it ("store_kv_cache"), "" for the generic loader */
  const char *variant;           /* the op's variant as its manifest line, "" when none */
  const char *compiler;          /* what compiled it, e.g. "NVRTC 13.0", for audits; "" when unknown */
  size_t num_kernels;
  const char *const *kernels;    /* names as asked */
  const char *const *lowered;    /* lowered (mangled) names */
  const kvjit_entry_digests *digests; /* NULL: all unknown (zero) */
} kvjit_entry_meta;

/** What a header written by this process points to besides the caller's strings. */
typedef struct kvjit_entry_written {
  kvjit_entry_digests digests; /* the caller's, with this process's NVRTC build recorded */
  char compiler[32];           /* "NVRTC 13.0" */
} kvjit_entry_written;

/**
 * The header of an entry this process writes: @p key, @p content, @p target and @p program as
 * given, the key inputs' @p digests with this process's NVRTC identity, created now, the op and
 * variant from @p label ("" when NULL). @p written holds what the header points to and must outlive
 * it; the caller sets the kernels (and the payload kind, for an alias).
 */
kvjit_entry_meta kvjit_entry_meta_for_write(kvjit_entry_written *written, const kvjit_entry_label *label,
                                            const kvjit_key_target *target, const kvjit_key *key,
                                            const kvjit_key *content, const kvjit_entry_digests *digests,
                                            const char *program);

/** A parsed entry: pointers into the caller's buffer (strings are NOT NUL-terminated). */
typedef struct kvjit_entry_view {
  kvjit_key key;
  kvjit_key content;
  kvjit_key_target target;
  int64_t created;
  const char *program, *op, *variant, *compiler;
  size_t program_len, op_len, variant_len, compiler_len;
  uint32_t num_kernels;
  const uint8_t *kernel_table; /* num_kernels × (u16 len, name, u16 len, lowered) */
  const uint8_t *payload;      /* NULL when only the header was parsed */
  uint64_t payload_len;
  uint64_t payload_checksum;   /* XXH3-64 the header records for the payload */
  uint32_t version;            /* the file's format version: 2 (no digests) or 3 */
  kvjit_entry_digests digests; /* all zero for a version 2 entry */
} kvjit_entry_view;

/** Serialise meta + payload into a new malloc'd buffer. */
kvjit_status kvjit_entry_encode(uint8_t **out, size_t *out_len, const kvjit_entry_meta *meta, const void *payload,
                                size_t payload_len);

/**
 * Check the fixed part of an entry (its first KVJIT_ENTRY_FIXED_BYTES bytes) against the size of
 * the whole file, before reading the rest: magic, version, and header and payload sizes that add
 * up to @p file_len within the format's limits.
 * @return KVJIT_OK, or KVJIT_ERR_CORRUPT with the reason in the last error.
 */
kvjit_status kvjit_entry_check_prefix(const uint8_t *data, size_t len, uint64_t file_len);

/**
 * Check and parse a whole file's bytes: magic, version, header checksum, exact size, a key that
 * the header's own fields derive, the expected key (when @p expect is not NULL) and, when
 * @p check_payload, the payload checksum. An alias must have one kernel and a well-formed payload.
 * @return KVJIT_OK, or KVJIT_ERR_CORRUPT with the reason in the last error.
 */
kvjit_status kvjit_entry_parse(kvjit_entry_view *out, const uint8_t *data, size_t len, const kvjit_key *expect,
                               int check_payload);

/**
 * Parse the header of an entry of @p file_len bytes from its first @p len bytes (at least the
 * header size, at most the file): the checks of kvjit_entry_parse() except the payload's. The
 * view's payload is NULL unless @p len is the whole file. For listing a cache without reading
 * payloads.
 */
kvjit_status kvjit_entry_parse_header(kvjit_entry_view *out, const uint8_t *data, size_t len, uint64_t file_len,
                                      const kvjit_key *expect);

/*
 * An alias (payload kind KVJIT_PAYLOAD_ALIAS): the entry of a one-kernel program that was compiled
 * as part of a bundle (a program of many kernels of the same source, options and target; its own
 * ordinary entry under its own key). The alias is an ordinary entry under the one-kernel
 * program's key, which its header derives as for a cubin (kind 1): its kernel, lowered name and
 * content digest are the program's own. Its payload names the bundle and the kernel's place in it.
 */
#define KVJIT_ENTRY_ALIAS_BYTES 24u

typedef struct kvjit_entry_alias {
  kvjit_key bundle; /* the bundle entry's key */
  uint32_t index;   /* the kernel's index among the bundle's kernels */
  uint32_t count;   /* the bundle's kernel count */
} kvjit_entry_alias;

/** The payload of an alias (KVJIT_ENTRY_ALIAS_BYTES bytes). */
void kvjit_entry_alias_encode(uint8_t out[KVJIT_ENTRY_ALIAS_BYTES], const kvjit_entry_alias *alias);

/** The alias of a parsed entry of kind KVJIT_PAYLOAD_ALIAS (kvjit_entry_parse() checked its form). */
void kvjit_entry_alias_get(const kvjit_entry_view *view, kvjit_entry_alias *out);

/** Kernel @p index of a parsed entry (index < view->num_kernels). */
void kvjit_entry_kernel(const kvjit_entry_view *view, uint32_t index, const char **name, size_t *name_len,
                        const char **lowered, size_t *lowered_len);

#endif
