/**
 * @file kvjit.h
 * @brief kvjit: CUDA kernels compiled at run time with NVRTC for the exact GPU,
 *        cached on disk, launched through the CUDA Driver API.
 *
 * The stable core a user reads in one sitting: version, status and errors, the context, the
 * generic loader (programs, handles, kernels, launches) and the ops' calls with their prepare.
 * Tooling (counters, cache maintenance, op variants, manifests and prewarm, parsing of targets
 * and values) is kvjit_tools.h, beside it (zstd's split of zstd.h's stable part).
 * It needs no CUDA header: streams are `struct CUstream_st *` (the same type as `CUstream` /
 * `cudaStream_t`), device pointers are plain pointers.
 *
 * Conventions (libgit2-like):
 *  - Every fallible function returns a ::kvjit_status; KVJIT_OK is 0, errors are negative.
 *  - Out-parameters come first after the object the function acts on.
 *  - On error, kvjit_last_error() holds a one-line, thread-local detail naming the argument,
 *    the value and, where there is one, the CUresult / nvrtcResult name.
 *  - Option structs carry a `version` field; initialise them with their `_INIT` macro, or from a
 *    binding with their kvjit_*_init(ptr, version) call, so that fields added later get their
 *    defaults.
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

/** Version 2 added read_only, version 3 compile_mode and the remote tier; older structs are still accepted. */
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

/** @p out = KVJIT_CONTEXT_OPTIONS_INIT of @p version (1 .. KVJIT_CONTEXT_OPTIONS_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_context_options_init(kvjit_context_options *out, unsigned version);

/**
 * Create a context. Needs no CUDA driver. An unusable cache dir is not an error: the context
 * falls back to memory only and says so once (stderr, and kvjit_context_cache_info()).
 * @param out receives the context; destroy it with kvjit_context_destroy().
 * @param options NULL for all defaults.
 */
KVJIT_API kvjit_status kvjit_context_create(kvjit_context **out, const kvjit_context_options *options);

/** Unload everything the context loaded and free it. Accepts NULL. No launch may be in flight. */
KVJIT_API void kvjit_context_destroy(kvjit_context *ctx);

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

/** @p out = KVJIT_PROGRAM_DESC_INIT of @p version (1 .. KVJIT_PROGRAM_DESC_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_program_desc_init(kvjit_program_desc *out, unsigned version);

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

/** @p out = KVJIT_LAUNCH_CONFIG_INIT of @p version (1 .. KVJIT_LAUNCH_CONFIG_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_launch_config_init(kvjit_launch_config *out, unsigned version);

/**
 * Launch a kernel with cuLaunchKernelEx in the calling thread's current CUDA context.
 * @param args array of pointers to each kernel argument, as for cuLaunchKernel.
 */
KVJIT_API kvjit_status kvjit_launch(const kvjit_kernel *kernel, const kvjit_launch_config *config, void **args);

/* ------------------------------------------------------------------------------------------ */
/* Cache layouts                                                                               */
/* ------------------------------------------------------------------------------------------ */

#define KVJIT_LAYOUT_VERSION 1
/** Most row dims a layout has. */
#define KVJIT_LAYOUT_MAX_ROW_DIMS 3

/**
 * A cache as a strided view of slots and rows (the shape-and-stride model of CuTe's layouts):
 *
 *     slot s -> page p = s / page_size, position q = s % page_size   (page_size 0 or 1: p = 0, q = s)
 *     row of s at        base + p * page_stride + q * slot_stride
 *     element (i0, i1, i2) of that row at  + i0 * row_strides[0] + i1 * row_strides[1] + i2 * row_strides[2]
 *
 * Row dims are outermost first and count elements of element_bytes bytes; their extents multiply
 * to the row's elements, and element (i0, i1, i2) holds the bytes of element (i0 * e1 + i1) * e2 + i2
 * of the (contiguous) source row. All strides are in bytes, none negative. A stride of 0 means
 * packed: row_strides[last] = element_bytes, row_strides[d] = row_extents[d + 1] * row_strides[d + 1],
 * slot_stride = the row's span, page_stride = page_size * slot_stride. One row dim of extent 0 is
 * the whole row.
 *
 * vLLM's FlashAttention cache `[blocks, H, block_size, 2 * D]` of bf16, K view: page_size = block_size,
 * page_stride = H * block_size * 4 * D, slot_stride = 4 * D, row dims (H, D) strides
 * (block_size * 4 * D, 2); its V view the same at base + 2 * D bytes.
 *
 * The parts that shape the kernel (page_size, the row extents, the element size, which inner dim is
 * contiguous) are keyed; the strides are kernel arguments. Views where two elements (or the K
 * and V views of one call) could share a byte are refused.
 */
typedef struct kvjit_layout {
  unsigned version;      /**< KVJIT_LAYOUT_VERSION */
  int64_t page_size;     /**< slots per page; 0 or 1: flat slots */
  int64_t page_stride;   /**< bytes between pages (page_size > 1); 0: page_size * slot_stride */
  int64_t slot_stride;   /**< bytes between the slots of a page (flat: between slots); 0: packed */
  int64_t element_bytes; /**< bytes of the element the row dims count: 1, 2, 4, 8 or 16 */
  int num_row_dims;      /**< 1 .. KVJIT_LAYOUT_MAX_ROW_DIMS */
  int64_t row_extents[KVJIT_LAYOUT_MAX_ROW_DIMS]; /**< elements, outermost first */
  int64_t row_strides[KVJIT_LAYOUT_MAX_ROW_DIMS]; /**< bytes; 0: packed */
} kvjit_layout;

/** One packed row per slot (the layout of a NULL layout pointer). */
#define KVJIT_LAYOUT_INIT { KVJIT_LAYOUT_VERSION, 0, 0, 0, 1, 1, { 0, 0, 0 }, { 0, 0, 0 } }

/** @p out = KVJIT_LAYOUT_INIT of @p version (1 .. KVJIT_LAYOUT_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_layout_init(kvjit_layout *out, unsigned version);

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

/** Version 2 added dtype .. num_heads (quantize on store), version 3 the cache layouts; older
 *  structs are still accepted. */
#define KVJIT_STORE_KV_ARGS_VERSION 3

/**
 * Arguments of kvjit_store_kv_cache(): for each i < batch with s = indices[i * index_stride],
 * copy k row i to k_cache row s and v row i to v_cache row s. Rows are bytes; any dtype.
 * Slots s < 0 (padding) and s == skip_slot are skipped; s >= num_slots is skipped and counted
 * (kvjit_op_oob_count(ctx, "store_kv_cache", ...) of kvjit_tools.h).
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
  /* version 3 */
  /** The K cache as a strided view (kvjit_layout), or NULL: row s at k_cache + s * k_cache_stride.
   *  With a layout, k_cache_stride must be 0; row dims count cache elements (fp8 bytes when
   *  quantizing), and with KVJIT_SCALE_PER_HEAD and two or more row dims the outermost is the
   *  head (its extent num_heads). Read during the call only. */
  const kvjit_layout *k_cache_layout;
  const kvjit_layout *v_cache_layout; /**< the same for the V cache (NULL when K only) */
} kvjit_store_kv_args;

#define KVJIT_STORE_KV_ARGS_INIT                                                                 \
  { KVJIT_STORE_KV_ARGS_VERSION, NULL, NULL, NULL, NULL, NULL, KVJIT_INDEX_INT64, 1, 0, 0, 0, 0, 0, \
    0, 0, 0, KVJIT_NO_SKIP_SLOT, 0, KVJIT_PDL_AUTO, NULL, KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES,      \
    KVJIT_SCALE_NONE, NULL, NULL, 0, NULL, NULL }

/** @p out = KVJIT_STORE_KV_ARGS_INIT of @p version (1 .. KVJIT_STORE_KV_ARGS_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_store_kv_args_init(kvjit_store_kv_args *out, unsigned version);

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

/** Version 2 added src_dtype .. dst_v_layout (convert on the way, the CTA budget, layouts); version 1
 *  structs are still accepted. */
#define KVJIT_TRANSFER_KV_ARGS_VERSION 2

/** max_ctas: no cap, the grid the batch needs (the all-SM plan), over the host link too. */
#define KVJIT_TRANSFER_KV_ALL_CTAS (-1)
/** max_ctas 0 over the host link: this many CTAs at most reading host memory, each holding ~128 KiB of
 *  rows in flight (the link, not the SMs, is the bound) ... */
#define KVJIT_TRANSFER_KV_HOST_CTAS 4
/** ... and this many writing it (device to host, host to host): posted writes need fewer bytes in
 *  flight, and more CTAs push stores into the GPU faster than the link drains them, in the way of the
 *  model's kernels (bench/bench_overlap.c). */
#define KVJIT_TRANSFER_KV_HOST_WRITE_CTAS 3


/** Most layers one kvjit_transfer_kv() call moves (the launch's grid.y). */
#define KVJIT_TRANSFER_KV_MAX_LAYERS 65535

/**
 * Arguments of kvjit_transfer_kv(): for each i < batch with s = src_indices[i * src_index_stride]
 * and d = dst_indices[i * dst_index_stride], copy K row s of the source to K row d of the
 * destination, and V row s to V row d. Rows are bytes; any dtype. A negative s or d (padding) is
 * skipped; s >= src_num_slots or d >= dst_num_slots is skipped and counted
 * (kvjit_op_oob_count(ctx, "transfer_kv", ...) of kvjit_tools.h). The copies of two items must
 * not overlap (distinct d).
 *
 * One layer (num_layers 0): the four cache pointers are the caches. All layers at once
 * (num_layers N >= 1): each is a device pointer to an array of N uint64 cache pointers, one per
 * layer (as SGLang's hierarchical cache keeps them), all moved in one launch; a NULL entry or one
 * not aligned to the access width is skipped and counted like a bad slot, per item and layer.
 *
 * Convert on the way (version 2): src_dtype fp8 (E4M3 / E5M2) and dst_dtype F16 / BF16 / F32
 * dequantizes each value as x * scale (fp32 product, round to nearest even into dst_dtype, what
 * vLLM's gather_and_maybe_dequant_cache does); src_dtype F16 / BF16 / F32 and dst_dtype fp8
 * quantizes as fp8(x / scale), exactly as kvjit_store_kv_cache() does (round to nearest even,
 * saturated to the finite range, NaN stays NaN). k_row_bytes / v_row_bytes then count source
 * bytes, source strides source bytes and destination strides destination bytes (a destination row
 * is row bytes / source element size x destination element size). Scales are fp32 in device
 * memory read at run time (a captured graph sees new values); with layer tables, layer l reads
 * k_scale[l * n .. ] (n = 1 per tensor, num_heads per head).
 *
 * The CTA budget (version 2): over the host link the copy runs on at most
 * KVJIT_TRANSFER_KV_HOST_CTAS CTAs (KVJIT_TRANSFER_KV_HOST_WRITE_CTAS when the destination is host
 * memory) that stride over the batch, leaving the SMs to the model
 * (the link, not the SMs, bounds it); max_ctas N caps any direction at N CTAs,
 * KVJIT_TRANSFER_KV_ALL_CTAS asks for the grid the batch needs.
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
  /* version 2 */
  kvjit_dtype src_dtype;     /**< element type of the source rows; BYTES: rows are copied as they are */
  kvjit_dtype dst_dtype;     /**< BYTES or src_dtype: a plain copy; else the conversion (see above) */
  kvjit_scale_kind scale_kind; /**< with a conversion only */
  const float *k_scale;      /**< device pointer: 1 (per tensor) or num_heads (per head) floats (per layer) */
  const float *v_scale;      /**< the same for V (NULL when K only) */
  int64_t num_heads;         /**< heads per K row and per V row, for KVJIT_SCALE_PER_HEAD */
  int max_ctas;              /**< 0: the plan's budget; N: at most N CTAs; KVJIT_TRANSFER_KV_ALL_CTAS: no cap */
  /** The caches as strided views (kvjit_layout), or NULL: row s at the cache + s * its stride
   *  (which must then be 0 with a layout: its slot_stride says it). Row dims count bytes of the
   *  side's rows (converting: the destination's in its own type). The two caches of a side share
   *  page size, runs and row dims (their strides may differ); V rows of K's size. With layer tables
   *  every layer's pointer is the base of its view. Read during the call only. */
  const kvjit_layout *src_k_layout, *src_v_layout, *dst_k_layout, *dst_v_layout;
} kvjit_transfer_kv_args;

#define KVJIT_TRANSFER_KV_ARGS_INIT                                                              \
  { KVJIT_TRANSFER_KV_ARGS_VERSION, NULL, NULL, NULL, NULL, NULL, NULL, KVJIT_INDEX_INT64, 1, 1, 0, 0, 0, \
    0, 0, 0, 0, 0, 0, 0, KVJIT_LOCATION_DEVICE, KVJIT_LOCATION_DEVICE, 0, KVJIT_PDL_AUTO, NULL,     \
    KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL }

/** @p out = KVJIT_TRANSFER_KV_ARGS_INIT of @p version (1 .. KVJIT_TRANSFER_KV_ARGS_VERSION; a binding passes the version its layout has). */
KVJIT_API kvjit_status kvjit_transfer_kv_args_init(kvjit_transfer_kv_args *out, unsigned version);

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

/** kvjit_transfer_kv_check_devices(): enable the launching context's peer access to a cache on
 *  another device (cuCtxEnablePeerAccess) instead of refusing it. */
#define KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS 1u

/**
 * Validate @p args as kvjit_transfer_kv() does, then check that a launch on args->stream (its
 * context's device; the current context's for NULL) can reach every device pointer of the call:
 * the caches (with layer tables: the tables themselves, not the per-layer pointers in them, which
 * live in device memory), the index arrays and the scales. A pointer on another device needs
 * cuDeviceCanAccessPeer and the launching context's access to it, which @p flags
 * KVJIT_TRANSFER_KV_ENABLE_PEER_ACCESS enables where the driver can (memory of a context;
 * cuMemCreate mappings are granted by their owner's cuMemSetAccess).
 * Pinned host memory passes. Call it once where the caches may be on different devices (before
 * capture, beside kvjit_transfer_kv_prepare()): kvjit_transfer_kv() itself never asks the driver
 * where a pointer lives (a few driver queries per pointer would be most of a call's host cost).
 * Thread-safe; nothing is launched or dereferenced.
 * @return KVJIT_ERR_INVALID_ARGUMENT naming the argument and both devices when the launch could
 * not reach it (or @p flags has an unknown bit); KVJIT_ERR_NO_DRIVER / _NO_DEVICE without a GPU.
 */
KVJIT_API kvjit_status kvjit_transfer_kv_check_devices(kvjit_context *ctx, const kvjit_transfer_kv_args *args,
                                                       unsigned flags);

#ifdef __cplusplus
}
#endif

#endif /* KVJIT_H */
