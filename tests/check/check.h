/*
 * The GPU check harness (dav1d's checkasm shape): one table of op families, one harness that runs
 * every case of every op. An op brings what only it knows:
 *  - its case space: count() cases, case get(i) the i-th (a pure function of i: the same case on
 *    every machine and in every run, so that "--case i" reruns it alone);
 *  - an input maker: layout() declares the buffers a case needs (device or pinned host, sizes,
 *    misaligned bases), fill() writes their first contents (random inputs, random poison in every
 *    destination, slot ids with padding and out-of-range ids) and the host reference's result;
 *  - launch(): the public call that should produce that result.
 * The harness does the rest for all ops: allocation, upload, launch on a stream with PDL on, off
 * or automatic, every byte of every buffer compared (outputs against the reference, inputs against
 * what was uploaded: nothing outside the target rows may change), the op's bad-slot counter
 * (kvjit_op_oob_count()), a CUDA graph replayed with new data at the same addresses, quick-mode
 * sampling, bundled prewarm of the cases' variants, and a one-line command that reruns a failing
 * case alone.
 *
 * Adding an op's GPU checks: its check_op (a file like check_store.c) and a line in check_ops.c.
 */
#ifndef KVJIT_TEST_CHECK_H
#define KVJIT_TEST_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_util.h"
#include "kvjit.h"
#include "kvjit_tools.h"

/** Most buffers one case uses. */
#define CHECK_MAX_BUFS 40
/** expected_oob when the op's counter is not the one to read (a kernel launched outside the op). */
#define CHECK_OOB_UNCHECKED UINT64_MAX

/** Launch settings every op's case starts with; the harness applies them. */
typedef struct check_common {
  kvjit_pdl_mode pdl; /**< AUTO: the harness picks AUTO, ON or OFF from the case's index */
  int graph;          /**< > 0: also captured into a CUDA graph and replayed this many times with new data */
  int steps;          /**< launches per run (0 means 1): launch() is called with step 0 .. steps - 1 */
} check_common;

typedef enum check_where { CHECK_DEVICE = 0, CHECK_HOST = 1 } check_where;

/** One buffer of a case. The op fills name .. output in layout(), init and want in fill(). */
typedef struct check_buf {
  char name[24];
  check_where where;  /**< device memory, or pinned host memory the device reaches (UVA) */
  size_t bytes;
  unsigned offset;    /**< the op's pointer is the allocation + offset (misaligned bases) */
  int64_t row;        /**< row stride for messages (0: none) */
  int output;         /**< the op writes it: compared with want; an input is compared with init */
  size_t pool;        /**< timing: the allocation is at least this large, its bytes at the front (check_buf_pool()) */
  /* The harness's: */
  uint64_t ptr;       /**< the address the op passes (device, or host under UVA) */
  uint64_t alloc;
  void *host_alloc;   /**< pinned allocation (CHECK_HOST) */
  unsigned char *init; /**< uploaded before each run (poison for outputs) */
  unsigned char *want; /**< outputs: the reference's result */
} check_buf;

/** A case's buffers and expectations. */
typedef struct check_world {
  int num_bufs;
  check_buf bufs[CHECK_MAX_BUFS];
  uint64_t rng;          /**< the case's random stream (seeded from the op and the index) */
  uint64_t expected_oob; /**< set by fill(): what the op's counter must read after a run */
  uint64_t rows;         /**< set by fill(): rows the reference wrote (statistics) */
  int sm;                /**< compute capability of the device */
  int ids[16];           /**< the op's own record of its buffers' indices (layout() sets them) */
  /** The caches' layouts a case passes (layout() sets them; they live as long as the world), and
   *  where a view starts in its buffer when two views share one (K and V packed in one cache). */
  kvjit_layout layouts[4];
  int64_t layout_v_base;
  /** Input sets (1 in a check): launch j reads set j % sets (its rows and slot ids), the way the
   *  bench driver rotates inputs; layout() sizes the inputs for all of them. */
  int sets;
  /** 1 for the bench driver: buffers of rows (row > 0) and outputs have no host copy (outputs
   *  zeroed, input rows 0x3f80 in every 16 bits: 1.0 as bf16, normal as f16 and f32); fill() writes
   *  the rest (slot ids, tables, scales) for every set, no reference. */
  int timing;
} check_world;

/** The launch of one run: the harness's choices. */
typedef struct check_launch {
  kvjit_pdl_mode pdl;
  struct CUstream_st *stream; /**< NULL: the legacy default stream */
  int step;    /**< the launch's number: a step of a chain, or (timing) the input set j % sets */
  int prepare; /**< 1: kvjit_*_prepare() with these arguments instead of the call (before capture) */
} check_launch;

typedef struct check_op {
  const char *name;  /**< the op's kvjit name (kvjit_op_oob_count(), --op) */
  size_t case_size;  /**< bytes of its case struct, which starts with a check_common */
  size_t (*count)(void);
  void (*get)(size_t index, void *c);
  /** The case's parameters in one line (printed for a failure and by --list). */
  void (*describe)(const void *c, char *out, size_t capacity);
  /** The manifest line of the variant the case uses with @p pdl (for a bundled prewarm), or 0. */
  int (*manifest_line)(const void *c, int sm, kvjit_pdl_mode pdl, char *out, size_t capacity);
  void (*layout)(const void *c, check_world *w);
  /** First contents of every buffer (init) and the reference's result (want of the outputs). */
  void (*fill)(const void *c, check_world *w);
  kvjit_status (*launch)(kvjit_context *ctx, const void *c, const check_world *w, const check_launch *l);
  /* The bench driver (bench/bench_ops.c) times cells of the same op: */
  size_t (*bench_count)(void);
  /** Cell @p index; @p timing 0: the same cell with the small caches of a check (the same
   *  kernels, checked byte for byte first), 1: as timed (caches as large as the benchmarks'). */
  void (*bench_get)(size_t index, void *c, int timing);
  const char *bench_columns; /**< CSV header of a cell's own columns, e.g. "row_bytes,batch,index,pdl" */
  void (*bench_cell)(const void *c, char *out, size_t capacity); /**< those columns' values */
  double (*bench_bytes)(const void *c); /**< bytes one launch reads and writes */
  /** Input sets a timed cell of @p launches launches rotates over (at most what memory and its
   *  slots allow, so that no launch rewrites what the one before it wrote). */
  int (*bench_sets)(const void *c, int launches);
  /** Launches per timed graph: about 3 ms of work, at most bench_max_launches(c) (NULL or 0:
   *  320), estimated from the bytes at 3 TB/s, or (bench_launches_measured) from one timed launch
   *  of the cell. The cap sets what one replay touches, hence what stays in L2 between replays:
   *  a cell takes the cap of the bench it came from. */
  int (*bench_max_launches)(const void *c);
  int bench_launches_measured;
  /** 1 for the cells whose host cost the driver also measures (the whole eager call against a raw
   *  cuLaunchKernelEx of the kernel it launched); NULL: none. */
  int (*bench_host_cost)(const void *c);
  /** For the host cost: the public call's arguments for launch @p l, built once (malloc'd; the
   *  caller frees them), and the bare call on them, so that the cost timed is the library's alone
   *  and not the harness's building of its arguments (launch() builds them at every call). */
  void *(*bench_args)(const void *c, const check_world *w, const check_launch *l);
  kvjit_status (*bench_call)(kvjit_context *ctx, const void *args);
  /* The variant space from the op's field table (check/check_space.h): its cases of group "fields". */
  /** The op's space: check_space_get() with the op's bases; *dropped as there (may be NULL). */
  size_t (*space)(const kvjit_variant **out, size_t *dropped);
  /** The case of variant @p v (@p index picks its batch among a few of every class). */
  void (*from_variant)(const kvjit_variant *v, size_t index, void *c);
  /** The variant case @p c uses with its own PDL mode, arch 0, canonical. @return 0 when it has none. */
  int (*to_variant)(const void *c, kvjit_variant *out);
} check_op;

/** The table of ops (check_ops.c). */
extern const check_op *const check_ops[];
extern const size_t check_num_ops;

/* ---- for the ops' input makers ------------------------------------------------------------------ */

/** Declare a buffer; @return its index in w->bufs. */
int check_buf_add(check_world *w, const char *name, check_where where, size_t bytes, unsigned offset, int64_t row,
                  int output);
/** The op-side pointer of buffer @p i. */
static inline void *check_ptr(const check_world *w, int i) { return (void *)(uintptr_t)w->bufs[i].ptr; }
/** The bench driver's world (w->timing): buffer @p i is allocated at least @p bytes large, the
 *  bytes the op uses at its front, as the benchmarks of record drew rows from pools and wrote
 *  caches of their own sizes (where a cell's rows land in DRAM, hence in L2: a cell at the edge of
 *  L2 moves with it). A check allocates what it uses; @p i < 0 (no such buffer) is ignored. */
void check_buf_pool(check_world *w, int i, size_t bytes);
/** Random init for buffer @p i (and want = init for an output): its poison, or its random input.
 *  Timing: outputs are left alone. */
void check_buf_random(check_world *w, int i);
/** The next value of the case's random stream. */
uint64_t check_rand(check_world *w);

/**
 * Slot ids for @p batch items into @p num_slots slots: a duplicate-free random choice (a partial
 * Fisher-Yates shuffle), written to @p out.
 */
void check_distinct_slots(check_world *w, int64_t *out, int64_t batch, int64_t num_slots);
/** Write @p batch ids as int32 or int64 every @p stride elements of @p out (gaps keep their bytes). */
void check_write_ids(unsigned char *out, const int64_t *ids, int64_t batch, int64_t stride, kvjit_index_type type);

/** The i-th value of the deterministic 64-bit mix (splitmix64's finalizer). */
uint64_t check_mix(uint64_t x);

#endif
