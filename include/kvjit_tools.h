/**
 * @file kvjit_tools.h
 * @brief kvjit's tooling, beside the stable core of kvjit.h: a context's counters and caches,
 *        the grammar of values and targets, the driver's view of the machine, ops as data
 *        (variants, manifests, prewarm, statistics) and cache maintenance. The CLI is built on it.
 *
 * Same conventions as kvjit.h, which it includes.
 */
#ifndef KVJIT_TOOLS_H
#define KVJIT_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------ */
/* Counters and caches of a context                                                              */
/* ------------------------------------------------------------------------------------------ */

#define KVJIT_STATS_VERSION 3

/**
 * Why a lookup missed every cache: the key input in which the nearest entry of the same program
 * and kernels (same op variant) differs from this process's (kvjit_context_misses()).
 */
typedef enum kvjit_miss_cause {
  KVJIT_MISS_NONE = 0,    /**< not a miss: cached */
  KVJIT_MISS_COLD = 1,    /**< no entry of this program and kernels in any cache dir: never built here */
  KVJIT_MISS_NVRTC = 2,   /**< cached for another NVRTC version */
  KVJIT_MISS_TARGET = 3,  /**< cached for other targets (sm_100 where sm_90 is asked) */
  KVJIT_MISS_TOOLKIT = 4, /**< cached with other toolkit headers */
  KVJIT_MISS_OPTIONS = 5, /**< cached with other compile options */
  KVJIT_MISS_SOURCE = 6,  /**< cached from other source or header contents (another kvjit, an edited kernel) */
  /** the entry is there but cannot be used (an alias whose bundle is gone, a bad entry), or the
   *  nearest predates digests and differs in options, source or toolkit (one of the three) */
  KVJIT_MISS_OTHER = 7
} kvjit_miss_cause;
#define KVJIT_MISS_CAUSES 8

/** "cold", "nvrtc", "target", "toolkit", "options", "source", "other" ("none" for 0); NULL if unknown. */
KVJIT_API const char *kvjit_miss_cause_name(kvjit_miss_cause cause);

/**
 * Counters of a context since its creation (or the last kvjit_context_reset_stats()). The library
 * writes into it: set version (KVJIT_STATS_INIT) and it writes exactly the fields that version has,
 * so a caller built against an older header keeps working when fields are added.
 */
typedef struct kvjit_stats {
  unsigned version;          /**< KVJIT_STATS_VERSION */
  uint64_t memory_hits;      /**< served from the in-memory table */
  uint64_t disk_hits;        /**< served from a cache file */
  uint64_t compiles;         /**< successful NVRTC compiles */
  uint64_t compile_failures; /**< failed compiles (each remembered, not retried) */
  uint64_t compile_ns;       /**< wall time spent in NVRTC */
  uint64_t bad_entries;      /**< cache files rejected (and quarantined where writable) */
  uint64_t disk_writes;      /**< cache files published */
  uint64_t write_failures;   /**< cache files that could not be written (memory-only fallback) */
  uint64_t lock_waits;       /**< times another process was compiling the same key */
  uint64_t lock_timeouts;    /**< waits that ran out and compiled privately */
  uint64_t loads;            /**< cuLibraryLoadData calls */
  uint64_t evictions;        /**< cache files evicted to keep the byte budget */
  /** compiles kept in memory, not published: an NVRTC state-leaking option (--Ofast-compile) was
   *  used earlier in the process, after which NVRTC compiles differently */
  uint64_t unpublished_compiles;
  /* version 2 */
  uint64_t not_cached;       /**< misses refused under KVJIT_COMPILE=never (KVJIT_ERR_NOT_CACHED) */
  uint64_t remote_hits;      /**< entries fetched from the remote tier and accepted */
  uint64_t remote_misses;    /**< remote lookups answered 404 */
  uint64_t remote_errors;    /**< refusals, 5xx, no connection, truncated or bad entries */
  uint64_t remote_timeouts;  /**< remote requests that ran out of time */
  uint64_t remote_skipped;   /**< remote requests not made while a remote backed off */
  uint64_t remote_writes;    /**< entries PUT to the remote tier */
  uint64_t remote_bytes_in;  /**< bytes of entries fetched */
  uint64_t remote_bytes_out; /**< bytes PUT */
  /* version 3: misses that compiled (or were refused by KVJIT_COMPILE=never), by kvjit_miss_cause */
  uint64_t misses_cold;      /**< nothing of this program and kernels was cached */
  uint64_t misses_nvrtc;     /**< cached for another NVRTC version */
  uint64_t misses_target;    /**< cached for other targets only */
  uint64_t misses_toolkit;   /**< cached with other toolkit headers */
  uint64_t misses_options;   /**< cached with other options */
  uint64_t misses_source;    /**< cached from other source or headers */
  uint64_t misses_other;     /**< KVJIT_MISS_OTHER */
} kvjit_stats;

#define KVJIT_STATS_INIT                                                                         \
  { KVJIT_STATS_VERSION, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/** @p out = KVJIT_STATS_INIT of @p version (1 .. KVJIT_STATS_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_stats_init(kvjit_stats *out, unsigned version);

/** Copy the counters into @p out (whose version must be set: KVJIT_STATS_INIT). */
KVJIT_API kvjit_status kvjit_context_stats(const kvjit_context *ctx, kvjit_stats *out);

/** Start the counters of kvjit_context_stats() from zero again. */
KVJIT_API kvjit_status kvjit_context_reset_stats(kvjit_context *ctx);

/** One explained miss (kvjit_context_misses(), kvjit_variant_explain()). */
typedef struct kvjit_miss_info {
  kvjit_miss_cause cause;
  char key[33];      /**< the key that missed, 32 hex digits ("" when none) */
  /** One line: what missed, the nearest entry's difference and what to do, e.g. "store_kv_cache
   *  arch=90 ... : cached for NVRTC 13.0, this process uses 13.2 (/.../libnvrtc.so.13): set
   *  KVJIT_NVRTC or prewarm with it" */
  char message[768];
} kvjit_miss_info;

/** Most misses a context keeps explained (the first ones; later misses are only counted). */
#define KVJIT_MISSES_KEPT 256

/**
 * The misses of this context (each key once, in order), explained: for each, the entry of the same
 * program and kernels nearest to what this process asks for (in the cache dirs, found through the
 * per-program index a publication keeps, cache/FORMAT.md) and the key input that differs. Each is
 * also logged once when it happens (KVJIT_LOG=0 silences it; a cold miss is logged at KVJIT_LOG=1).
 * @param out array of @p capacity (may be NULL when capacity is 0).
 * @param count receives how many there are (may exceed capacity).
 */
KVJIT_API kvjit_status kvjit_context_misses(const kvjit_context *ctx, kvjit_miss_info *out, size_t capacity,
                                            size_t *count);

/** Where the context caches, as resolved at creation. Strings are owned by the context. */
typedef struct kvjit_cache_info {
  /** writable dir, or NULL when memory-only; for a read_only context, the dir it reads (and
   *  would write), also when it does not exist yet, or NULL when it is refused */
  const char *write_dir;
  const char *read_dirs;      /**< colon-separated read-only dirs searched first ("" if none) */
  const char *degraded_reason; /**< why the writable dir is unusable, or NULL */
  uint64_t max_bytes;         /**< byte budget of write_dir */
} kvjit_cache_info;

KVJIT_API kvjit_status kvjit_context_cache_info(const kvjit_context *ctx, kvjit_cache_info *out);

/**
 * The context's remote cache tier, for `kvjit info`: its URLs as configured ("" when there is none;
 * never the auth header), whether compiles are written to it, and with @p probe set, whether it
 * answers now (one HEAD of a key no entry has; 1 answered, 0 did not or is backing off).
 * @param urls, read_write, reachable optional.
 */
KVJIT_API kvjit_status kvjit_context_remote(kvjit_context *ctx, const char **urls, int *read_write, int probe,
                                            int *reachable);

/* ------------------------------------------------------------------------------------------ */
/* Parsing: the grammar of every number and switch kvjit reads from text                       */
/* ------------------------------------------------------------------------------------------ */

/*
 * The environment, the CLI's flags and the Python binding all use these, so one value means the
 * same everywhere. Each parses the whole string or fails with KVJIT_ERR_INVALID_ARGUMENT and a
 * kvjit_last_error() naming the value; *out is written only on success. No sign, no spaces, no
 * "0x", no fraction, no overflow.
 */

/**
 * A byte count: decimal digits and an optional unit, case-insensitive: B, K, M, G, T, P, E, each
 * a power of 1024, optionally followed by "B" or "iB" ("64K" = "64KiB" = "64KB" = 65536).
 * "1048576", "500M", "2G". Larger than 2^64 - 1 is refused.
 */
KVJIT_API kvjit_status kvjit_parse_size(const char *text, uint64_t *out);

/** A switch: 1, true, yes, on (*out = 1) or 0, false, no, off (*out = 0), case-insensitive. */
KVJIT_API kvjit_status kvjit_parse_bool(const char *text, int *out);

/** A count: plain decimal digits, in [@p min, @p max]. */
KVJIT_API kvjit_status kvjit_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/** Longest duration kvjit_parse_duration_ms() takes: one day. */
#define KVJIT_MAX_DURATION_MS 86400000u

/** A duration in milliseconds: plain decimal digits, 0 to KVJIT_MAX_DURATION_MS. */
KVJIT_API kvjit_status kvjit_parse_duration_ms(const char *text, uint64_t *out);

/* ------------------------------------------------------------------------------------------ */
/* Targets and the driver                                                                      */
/* ------------------------------------------------------------------------------------------ */

/**
 * Architectures NVRTC can build cubins for, as compute capability numbers (75 = sm_75).
 * @param out array of @p capacity ints (may be NULL when capacity is 0).
 * @param count receives how many NVRTC supports (may exceed capacity).
 */
KVJIT_API kvjit_status kvjit_nvrtc_archs(int *out, size_t capacity, size_t *count);

/** NVRTC version, e.g. major 13 minor 0. */
KVJIT_API kvjit_status kvjit_nvrtc_version(int *major, int *minor);

/**
 * Which NVRTC this process uses and why that one (loading it on first use): @p path the file, @p why
 * "KVJIT_NVRTC", a pip wheel next to libkvjit, the toolkit kvjit was built with, or the dynamic
 * loader's path. Static strings. KVJIT_ERR_NO_NVRTC (both NULL; the last error names every place
 * tried) when none loads.
 */
KVJIT_API kvjit_status kvjit_nvrtc_info(const char **path, const char **why);

/** CUDA driver version (e.g. 13000); KVJIT_ERR_NO_DRIVER without one. */
KVJIT_API kvjit_status kvjit_driver_version(int *version);

/** Number of CUDA devices; KVJIT_ERR_NO_DRIVER without a driver. */
KVJIT_API kvjit_status kvjit_device_count(int *count);

/** Name (NUL-terminated, truncated to @p capacity) and compute capability of a device. */
KVJIT_API kvjit_status kvjit_device_info(int ordinal, char *name, size_t capacity, int *sm);

/**
 * Compute capability of the device of the calling thread's current CUDA context (90 for sm_90).
 * Without a current context, that of device 0.
 */
KVJIT_API kvjit_status kvjit_current_sm(int *sm);

/**
 * Parse a plain compute capability, "sm_90", "90" or "9.0", or a GPU's name ("h100", "H200",
 * "l40s", "b200"; any case, spaces and dashes ignored), into 90: what ops (store_kv_cache) and
 * their prewarm build for. A suffix or a PTX target ("sm_90a", "compute_90") is refused with
 * KVJIT_ERR_INVALID_ARGUMENT naming the plain arch to use: those are targets of the generic
 * loader (kvjit_parse_target()).
 */
KVJIT_API kvjit_status kvjit_parse_arch(const char *text, int *sm);

/*
 * Targets of the generic loader. A target is an int: a compute capability (90) or'ed with at most
 * one of the kind flags below. A plain compute capability means sm_XY, so 90 is sm_90 wherever a
 * target is taken (kvjit_program_desc.arch, cache listings, kvjit_program_arch()).
 *   sm_90     90                                   cubin for 9.x GPUs from 9.0 on
 *   sm_90a    90 | KVJIT_TARGET_ARCH_SPECIFIC      cubin with 9.0-only features (wgmma, setmaxnreg)
 *   sm_100f   100 | KVJIT_TARGET_FAMILY            cubin with the family's features (10.0, 10.3)
 *   compute_90  90 | KVJIT_TARGET_PTX              PTX the driver finishes for 9.0 and later GPUs
 *   compute_90a, compute_100f: PTX with those features (same GPUs as their cubins)
 */
#define KVJIT_TARGET_CC_MASK 0xffff
#define KVJIT_TARGET_ARCH_SPECIFIC 0x10000
#define KVJIT_TARGET_FAMILY 0x20000
#define KVJIT_TARGET_PTX 0x40000

/**
 * Parse "sm_90", "sm_90a", "sm_100f", "compute_90", "compute_90a", "90" or "9.0" into a target.
 * Spellings are the same in the C API, the CLI, manifests and Python.
 * @return KVJIT_ERR_INVALID_ARGUMENT for anything else (whether this NVRTC builds the target is
 *         checked when a program is built).
 */
KVJIT_API kvjit_status kvjit_parse_target(const char *text, int *target);

/**
 * Spell a target ("sm_90a"; "compute_90" for 90 | KVJIT_TARGET_PTX) into @p out.
 * @return KVJIT_ERR_INVALID_ARGUMENT when @p target is not one, or @p capacity is too small.
 */
KVJIT_API kvjit_status kvjit_target_name(int target, char *out, size_t capacity);

/* ------------------------------------------------------------------------------------------ */
/* Ops: the specialized kernels, described as data                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * Each op (store_kv_cache, transfer_kv, ...) is a kernel template plus a table of variant fields:
 * what its manifest lines hold and what `kvjit prewarm --op NAME` expands. A variant is the op and
 * one value per field; kvjit_variant_check() applies the op's rules, kvjit_variant_format() and
 * kvjit_variant_parse() write and read its manifest line (cache/MANIFEST.md), and
 * kvjit_variant_prewarm() compiles every kernel it may use: the one way, for every op.
 */

/** Element types (kvjit_dtype) by name: the one table of their names, for manifests, the CLI and
 *  the bindings. */
/** "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2", "bytes"; NULL for a value that is no kvjit_dtype. */
KVJIT_API const char *kvjit_dtype_name(kvjit_dtype dtype);
/** Bytes of one element (1 for BYTES and the fp8 types); 0 for a value that is no kvjit_dtype. */
KVJIT_API int kvjit_dtype_bytes(kvjit_dtype dtype);
/**
 * The kvjit_dtype named @p name: a kvjit_dtype_name(), or fp16, float16, half, bfloat16, fp32,
 * float32, float, e4m3, e5m2, or torch's float8_e4m3fn, float8_e5m2 (lower case, as written).
 * @return KVJIT_ERR_INVALID_ARGUMENT naming @p name when it is none of them.
 */
KVJIT_API kvjit_status kvjit_dtype_parse(const char *name, kvjit_dtype *out);

/** How a field's value is written in a manifest line. */
typedef enum kvjit_field_kind {
  KVJIT_FIELD_INT = 1, /**< a plain decimal integer in [min, max] */
  KVJIT_FIELD_WORD = 2 /**< one of words[]: the value is the word's index (NULL entries are no word) */
} kvjit_field_kind;

/** INT: the value is a power of two. */
#define KVJIT_FIELD_POW2 1u
/** The line may leave the field out; its value is then default_value. */
#define KVJIT_FIELD_OPTIONAL 2u
/** WORD: a kvjit_dtype name; the aliases fp16, float16, half, bfloat16, fp32, float32 are read too. */
#define KVJIT_FIELD_DTYPE 4u

/** One field of an op's variants. Static: owned by the library. */
typedef struct kvjit_op_field {
  const char *name;         /**< manifest key ("k_row_bytes"); the CLI flag is --k-row-bytes */
  const char *help;         /**< one line */
  kvjit_field_kind kind;
  unsigned flags;           /**< KVJIT_FIELD_* */
  int64_t min, max;         /**< INT: the range */
  const char *const *words; /**< WORD: words[value] */
  size_t num_words;
  int64_t default_value;    /**< the value of an absent OPTIONAL field */
  /** What `kvjit prewarm` builds when its flag is not given, e.g. "int32,int64"; NULL when the
   *  field has no flag of its own (arch, the rows and the quantizing fields come from --arch and
   *  the model options). */
  const char *prewarm;
} kvjit_op_field;

/** Most fields an op has. */
#define KVJIT_VARIANT_MAX_FIELDS 24

/** An op. Static: owned by the library. */
typedef struct kvjit_op_info {
  const char *name;              /**< first word of its manifest lines, e.g. "transfer_kv" */
  const char *summary;           /**< one line */
  const kvjit_op_field *fields;  /**< in manifest order; fields[0] is always "arch" */
  size_t num_fields;
  int num_classes;               /**< batch-size classes: one variant may use one kernel per class */
} kvjit_op_info;

/** Number of ops in this library. */
KVJIT_API size_t kvjit_op_count(void);
/** Op @p index (0 .. kvjit_op_count() - 1), or NULL. */
KVJIT_API const kvjit_op_info *kvjit_op_get(size_t index);
/** The op named @p name, or NULL. */
KVJIT_API const kvjit_op_info *kvjit_op_find(const char *name);

#define KVJIT_VARIANT_VERSION 1

/** A variant of any op: one value per field of op->fields (WORD fields: the word's index). */
typedef struct kvjit_variant {
  unsigned version;          /**< KVJIT_VARIANT_VERSION */
  const kvjit_op_info *op;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
} kvjit_variant;

/** The variant of @p op with every field at its default (required fields 0: set them). */
KVJIT_API kvjit_status kvjit_variant_init(kvjit_variant *out, const kvjit_op_info *op);

/**
 * Check a variant against its op's rules (ranges, words, and the rules between fields, such as a
 * split that must divide the rows) and put it in canonical form (fields that do not shape the
 * kernel are reset, so that equal variants compare equal with memcmp). arch 0 means "any arch".
 * @return KVJIT_ERR_INVALID_ARGUMENT / KVJIT_ERR_UNSUPPORTED naming the field and the value.
 */
KVJIT_API kvjit_status kvjit_variant_check(kvjit_variant *variant);

/**
 * Give @p variant the layouts of its caches (kvjit_layout): their static part into its fields and
 * the widest accesses their strides allow, as a call with these layouts and 16-byte aligned
 * pointers would key it. store_kv_cache takes 2: the K cache's, then the V cache's (NULL: flat
 * rows); transfer_kv takes 4: the source's K and V caches', then the destination's (NULL: flat
 * rows; one side's two are both given or both NULL, V's NULL for K only). Set the rows, dtypes
 * and (transfer_kv) the locations and layers first; the fields it sets replace any given before.
 * @return KVJIT_ERR_UNSUPPORTED for an op without layouts; KVJIT_ERR_INVALID_ARGUMENT naming the
 *         layout, its field and the value.
 */
KVJIT_API kvjit_status kvjit_variant_set_layouts(kvjit_variant *variant, const kvjit_layout *const *layouts,
                                                 size_t count);

/** Parse one manifest line of any op (trailing newline and # comments allowed); checked. A blank
 *  or comment-only line gives KVJIT_ERR_NOT_FOUND. */
KVJIT_API kvjit_status kvjit_variant_parse(kvjit_variant *out, const char *line);

/** Its manifest line (no newline). @return KVJIT_ERR_INVALID_ARGUMENT if @p capacity is too small. */
KVJIT_API kvjit_status kvjit_variant_format(const kvjit_variant *variant, char *out, size_t capacity);

/**
 * Compile (no driver needed; arch 0 = the current device) into the disk cache every kernel the
 * variant may use, one per distinct plan of its batch classes (as one program when there are
 * several: see kvjit_variants_prewarm()).
 * @param compiled, cached optional: how many kernels were compiled now / were already cached.
 */
KVJIT_API kvjit_status kvjit_variant_prewarm(kvjit_context *ctx, const kvjit_variant *variant, unsigned *compiled,
                                             unsigned *cached);

/**
 * Would a server hit? Counts the kernels kvjit_variant_prewarm() would build by where a lookup
 * finds them now: a local cache dir, the remote tier, or nowhere (then a server compiles; under
 * KVJIT_COMPILE=never it fails). Nothing is compiled or fetched; no driver is needed when the
 * variant's arch is set. A remote that is down counts its kernels as missing.
 * @param local, remote, missing optional.
 */
KVJIT_API kvjit_status kvjit_variant_locate(kvjit_context *ctx, const kvjit_variant *variant, unsigned *local,
                                            unsigned *remote, unsigned *missing);

/**
 * kvjit_variant_locate()'s question with the answer's reason: @p out->cause KVJIT_MISS_NONE when every
 * kernel of the variant is cached locally, else the explanation of the first kernel that is not
 * (what kvjit_context_misses() would say of it at run time). Nothing is compiled or fetched.
 */
KVJIT_API kvjit_status kvjit_variant_explain(kvjit_context *ctx, const kvjit_variant *variant, kvjit_miss_info *out);

/** kvjit_variant_parse() then kvjit_variant_prewarm(): one manifest line of any op. */
KVJIT_API kvjit_status kvjit_prewarm_line(kvjit_context *ctx, const char *line, unsigned *compiled,
                                          unsigned *cached);

/** Most kernels one program of a prewarm holds (kvjit_variants_prewarm()). */
#define KVJIT_PREWARM_GROUP_MAX 32

/** What kvjit_variants_prewarm() did for one variant. */
typedef struct kvjit_prewarm_result {
  kvjit_status status; /**< KVJIT_OK, or why the variant (or one of its kernels) failed */
  unsigned compiled;   /**< its kernels compiled by this call */
  unsigned cached;     /**< its kernels found in the cache (or compiled for a variant before it) */
  char error[256];     /**< the failure's message, "" when none */
} kvjit_prewarm_result;

/**
 * Prewarm many variants (of any ops and archs) at once: what kvjit_variant_prewarm() does for each,
 * with NVRTC's fixed cost paid once per program instead of once per kernel. The distinct kernels
 * of one op and arch are compiled together, at most KVJIT_PREWARM_GROUP_MAX to a program (a
 * bundle); each kernel is still found alone by a later lookup (cache/FORMAT.md: aliases), and a
 * lookup that misses still compiles only its own kernel.
 *
 * For a pool of workers, the kernels are cut into @p parts shares of about equal compile time (by
 * each op's estimate of its kernels' cost) and this
 * call builds share @p part only: @p parts callers with part = 0 .. parts - 1 build every kernel
 * once (one bundle per share and op at least, so parts beyond the cores only cost). Prefer
 * processes to threads: NVRTC 13.0 serializes the compiles of one process on a machine with a GPU
 * (`kvjit prewarm -j` forks one worker per share, each with its own context over the same dirs).
 * @param results @p count entries: what this share did for each variant; a variant's totals are
 *        the sums over the shares, its status the first failure.
 * @return KVJIT_OK when every variant's kernels of this share built, else the first failure (each
 *         variant's own in its result).
 */
KVJIT_API kvjit_status kvjit_variants_prewarm(kvjit_context *ctx, const kvjit_variant *variants, size_t count,
                                              unsigned part, unsigned parts, kvjit_prewarm_result *results);

#define KVJIT_OP_STATS_VERSION 1

/** What a context's op layer has done (all outside the hot path). */
typedef struct kvjit_op_stats {
  unsigned version;          /**< KVJIT_OP_STATS_VERSION */
  uint64_t variants;         /**< (variant, arch, batch class) entries loaded for hot-path lookups */
  uint64_t table_capacity;   /**< slots of the lookup table now (it grows) */
  uint64_t table_grows;      /**< times the lookup table was replaced by a bigger one */
  uint64_t table_overflows;  /**< entries that found no room (looked up under a lock; logged once) */
  uint64_t manifest_lines;   /**< distinct variants recorded in this context (written when a manifest is set) */
} kvjit_op_stats;

#define KVJIT_OP_STATS_INIT { KVJIT_OP_STATS_VERSION, 0, 0, 0, 0, 0 }

/** @p out = KVJIT_OP_STATS_INIT of @p version (1 .. KVJIT_OP_STATS_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_op_stats_init(kvjit_op_stats *out, unsigned version);

/** Copy the op layer's counters into @p out (whose version must be KVJIT_OP_STATS_VERSION). */
KVJIT_API kvjit_status kvjit_op_stats_get(const kvjit_context *ctx, kvjit_op_stats *out);

/**
 * Slot ids at or past the number of slots (and, for transfer_kv, layer pointers it could not use)
 * seen by the kernels of op @p op of this context in the current CUDA context since the last
 * reset. Synchronises with the device.
 * @param reset non-zero to zero the counters after reading them.
 */
KVJIT_API kvjit_status kvjit_op_oob_count(kvjit_context *ctx, const char *op, uint64_t *count, int reset);

/* ------------------------------------------------------------------------------------------ */
/* Cache maintenance (used by the CLI)                                                         */
/* ------------------------------------------------------------------------------------------ */

/** One cache file, as kvjit_cache_list() reports it. */
typedef struct kvjit_cache_entry_info {
  const char *path;       /**< full path */
  const char *key;        /**< 32 hex digits */
  const char *program;    /**< program name */
  const char *kernels;    /**< kernel names, comma-separated */
  int arch;               /**< target (kvjit_target_name() spells it: sm_90, sm_90a, compute_90) */
  uint64_t bytes;         /**< file size */
  int64_t mtime;          /**< last use (seconds since the epoch) */
  /** KVJIT_OK, KVJIT_ERR_CORRUPT or KVJIT_ERR_IO (unreadable); with verify also
   *  KVJIT_ERR_NOT_FOUND for an alias whose bundle is gone or does not hold its kernel (a lookup of
   *  it misses and compiles its kernel alone) */
  kvjit_status status;
  const char *reason;     /**< why it is bad ("" when good), e.g. "payload checksum mismatch" */
  const char *op;         /**< the op that asked for it ("store_kv_cache"), "" for the generic loader */
  const char *variant;    /**< the op's variant as its manifest line, "" when none */
  const char *compiler;   /**< what compiled it, e.g. "NVRTC 13.0" */
  /** An alias (a kernel prewarm compiled as part of a bundle, one program of many kernels): the
   *  bundle entry's key, 32 hex digits; NULL for an entry with a binary of its own. */
  const char *bundle;
} kvjit_cache_entry_info;

/** Called once per entry; return non-zero to stop. */
typedef int (*kvjit_cache_visit_fn)(const kvjit_cache_entry_info *entry, void *user);

/**
 * Visit each entry of the writable cache dir (and, when @p include_read_dirs, the read-only ones).
 * Without @p verify only headers are read (a listing never reads a payload, an alias's 24 bytes
 * aside). With @p verify, every check the loader makes is made (owner and mode, checksums, the key,
 * that the payload is a binary of its arch defining each kernel) and a bad entry of the writable
 * dir is quarantined; then each alias's bundle is read and checked to hold its kernel (an orphan
 * is reported, not moved).
 * @param bad optional; receives the number of bad entries found (orphaned aliases not counted).
 */
KVJIT_API kvjit_status kvjit_cache_list(kvjit_context *ctx, int include_read_dirs, int verify,
                                        kvjit_cache_visit_fn visit, void *user, uint64_t *bad);

/**
 * Evict least recently used entries of the writable dir until it holds at most @p max_bytes.
 * Also sweeps stale temp files and old quarantined files.
 * @param removed_entries, removed_bytes optional.
 */
KVJIT_API kvjit_status kvjit_cache_prune(kvjit_context *ctx, uint64_t max_bytes, uint64_t *removed_entries,
                                         uint64_t *removed_bytes);

/** Remove every entry of the writable dir. */
KVJIT_API kvjit_status kvjit_cache_clear(kvjit_context *ctx, uint64_t *removed_entries);

/**
 * Write every good entry of the writable dir (and of the read-only dirs with @p include_read_dirs)
 * to one file, a pack (cache/FORMAT.md), for an image layer or an artifact store. The file appears
 * whole or not at all (temp file + rename).
 * @param entries optional; receives how many entries were written.
 */
KVJIT_API kvjit_status kvjit_cache_export(kvjit_context *ctx, const char *path, int include_read_dirs,
                                          uint64_t *entries);

/**
 * Import a pack into the writable dir: the whole file's checksum is checked first (a damaged pack
 * imports nothing: KVJIT_ERR_CORRUPT), then each entry like a disk read.
 * @param imported, present, bad optional: entries published, already cached, failing their checks.
 */
KVJIT_API kvjit_status kvjit_cache_import(kvjit_context *ctx, const char *path, uint64_t *imported, uint64_t *present,
                                          uint64_t *bad);

#ifdef __cplusplus
}
#endif

#endif /* KVJIT_TOOLS_H */
