/**
 * @file kvjit.h
 * @brief kvjit: CUDA kernels compiled at run time with NVRTC for the exact GPU,
 *        cached on disk, launched through the CUDA Driver API.
 *
 * One public header. It needs no CUDA header: streams are `struct CUstream_st *`
 * (the same type as `CUstream` / `cudaStream_t`), device pointers are plain pointers.
 *
 * Conventions (libgit2-like):
 *  - Every fallible function returns a ::kvjit_status; KVJIT_OK is 0, errors are negative.
 *  - Out-parameters come first after the object the function acts on.
 *  - On error, kvjit_last_error() holds a one-line, thread-local detail naming the argument,
 *    the value and, where there is one, the CUresult / nvrtcResult name.
 *  - Option structs carry a `version` field; initialise them with their `_INIT` macro so that
 *    fields added later get their defaults.
 *
 * Threads: a ::kvjit_context may be shared by any number of threads. Programs and kernels it
 * hands out are immutable, owned by the context, valid until kvjit_context_destroy(), and may be
 * launched from any thread on any stream of any CUDA context of the process.
 */
#ifndef KVJIT_H
#define KVJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVJIT_BUILDING) && defined(__GNUC__)
#define KVJIT_API __attribute__((visibility("default")))
#else
#define KVJIT_API
#endif

/* ------------------------------------------------------------------------------------------ */
/* Version                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* KVJIT_VERSION_MAJOR, _MINOR, _PATCH and _STRING: generated from meson.build's version. */
#include "kvjit_version.h"
/** MAJOR * 10000 + MINOR * 100 + PATCH, for compile-time comparisons. */
#define KVJIT_VERSION_NUMBER (KVJIT_VERSION_MAJOR * 10000 + KVJIT_VERSION_MINOR * 100 + KVJIT_VERSION_PATCH)

/** @return KVJIT_VERSION_NUMBER of the library actually loaded. */
KVJIT_API unsigned kvjit_version_number(void);
/** @return "MAJOR.MINOR.PATCH" of the library actually loaded (static string). */
KVJIT_API const char *kvjit_version_string(void);

/* ------------------------------------------------------------------------------------------ */
/* Status                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/** X(NAME, value, message): the one table that codes, names and messages come from. */
#define KVJIT_STATUS_MAP(X)                                                                      \
  X(OK, 0, "success")                                                                            \
  X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                                \
  X(ERR_UNSUPPORTED, -2, "not supported on this device or build")                                \
  X(ERR_NO_DRIVER, -3, "no CUDA driver (libcuda.so.1 could not be loaded or initialised)")        \
  X(ERR_NO_DEVICE, -4, "no CUDA device or no current CUDA context")                              \
  X(ERR_CUDA, -5, "a CUDA driver call failed")                                                   \
  X(ERR_NVRTC, -6, "an NVRTC call failed")                                                       \
  X(ERR_COMPILE, -7, "the kernel source did not compile")                                        \
  X(ERR_NOT_FOUND, -8, "not found")                                                              \
  X(ERR_OUT_OF_MEMORY, -9, "out of host memory")                                                 \
  X(ERR_IO, -10, "file system error")                                                            \
  X(ERR_CORRUPT, -11, "corrupt cache entry")                                                     \
  X(ERR_BUSY, -12, "resource busy")                                                              \
  X(ERR_INTERNAL, -13, "internal error")                                                         \
  X(ERR_NO_NVRTC, -14, "NVRTC (libnvrtc) could not be loaded: compiling is unavailable")         \
  X(ERR_NOT_CACHED, -15, "not in any cache, and compiling is switched off (KVJIT_COMPILE=never)")

/** Result of every fallible kvjit call. */
typedef enum kvjit_status {
#define KVJIT_STATUS_ENUM_(name, value, msg) KVJIT_##name = (value),
  KVJIT_STATUS_MAP(KVJIT_STATUS_ENUM_)
#undef KVJIT_STATUS_ENUM_
} kvjit_status;

/** @return the enumerator's name without prefix ("ERR_COMPILE"), or "UNKNOWN". Static. */
KVJIT_API const char *kvjit_status_name(kvjit_status status);
/** @return a one-line description of the code. Static. */
KVJIT_API const char *kvjit_status_string(kvjit_status status);
/**
 * @return the calling thread's detail of its last failed kvjit call ("" when none). The string
 * stays valid until the thread's next kvjit call.
 */
KVJIT_API const char *kvjit_last_error(void);

/* ------------------------------------------------------------------------------------------ */
/* Context                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/** Library context: cache configuration, the table of loaded programs, counters. */
typedef struct kvjit_context kvjit_context;

/** Tri-state for options whose default comes from the environment. */
#define KVJIT_FROM_ENV (-1)

/** Version 2 added read_only; version 1 structs (without it) are still accepted. */
#define KVJIT_CONTEXT_OPTIONS_VERSION 3

/** What a context does when a program is in no cache (its option, or $KVJIT_COMPILE). */
typedef enum kvjit_compile_mode {
  KVJIT_COMPILE_FROM_ENV = -1, /**< $KVJIT_COMPILE: always, warn or never (default always) */
  KVJIT_COMPILE_ALWAYS = 0,    /**< compile it (the default) */
  KVJIT_COMPILE_WARN = 1,      /**< compile it, with one stderr line naming what missed */
  KVJIT_COMPILE_NEVER = 2      /**< fail with KVJIT_ERR_NOT_CACHED naming what missed; compile nothing */
} kvjit_compile_mode;

/**
 * Options of kvjit_context_create(). Strings are copied; an empty string means the same as NULL
 * (unset), except for cache_path, where "" is an empty list (no read-only dirs). Environment
 * variables are read with the parsers below (kvjit_parse_size() ...): a bad value is ignored with
 * one warning line naming it, and the default is used.
 */
typedef struct kvjit_context_options {
  unsigned version;           /**< KVJIT_CONTEXT_OPTIONS_VERSION */
  /**
   * Writable cache dir. NULL or "": $KVJIT_CACHE_DIR, else $XDG_CACHE_HOME/kvjit, else
   * ~/.cache/kvjit. A relative path is made absolute against the working directory at creation.
   */
  const char *cache_dir;
  /** Colon-separated read-only cache dirs searched first. NULL: $KVJIT_CACHE_PATH; "": none. */
  const char *cache_path;
  /** 1: no disk cache at all (memory only); 0: disk cache; KVJIT_FROM_ENV: $KVJIT_CACHE_DISABLE. */
  int disable_cache;
  /** Byte budget of the writable dir, kept by LRU eviction. 0: $KVJIT_CACHE_MAX_SIZE or 2 GiB. */
  uint64_t cache_max_bytes;
  /** 1: one stderr line per compile, bad entry, degraded dir. KVJIT_FROM_ENV: $KVJIT_LOG. */
  int log;
  /** Longest wait for another process compiling the same key, ms. 0: $KVJIT_LOCK_TIMEOUT_MS or 60000. */
  unsigned lock_timeout_ms;
  /** File that records every store_kv_cache variant used (one line each). NULL: $KVJIT_MANIFEST. */
  const char *manifest_path;
  /** 1: load entries from dirs other users can write. KVJIT_FROM_ENV: $KVJIT_CACHE_ALLOW_SHARED. */
  int allow_shared_dirs;
  /* version 2 */
  /**
   * 1: never create or change anything on disk: no dir, lock, probe or quarantine file is made,
   * nothing is written, evicted or moved aside (bad entries are skipped). Entries are still read.
   * For inspecting a cache (`kvjit cache ls`, `kvjit info`). 0 (the default): normal use.
   */
  int read_only;
  /* version 3 */
  /** On a miss in every cache: compile (the default), compile and warn, or fail. */
  kvjit_compile_mode compile_mode;
  /**
   * Remote cache tier: base URLs (http:// or https://) separated by spaces or commas, each
   * optionally ending in "|ro" or "|rw". NULL or "": $KVJIT_REMOTE_CACHE. Entries are
   * `<url>/v2/<key>.kvjit` (GET, HEAD, PUT). Timeouts, back-off and the auth header come from the
   * environment (README, "The fleet").
   */
  const char *remote_cache;
  /** 1: compiles are PUT to the remote tier; 0: read only; KVJIT_FROM_ENV: $KVJIT_REMOTE_CACHE_MODE. */
  int remote_read_write;
} kvjit_context_options;

#define KVJIT_CONTEXT_OPTIONS_INIT                                                               \
  { KVJIT_CONTEXT_OPTIONS_VERSION, NULL, NULL, KVJIT_FROM_ENV, 0, KVJIT_FROM_ENV, 0, NULL,         \
    KVJIT_FROM_ENV, 0, KVJIT_COMPILE_FROM_ENV, NULL, KVJIT_FROM_ENV }

/**
 * Create a context. Needs no CUDA driver. An unusable cache dir is not an error: the context
 * falls back to memory only and says so once (stderr, and kvjit_context_cache_info()).
 * @param out receives the context; destroy it with kvjit_context_destroy().
 * @param options NULL for all defaults.
 */
KVJIT_API kvjit_status kvjit_context_create(kvjit_context **out, const kvjit_context_options *options);

/** Unload everything the context loaded and free it. Accepts NULL. No launch may be in flight. */
KVJIT_API void kvjit_context_destroy(kvjit_context *ctx);

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
/* Generic loader                                                                              */
/* ------------------------------------------------------------------------------------------ */

/** A header the program includes, given in memory. */
typedef struct kvjit_header {
  const char *name;   /**< as written in #include "..." or <...> (relative names work between them) */
  const char *source; /**< NUL-terminated contents */
} kvjit_header;

#define KVJIT_PROGRAM_DESC_VERSION 1

/** Everything that defines a program. Nothing is retained after the call returns. */
typedef struct kvjit_program_desc {
  unsigned version;          /**< KVJIT_PROGRAM_DESC_VERSION */
  const char *name;          /**< program name for NVRTC and logs, e.g. "my_kernels.cu" */
  const char *source;        /**< NUL-terminated CUDA source */
  /** NVRTC options, order kept; no --gpu-architecture (see arch). -I / --include-path dirs are
   *  searched by kvjit (headers are keyed by content; NVRTC never sees the dirs). */
  const char *const *options;
  size_t num_options;
  const kvjit_header *headers;
  size_t num_headers;
  /** Kernels wanted: extern "C" names or C++ name expressions such as "scale<128, float>". */
  const char *const *kernels;
  size_t num_kernels;
  /**
   * Target (kvjit_parse_target()): 90 = sm_90, 90 | KVJIT_TARGET_ARCH_SPECIFIC = sm_90a, ...; 0 =
   * sm_XY of the current device, and a kind flag alone (KVJIT_TARGET_ARCH_SPECIFIC) that kind for it.
   */
  int arch;
} kvjit_program_desc;

#define KVJIT_PROGRAM_DESC_INIT { KVJIT_PROGRAM_DESC_VERSION, NULL, NULL, NULL, 0, NULL, 0, NULL, 0, 0 }

/** A built (and, once kvjit_program_get() returned it, loaded) program. Owned by its context. */
typedef struct kvjit_program kvjit_program;
/** A launchable kernel of a loaded program. Owned by its context. */
typedef struct kvjit_kernel kvjit_kernel;

/** How a program was obtained. */
typedef enum kvjit_origin {
  KVJIT_FROM_NOWHERE = 0, /**< nothing obtained: the call failed before NVRTC ran (KVJIT_ERR_NOT_CACHED, ...) */
  KVJIT_FROM_MEMORY = 1,  /**< already in this context */
  KVJIT_FROM_DISK = 2,    /**< read from a cache file */
  KVJIT_FROM_COMPILE = 3  /**< NVRTC ran in this call (and compiled it, or failed: KVJIT_ERR_COMPILE) */
} kvjit_origin;

/*
 * Headers. kvjit reads every header a program includes and gives NVRTC exactly what it hashed:
 * #include "..." / <...> (and __has_include) resolve to desc->headers by exact name, then (for
 * "...") next to the including header, then in each -I / --include-path dir in option order, then
 * in the toolkit's include and CCCL dirs (found from the NVRTC in use: <cuda_bf16.h> and
 * <cuda/std/cstdint> need no option). Headers read from files are keyed by content, the toolkit
 * by the content of its header tree, and no path is in a key: edit a header and the program is
 * rebuilt; the same headers in another dir hit. A computed `#include MACRO` is refused
 * (KVJIT_ERR_UNSUPPORTED), and so are options that read files kvjit cannot key (--pch, ...).
 */

/**
 * Get a program: memory table, then the disk cache, then NVRTC; then load it into the driver
 * (cuLibraryLoadData, once per context). Two threads asking for the same program build it once.
 * @param out receives the program. On a build failure (KVJIT_ERR_COMPILE, ...) it still receives
 *            the failed program so that kvjit_program_log() can be read; a failed build is
 *            remembered, not retried.
 * @param origin optional; receives where the program came from.
 * @return KVJIT_ERR_NO_DRIVER without a driver (kvjit_program_build() needs none);
 *         KVJIT_ERR_UNSUPPORTED when desc->arch's code cannot run on the current device.
 */
KVJIT_API kvjit_status kvjit_program_get(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                         const kvjit_program_desc *desc);

/**
 * Build a program without loading it and without a driver (desc->arch must then name a compute
 * capability): memory table, disk cache, NVRTC, like kvjit_program_get(). The program gives its
 * key, log, target, lowered names and binary (kvjit_program_binary()); kvjit_program_get() of the
 * same description later loads this same program.
 * @param out receives the program, also on a build failure (for its log).
 */
KVJIT_API kvjit_status kvjit_program_build(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                           const kvjit_program_desc *desc);

/**
 * Make sure the program is in the disk cache for desc->arch (which must be set when there is no
 * GPU); needs no driver, keeps nothing in memory but a failure (remembered: a second call does not
 * run NVRTC again; kvjit_program_build() then hands out its log).
 * @param origin optional; KVJIT_FROM_DISK when it was already cached, KVJIT_FROM_COMPILE when
 *               compiled now, KVJIT_FROM_MEMORY when this context had it (or its failure).
 * @return KVJIT_ERR_IO when it compiled but its entry could not be written (full disk, a path too
 *         long, no usable cache dir, a read-only context); with the disk cache disabled it only
 *         compiles and returns KVJIT_OK.
 */
KVJIT_API kvjit_status kvjit_program_compile(kvjit_context *ctx, kvjit_origin *origin,
                                             const kvjit_program_desc *desc);

/** KVJIT_OK for a built program, else the status of its failed build (and its message). */
KVJIT_API kvjit_status kvjit_program_status(const kvjit_program *program);
/** Compiler log of the program ("" when NVRTC printed nothing or the program came from disk). */
KVJIT_API const char *kvjit_program_log(const kvjit_program *program);
/** The cache key of the program as 32 hex digits. */
KVJIT_API const char *kvjit_program_key(const kvjit_program *program);
/**
 * Target the program was built for (see kvjit_parse_target()): 90 for sm_90, 90 |
 * KVJIT_TARGET_ARCH_SPECIFIC for sm_90a, 90 | KVJIT_TARGET_PTX for PTX the driver finishes.
 */
KVJIT_API int kvjit_program_arch(const kvjit_program *program);
/**
 * The program's binary: a cubin, or NUL-terminated PTX when kvjit_program_arch() has
 * KVJIT_TARGET_PTX. Owned by the context. For a program found through an alias of a prewarm
 * bundle (cache/FORMAT.md), the bundle's cubin, which holds its kernels among others.
 */
KVJIT_API kvjit_status kvjit_program_binary(const kvjit_program *program, const void **data, size_t *bytes);
/** Number of kernels of a built program (0 for a failed one). */
KVJIT_API size_t kvjit_program_num_kernels(const kvjit_program *program);
/** Kernel @p index's name expression in canonical form ("scale<256,float>"), NULL past the end. */
KVJIT_API const char *kvjit_program_kernel_name(const kvjit_program *program, size_t index);
/** Kernel @p index's lowered (mangled) name, as in the binary; NULL past the end. */
KVJIT_API const char *kvjit_program_lowered_name(const kvjit_program *program, size_t index);

/**
 * Kernel of a loaded program by the name given in desc->kernels (whitespace does not matter:
 * "scale<256,float>" finds "scale<256, float>"), by its lowered name, or by index when @p name is
 * NULL.
 */
KVJIT_API kvjit_status kvjit_program_kernel(const kvjit_program *program, kvjit_kernel **out,
                                            const char *name, size_t index);

/**
 * Device address and size of a __device__ variable of a loaded program, in the calling thread's
 * current CUDA context. @p name is its symbol: declare the variable extern "C" (C++ names are
 * mangled). @param bytes optional.
 */
KVJIT_API kvjit_status kvjit_program_get_global(const kvjit_program *program, uint64_t *address, size_t *bytes,
                                                const char *name);

/* ---- prepared programs: O(1) repeat lookups ---------------------------------------------- */

/**
 * A program description prepared once: deep-copied (the caller's buffers may change or go away),
 * its headers read and keyed (a snapshot: later edits of header files do not reach it), its key
 * computed once per target. kvjit_program_handle_get() of a program already loaded costs a few
 * nanoseconds. Thread-safe; owned by the caller; destroy it before its context.
 */
typedef struct kvjit_program_handle kvjit_program_handle;

/** Prepare @p desc (checked here, as kvjit_program_get() would). Compiles nothing. */
KVJIT_API kvjit_status kvjit_program_handle_create(kvjit_context *ctx, kvjit_program_handle **out,
                                                   const kvjit_program_desc *desc);

/**
 * kvjit_program_get() of the prepared description. With desc->arch 0 (or a kind flag alone),
 * the program is that of the current device: one slot per device, so several GPUs work.
 */
KVJIT_API kvjit_status kvjit_program_handle_get(kvjit_program_handle *handle, kvjit_program **out,
                                                kvjit_origin *origin);

/** Free a handle (programs it returned stay valid until their context goes). Accepts NULL. */
KVJIT_API void kvjit_program_handle_destroy(kvjit_program_handle *handle);

/* ---- kernels ------------------------------------------------------------------------------- */

/** Kernel attributes: the numbers of CUfunction_attribute, so no CUDA header is needed. */
typedef enum kvjit_kernel_attribute {
  KVJIT_KERNEL_MAX_THREADS_PER_BLOCK = 0,  /**< read-only */
  KVJIT_KERNEL_SHARED_SIZE_BYTES = 1,      /**< static shared memory; read-only */
  KVJIT_KERNEL_CONST_SIZE_BYTES = 2,       /**< read-only */
  KVJIT_KERNEL_LOCAL_SIZE_BYTES = 3,       /**< per thread; read-only */
  KVJIT_KERNEL_NUM_REGS = 4,               /**< per thread; read-only */
  KVJIT_KERNEL_PTX_VERSION = 5,            /**< read-only */
  KVJIT_KERNEL_BINARY_VERSION = 6,         /**< read-only */
  KVJIT_KERNEL_CACHE_MODE_CA = 7,          /**< read-only */
  /** Largest dynamic shared memory a launch may ask for; set it to go past 48 KiB. */
  KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  KVJIT_KERNEL_PREFERRED_SHARED_MEMORY_CARVEOUT = 9, /**< percent of L1 as shared memory, -1: default */
  KVJIT_KERNEL_CLUSTER_SIZE_MUST_BE_SET = 10,        /**< read-only */
  KVJIT_KERNEL_REQUIRED_CLUSTER_WIDTH = 11,
  KVJIT_KERNEL_REQUIRED_CLUSTER_HEIGHT = 12,
  KVJIT_KERNEL_REQUIRED_CLUSTER_DEPTH = 13,
  KVJIT_KERNEL_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
  KVJIT_KERNEL_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15
} kvjit_kernel_attribute;

/** The device of the calling thread's current CUDA context (device 0 without one). */
#define KVJIT_CURRENT_DEVICE (-1)

/** Read an attribute of @p kernel on device ordinal @p device (or KVJIT_CURRENT_DEVICE). */
KVJIT_API kvjit_status kvjit_kernel_get_attribute(const kvjit_kernel *kernel, kvjit_kernel_attribute attribute,
                                                  int device, int *value);

/**
 * Set an attribute of @p kernel for launches on device @p device (cuKernelSetAttribute), e.g.
 * KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES before a launch with more than 48 KiB of dynamic
 * shared memory. @return KVJIT_ERR_INVALID_ARGUMENT for a read-only attribute or a value the
 * device refuses.
 */
KVJIT_API kvjit_status kvjit_kernel_set_attribute(const kvjit_kernel *kernel, kvjit_kernel_attribute attribute,
                                                  int device, int value);

/** Number of parameters of @p kernel (CUDA 12.4+ drivers; KVJIT_ERR_UNSUPPORTED before). */
KVJIT_API kvjit_status kvjit_kernel_num_params(const kvjit_kernel *kernel, size_t *count);

/** Offset and size in bytes of parameter @p index in the kernel's parameter buffer. */
KVJIT_API kvjit_status kvjit_kernel_param_info(const kvjit_kernel *kernel, size_t index, size_t *offset,
                                               size_t *bytes);

/** kvjit_launch_config.num_args when the caller does not say how many arguments it passes. */
#define KVJIT_ARGS_UNCHECKED (-1)

#define KVJIT_LAUNCH_CONFIG_VERSION 1

/** Launch configuration for kvjit_launch(). */
typedef struct kvjit_launch_config {
  unsigned version;            /**< KVJIT_LAUNCH_CONFIG_VERSION */
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;       /**< dynamic shared memory (past 48 KiB: set the kernel attribute) */
  struct CUstream_st *stream;  /**< NULL: the legacy default stream */
  /** 1: set CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (PDL; sm_90+). */
  int programmatic_serialization;
  /** Thread-block cluster dimensions (sm_90+), each dividing grid; all 0: no cluster. */
  unsigned cluster[3];
  int cooperative;             /**< 1: a cooperative launch (grid-wide synchronisation) */
  int priority;                /**< launch priority (as stream priorities); 0: the stream's */
  /** How many pointers @p args of kvjit_launch() holds: a launch whose kernel takes another number
   *  of parameters is refused (where the driver tells). KVJIT_ARGS_UNCHECKED: not checked. */
  int num_args;
} kvjit_launch_config;

#define KVJIT_LAUNCH_CONFIG_INIT                                                                 \
  { KVJIT_LAUNCH_CONFIG_VERSION, { 1, 1, 1 }, { 1, 1, 1 }, 0, NULL, 0, { 0, 0, 0 }, 0, 0, KVJIT_ARGS_UNCHECKED }

/**
 * Launch a kernel with cuLaunchKernelEx in the calling thread's current CUDA context.
 * @param args array of pointers to each kernel argument, as for cuLaunchKernel.
 */
KVJIT_API kvjit_status kvjit_launch(const kvjit_kernel *kernel, const kvjit_launch_config *config, void **args);

/* ------------------------------------------------------------------------------------------ */
/* Ops: the specialized kernels, described as data                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * Each op (store_kv_cache, transfer_kv, ...) is a kernel template plus a table of variant fields:
 * what its manifest lines hold and what `kvjit prewarm --op NAME` expands. A variant is the op and
 * one value per field; kvjit_variant_check() applies the op's rules, kvjit_variant_format() and
 * kvjit_variant_parse() write and read its manifest line (cache/MANIFEST.md), and
 * kvjit_variant_prewarm() compiles every kernel it may use. The op-specific calls below
 * (kvjit_store_kv_cache_prewarm(), ...) are the same operations on the op's own structs.
 */

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
/* store_kv_cache                                                                              */
/* ------------------------------------------------------------------------------------------ */

typedef enum kvjit_index_type {
  KVJIT_INDEX_INT32 = 1,
  KVJIT_INDEX_INT64 = 2
} kvjit_index_type;

typedef enum kvjit_pdl_mode {
  KVJIT_PDL_AUTO = 0, /**< on for sm_90 and newer */
  KVJIT_PDL_ON = 1,   /**< KVJIT_ERR_UNSUPPORTED before sm_90 */
  KVJIT_PDL_OFF = 2
} kvjit_pdl_mode;

/** No reserved padding slot. */
#define KVJIT_NO_SKIP_SLOT (-1)

/** Element type of K/V rows and of the cache (quantize on store). */
typedef enum kvjit_dtype {
  KVJIT_DTYPE_BYTES = 0,    /**< opaque bytes: rows are copied as they are (the default) */
  KVJIT_DTYPE_F16 = 1,      /**< IEEE binary16 */
  KVJIT_DTYPE_BF16 = 2,     /**< bfloat16 */
  KVJIT_DTYPE_F32 = 3,      /**< IEEE binary32 */
  KVJIT_DTYPE_FP8_E4M3 = 4, /**< fp8 e4m3fn: no infinities, finite range +-448 */
  KVJIT_DTYPE_FP8_E5M2 = 5  /**< fp8 e5m2: finite range +-57344 */
} kvjit_dtype;

/** Where the quantization scales of an fp8 cache come from (fp32 values in device memory). */
typedef enum kvjit_scale_kind {
  KVJIT_SCALE_NONE = 0,       /**< no scale: each value is converted as it is */
  KVJIT_SCALE_PER_TENSOR = 1, /**< k_scale[0] for every K value, v_scale[0] for every V value */
  KVJIT_SCALE_PER_HEAD = 2    /**< a row is num_heads heads; value j of a K row uses k_scale[j / (K elements / num_heads)] */
} kvjit_scale_kind;

/** Version 2 added dtype .. num_heads (quantize on store); version 1 structs are still accepted. */
#define KVJIT_STORE_KV_ARGS_VERSION 2

/**
 * Arguments of kvjit_store_kv_cache(): for each i < batch with s = indices[i * index_stride],
 * copy k row i to k_cache row s and v row i to v_cache row s. Rows are bytes; any dtype.
 * Slots s < 0 (padding) and s == skip_slot are skipped; s >= num_slots is skipped and counted
 * (kvjit_store_kv_cache_oob_count()).
 *
 * Quantize on store: with dtype F16, BF16 or F32 and cache_dtype FP8_E4M3 or FP8_E5M2, each value
 * x is stored as fp8(x / scale) (fp32 division, round to nearest even, saturated to the finite
 * range, NaN stays NaN) in the same kernel. Row bytes and k/v strides then count source bytes;
 * a cache row is (row bytes / source element size) bytes and cache strides count cache bytes.
 * Scales are read from device memory at run time, so a captured CUDA graph sees new values.
 */
typedef struct kvjit_store_kv_args {
  unsigned version;       /**< KVJIT_STORE_KV_ARGS_VERSION */
  const void *k;          /**< device pointer, batch rows */
  const void *v;          /**< device pointer, or NULL with v_cache NULL to store K only (MLA) */
  void *k_cache;          /**< device pointer, num_slots rows */
  void *v_cache;          /**< device pointer, or NULL with v NULL */
  const void *indices;    /**< device pointer to batch slot ids */
  kvjit_index_type index_type;
  int64_t index_stride;   /**< in elements; 0 means 1 */
  int64_t batch;          /**< number of tokens; 0 is a no-op */
  int64_t k_row_bytes;    /**< bytes of one K row */
  int64_t v_row_bytes;    /**< bytes of one V row; 0 means k_row_bytes (ignored when K only) */
  int64_t k_stride;       /**< bytes between K rows; 0 means k_row_bytes */
  int64_t v_stride;       /**< bytes between V rows; 0 means v_row_bytes */
  int64_t k_cache_stride; /**< bytes between K cache rows; 0 means one cache row */
  int64_t v_cache_stride; /**< bytes between V cache rows; 0 means one cache row */
  int64_t num_slots;      /**< rows in each cache */
  int64_t skip_slot;      /**< reserved padding slot, or KVJIT_NO_SKIP_SLOT */
  int split;              /**< parts each row is split into across thread groups; 0: automatic */
  kvjit_pdl_mode pdl;
  struct CUstream_st *stream; /**< NULL: the legacy default stream */
  /* version 2 */
  kvjit_dtype dtype;          /**< element type of k and v; BYTES: plain copy */
  kvjit_dtype cache_dtype;    /**< BYTES: same as dtype (plain copy); FP8_E4M3 / FP8_E5M2: quantize */
  kvjit_scale_kind scale_kind; /**< with an fp8 cache_dtype only */
  const float *k_scale;       /**< device pointer: 1 (per tensor) or num_heads (per head) floats */
  const float *v_scale;       /**< the same for V (NULL when K only) */
  int64_t num_heads;          /**< heads per K row and per V row, for KVJIT_SCALE_PER_HEAD */
} kvjit_store_kv_args;

#define KVJIT_STORE_KV_ARGS_INIT                                                                 \
  { KVJIT_STORE_KV_ARGS_VERSION, NULL, NULL, NULL, NULL, NULL, KVJIT_INDEX_INT64, 1, 0, 0, 0, 0, 0, \
    0, 0, 0, KVJIT_NO_SKIP_SLOT, 0, KVJIT_PDL_AUTO, NULL, KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES,      \
    KVJIT_SCALE_NONE, NULL, NULL, 0 }

/**
 * Store K and V rows into the cache (asynchronous on args->stream; capturable in CUDA graphs).
 * Once the variant is loaded (see kvjit_store_kv_cache_prepare()), the call validates, looks the
 * variant up without a lock and launches: no allocation, no compile.
 * @return KVJIT_ERR_INVALID_ARGUMENT / KVJIT_ERR_UNSUPPORTED (nothing launched) with the argument
 *         and value in kvjit_last_error().
 */
KVJIT_API kvjit_status kvjit_store_kv_cache(kvjit_context *ctx, const kvjit_store_kv_args *args);

/**
 * Validate @p args and load the variant a kvjit_store_kv_cache() call with the same arguments
 * (pointers with the same alignment, any batch in the same size class) will use, without
 * launching: call it before CUDA graph capture. Device pointers are not dereferenced.
 */
KVJIT_API kvjit_status kvjit_store_kv_cache_prepare(kvjit_context *ctx, const kvjit_store_kv_args *args);

/**
 * Slot ids at or past num_slots seen by store_kv_cache kernels of this context in the current
 * CUDA context since the last reset. Synchronises with the device.
 * @param reset non-zero to zero the counter after reading it.
 */
KVJIT_API kvjit_status kvjit_store_kv_cache_oob_count(kvjit_context *ctx, uint64_t *count, int reset);

#define KVJIT_STORE_KV_VARIANT_VERSION 1

/** A store_kv_cache variant, as the prewarm CLI and manifests describe it. */
typedef struct kvjit_store_kv_variant {
  unsigned version;       /**< KVJIT_STORE_KV_VARIANT_VERSION */
  int arch;               /**< compute capability, 0 = current device */
  int64_t k_row_bytes;    /**< source bytes of one K row */
  int64_t v_row_bytes;    /**< 0: K only */
  kvjit_index_type index_type;
  kvjit_pdl_mode pdl;     /**< AUTO resolves from arch */
  int split;              /**< 0: every split the automatic choice may pick */
  /** Widest access, in source bytes, the pointers allow: 16, 8, 4, 2 or 1; 0 = 16. Quantizing,
   *  the cache side needs vector_bytes / element size: pass what both sides allow. */
  int vector_bytes;
  kvjit_dtype dtype;      /**< as in kvjit_store_kv_args (BYTES: plain copy) */
  kvjit_dtype cache_dtype;
  kvjit_scale_kind scale_kind;
  int64_t num_heads;      /**< KVJIT_SCALE_PER_HEAD only */
} kvjit_store_kv_variant;

#define KVJIT_STORE_KV_VARIANT_INIT                                                              \
  { KVJIT_STORE_KV_VARIANT_VERSION, 0, 0, 0, KVJIT_INDEX_INT64, KVJIT_PDL_AUTO, 0, 0, KVJIT_DTYPE_BYTES, \
    KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0 }

/**
 * Compile (no driver needed) into the disk cache every kernel a store with this variant may use.
 * @param compiled optional; receives how many kernels were compiled now.
 * @param cached optional; receives how many were already in the cache.
 */
KVJIT_API kvjit_status kvjit_store_kv_cache_prewarm(kvjit_context *ctx, const kvjit_store_kv_variant *variant,
                                                    unsigned *compiled, unsigned *cached);

/**
 * Format a variant as one manifest line (no newline), the format of cache/MANIFEST.md.
 * @return KVJIT_ERR_INVALID_ARGUMENT if @p capacity is too small.
 */
KVJIT_API kvjit_status kvjit_store_kv_variant_format(const kvjit_store_kv_variant *variant, char *out,
                                                     size_t capacity);
/** Parse one manifest line (trailing newline and comments allowed). */
KVJIT_API kvjit_status kvjit_store_kv_variant_parse(kvjit_store_kv_variant *out, const char *line);

/* ------------------------------------------------------------------------------------------ */
/* transfer_kv                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/** Where a cache lives. Pinned host memory (cuMemHostAlloc, cudaHostAlloc, cuMemHostRegister,
 *  torch's pin_memory()) is reached through unified addressing: one kernel moves rows between
 *  any two. The location picks the plan (more bytes in flight over the host link); it is never
 *  dereferenced on the host. */
typedef enum kvjit_location {
  KVJIT_LOCATION_DEVICE = 0, /**< device memory */
  KVJIT_LOCATION_HOST = 1    /**< pinned, device-accessible host memory */
} kvjit_location;

#define KVJIT_TRANSFER_KV_ARGS_VERSION 1

/** Most layers one kvjit_transfer_kv() call moves (the launch's grid.y). */
#define KVJIT_TRANSFER_KV_MAX_LAYERS 65535

/**
 * Arguments of kvjit_transfer_kv(): for each i < batch with s = src_indices[i * src_index_stride]
 * and d = dst_indices[i * dst_index_stride], copy K row s of the source to K row d of the
 * destination, and V row s to V row d. Rows are bytes; any dtype. A negative s or d (padding) is
 * skipped; s >= src_num_slots or d >= dst_num_slots is skipped and counted
 * (kvjit_transfer_kv_oob_count()). The copies of two items must not overlap (distinct d).
 *
 * One layer (num_layers 0): the four cache pointers are the caches. All layers at once
 * (num_layers N >= 1): each is a device pointer to an array of N uint64 cache pointers, one per
 * layer (as SGLang's hierarchical cache keeps them), all moved in one launch; a NULL entry or one
 * not aligned to the access width is skipped and counted like a bad slot, per item and layer.
 */
typedef struct kvjit_transfer_kv_args {
  unsigned version;          /**< KVJIT_TRANSFER_KV_ARGS_VERSION */
  const void *src_k;         /**< source K cache (or its layer table) */
  const void *src_v;         /**< source V cache, or NULL with dst_v NULL to move K only (MLA) */
  void *dst_k;               /**< destination K cache (or its layer table) */
  void *dst_v;               /**< destination V cache, or NULL with src_v NULL */
  const void *src_indices;   /**< batch slot ids into the source (device-accessible) */
  const void *dst_indices;   /**< batch slot ids into the destination */
  kvjit_index_type index_type; /**< of both index arrays */
  int64_t src_index_stride;  /**< in elements; 0 means 1 */
  int64_t dst_index_stride;  /**< in elements; 0 means 1 */
  int64_t batch;             /**< rows to move per layer; 0 is a no-op */
  int64_t k_row_bytes;       /**< bytes of one K row */
  int64_t v_row_bytes;       /**< bytes of one V row; 0 means k_row_bytes (ignored when K only) */
  int64_t src_k_stride;      /**< bytes between source K slots; 0 means k_row_bytes */
  int64_t src_v_stride;      /**< bytes between source V slots; 0 means v_row_bytes */
  int64_t dst_k_stride;      /**< bytes between destination K slots; 0 means k_row_bytes */
  int64_t dst_v_stride;      /**< bytes between destination V slots; 0 means v_row_bytes */
  int64_t src_num_slots;     /**< rows in each source cache (of each layer) */
  int64_t dst_num_slots;     /**< rows in each destination cache */
  int64_t num_layers;        /**< 0: one layer; N: the pointers are device tables of N layers */
  kvjit_location src;        /**< where the source caches are */
  kvjit_location dst;        /**< where the destination caches are */
  int split;                 /**< parts each row is split into across lane groups; 0: automatic */
  kvjit_pdl_mode pdl;
  struct CUstream_st *stream; /**< NULL: the legacy default stream */
} kvjit_transfer_kv_args;

#define KVJIT_TRANSFER_KV_ARGS_INIT                                                              \
  { KVJIT_TRANSFER_KV_ARGS_VERSION, NULL, NULL, NULL, NULL, NULL, NULL, KVJIT_INDEX_INT64, 1, 1, 0, 0, 0, \
    0, 0, 0, 0, 0, 0, 0, KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_DEVICE, 0, KVJIT_PDL_AUTO, NULL }

/**
 * Move K and V rows between caches (asynchronous on args->stream; capturable in CUDA graphs, host
 * caches included: the kernel reads and writes pinned memory directly, no copy engine). Once the
 * variant is loaded (kvjit_transfer_kv_prepare()), the call validates, looks the variant up without
 * a lock and launches: no allocation, no compile.
 * @return KVJIT_ERR_INVALID_ARGUMENT / KVJIT_ERR_UNSUPPORTED (nothing launched) naming the argument.
 */
KVJIT_API kvjit_status kvjit_transfer_kv(kvjit_context *ctx, const kvjit_transfer_kv_args *args);

/**
 * Validate @p args and load the kernels a kvjit_transfer_kv() call with the same arguments (any
 * batch in the same size class; batch 0: every class) uses, without launching: call it before
 * CUDA graph capture. Nothing is dereferenced.
 */
KVJIT_API kvjit_status kvjit_transfer_kv_prepare(kvjit_context *ctx, const kvjit_transfer_kv_args *args);

/**
 * Bad slot ids (and unusable layer pointers) seen by this context's transfer_kv kernels in the
 * current CUDA context since the last reset. Synchronises with the device.
 */
KVJIT_API kvjit_status kvjit_transfer_kv_oob_count(kvjit_context *ctx, uint64_t *count, int reset);

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

#endif /* KVJIT_H */
