/* store_kv_cache's checks: its case (check_store_cases.c: the space; check_store.c: the input maker,
 * the host reference and the launch). */
#ifndef KVJIT_TEST_CHECK_STORE_H
#define KVJIT_TEST_CHECK_STORE_H

#include "check.h"

/** What the source rows hold. */
typedef enum store_data {
  STORE_DATA_RANDOM = 0, /* random bytes; quantizing: random values of the dtype, every exponent */
  STORE_DATA_ALL_F16,    /* K rows: the 65536 f16 patterns in order (quantizing from f16) */
  STORE_DATA_EDGES       /* K and V rows: fp8 values, their midpoints and neighbours, specials */
} store_data;

typedef struct store_case {
  check_common common;
  const char *group;
  int64_t batch;
  int64_t k_row, v_row;                 /* source bytes per row; v_row 0: K only */
  int64_t k_pad, v_pad, kc_pad, vc_pad; /* bytes between rows beyond one row */
  int64_t index_stride;                 /* elements, >= 1 */
  int64_t extra_slots;                  /* num_slots = batch + extra_slots; < 0: batch / 4 + 3 */
  kvjit_index_type index_type;
  int split;
  unsigned k_off, v_off, kc_off, vc_off, idx_off; /* base misalignment, bytes */
  int bad_indices;                      /* padding (< 0), past-the-end (and skip-slot) ids mixed in */
  int use_skip;                         /* skip_slot = a real slot */
  /* quantize on store (cache_dtype BYTES: a plain copy) */
  kvjit_dtype dtype, cache_dtype;
  kvjit_scale_kind scale;
  int64_t heads;
  float fixed_scale;                    /* > 0: every scale is this value; else random */
  store_data data;
  int soft;                             /* the integer fp8 conversion (GPUs before sm_89), forced: check_store_soft.c */
  int chain;                            /* two stores, the second reading what the first wrote (PDL's order) */
  int hot_inputs;                       /* bench: every launch reads input set 0 (L2-hot); ids still rotate */
  /* a laid-out cache (tests/test_layouts.h), when layout > 0: kind layout - 1 of heads x head_dim
   * elements, block_size slots per page; the cache pads and offsets then apply to its bases */
  int layout;
  int64_t heads_l, head_dim, block_size;
} store_case;

/** A plain copy of @p batch rows of @p row bytes, int64 ids, every other field at its default. */
store_case store_case_plain(const char *group, int64_t batch, int64_t row);

/** The case space (check_store_cases.c). */
size_t store_case_count(void);
void store_case_get(size_t index, void *c);

/** The variant space from the op's field table, a case of one of its variants, and a case's
 *  variant (check_store_cases.c, check_store.c; check_op's space hooks). */
size_t store_space(const kvjit_variant **out, size_t *dropped);
void store_case_from_variant(const kvjit_variant *v, size_t index, void *c);
int store_case_variant(const void *c, kvjit_variant *out);
/** Source element @p p of dtype @p d (f16, bf16, f32) as fp32 (exact): what a quantizing store converts. */
float check_store_source_value(kvjit_dtype d, const unsigned char *p);

/** The public call's arguments for launch @p l of a case in world @p w (set l->step % w->sets). */
void check_store_args(const void *c, const check_world *w, const check_launch *l, kvjit_store_kv_args *out);

/** The bench driver's pools (check_buf_pool()), the old benches' sizes: each input tensor's rows
 *  rotate within 512 MiB at the front of a 512 MiB pool (bench_store's pools, 8x the H200's L2),
 *  each cache is an allocation of 2 GiB (bench_store's; bench_fp8 wrote its fp8 rows at the front
 *  of 2 GiB caches sized for bf16 ones). For bench_fp8's 2048 B x 16 cell this gave the driver
 *  bench_fp8's layout of virtual addresses (run R2: caches 2.5 and 4.5 GiB below the K rows, V
 *  512 MiB from them). That cell, at the edge of L2, still moves up to ~10 % with where its input
 *  rows land in physical memory, which neither bench controls (bench/BASELINE.md, "The bench
 *  driver against the benchmarks it replaces"). */
#define CHECK_STORE_INPUT_POOL ((size_t)512 << 20)
#define CHECK_STORE_CACHE_POOL ((size_t)2 << 30)

/** The bench driver's cells: rows x batches x index x PDL, plain copies (inputs from DRAM, and
 *  decode cells with L2-hot inputs) and quantizing (check_store_cases.c). */
size_t store_bench_count(void);
void store_bench_get(size_t index, void *c, int timing);

/** The forced integer fp8 path: the op's plan for this GPU with fp8_soft set, launched through the
 *  generic loader (the only use of library internals in the harness). @p prepare: load only.
 *  Weak: linked into the check programs (check_store_soft.c); the bench driver links the public
 *  library alone, and a soft case there fails with KVJIT_ERR_UNSUPPORTED. */
__attribute__((weak)) kvjit_status check_store_launch_soft(kvjit_context *ctx, const kvjit_store_kv_args *args,
                                                           int sm, int prepare);

#endif
