/*
 * store_kv_cache specialisation: plans and their programs (see store_kv_plan.h).
 *
 * The automatic choice, per batch class (kvjit_store_kv_batch_class()):
 *  - vector width: the widest power of two <= 16 B that divides every pointer, stride and slice;
 *  - split: the smallest split whose slices need at most 32 lanes x chunks_per_lane vectors, so
 *    every lane does one access per row (all issued before any store). Two per lane was tried per
 *    class (H200, 2026-11-29, bench/BASELINE.md "One access per lane"): at batches 257..4096 it won
 *    1-13 % with inputs from DRAM, but once the inputs stayed in L2 and the stores were evict-first
 *    it lost 13-22 % in five of seven shapes (1024 B x 512 1.00 vs 1.29 us, 4096 B x 1024 3.25 vs
 *    3.84) and won 7-8 % in two (8192 B x 1024, 2048 B x 4096). Those two wins are not a size rule
 *    (2026-11-30, the same section): two per lane steps up in time
 *    past 1056 and 2112 blocks (half and all of 132 SMs x 16 blocks): it wins just below a step
 *    (1024 B x 8192 = 2048 blocks 9.89 -> 9.62 us) and loses right past it (x 8704 = 2176 blocks
 *    10.40 -> 10.75, x 4352 5.67 -> 6.98 from DRAM), 0-2 % either way from 12 MiB up. The step past
 *    2112 blocks is a full wave (there with and without PDL); the one past 1056 comes with PDL:
 *    launched without it, 1024 B x 4352 (1088 blocks) takes 5.92 us instead of 7.14, x 6144 7.74
 *    instead of 9.13, while at 1024 and 2048 blocks PDL saves its usual 0.4 us (tune_pdl_steps.txt;
 *    why grids of ~1100-1600 such blocks lose with PDL is not known). One access per lane is faster
 *    with PDL at every measured size. A threshold of 8 MiB per tensor was tried and withdrawn;
 *  - lanes: just enough lanes for the slice (a 128 B row at 16 B uses 8 lanes, not a warp);
 *  - decode batches (<= 16), plain copies: the split prefers slices of a power-of-two vector count,
 *    so that no lane of a group idles (kvjit_rows_whole_split: 96 B at 8 B is 3 slices of 4
 *    lanes, not 12 vectors in 16 lanes). The masked tail cost about one memory latency (H200, hot
 *    inputs: 96 B x 16 0.727 -> 0.642 us, 196 B x 16 0.763 -> 0.649, 1152 B x 16 0.80 -> 0.68).
 *    And rows up to 256 B take 8 B accesses, twice the lanes (128 B x 16 0.638 -> 0.611 us,
 *    256 B x 16 0.640 -> 0.622; batch 1 and 64 B rows within 0.5 %);
 *  - mid-small (batches 17..512): both decode slicing rules. H200, 2026-11-30, tune_store, two
 *    rounds each, hot and from DRAM (bench/BASELINE.md "Mid-small"): 8 B accesses for rows up
 *    to 256 B: 128 B x 32 0.668 -> 0.635 us, x 128 from DRAM 0.734 -> 0.709, x 512 hot 0.741 ->
 *    0.712; 256 B 1-4 % faster (x 512 from DRAM +0.7 %). Beyond 512 it turns: at 2048 8 B was 7-8 %
 *    faster hot but up to 3 % slower from DRAM, at 8192 4-45 % slower. Whole lane groups at 64 and
 *    512: 96 B 0.750 -> 0.680 us (x 64 hot), 192 B 0.841 -> 0.757 (x 512 hot), 1152 B 1.395 ->
 *    1.208 (x 512 hot), 6-14 % in every cell hot and from DRAM. At 4096 it still won 2-6 % but for
 *    96 B hot (+1 %), at 8192 it was mixed (192 B hot +9 %, 1152 B +2-3 %), so mid batches keep
 *    the fewest slices;
 *  - items: at batches > 32768, a lane group of at most 8 lanes stores two items (128 B x 65536:
 *    10.90 -> 10.47 us, 3.08 -> 3.20 TB/s). It is a wave effect: 65536 items x 8 lanes need two
 *    waves of 132 SMs x 2048 threads, paired one. At 4097-32768 it was slower (128 B x 8192
 *    2.37 -> 2.65 us, x 32768 5.91 -> 5.99), and so at 512 B and up;
 *  - evict-first stores (an L2 cache policy on the cache writes): decode batches with rows >= 1 KiB
 *    and every batch 17..32768. The rows just written push out lines that the next kernels read
 *    (first of all this store's own inputs, when the kernel before left them in L2); with the mark
 *    they go first. H200 (graph, per store), inputs in L2: 8192 B x 16 0.97 -> 0.73 us, 4096 B x 16
 *    0.85 -> 0.72, 1024 B x 512 1.62 -> 1.00, 512 B x 1024 1.54 -> 1.19, 8192 B x 1024 7.88 -> 6.93,
 *    1024 B x 8192 7.93 -> 6.97; inputs from DRAM: 1024 B x 16 0.75 -> 0.67, 2048 B x 16 1.09 ->
 *    0.96, 128 B x 128 0.81 -> 0.69, and 0-1.2 % slower at batches 257..32768. Narrower decode rows
 *    were 0.003-0.007 us slower with it. Batches > 32768 keep plain stores: their inputs (>= 8 MB
 *    per tensor at 128 B rows) rarely stay in L2, and from DRAM the mark cost 0.3-0.9 %
 *    (128 B x 65536: 10.47 -> 10.57 us, which would undo the pairing's gain);
 *  - threads per block: 128. Kernels compiled for 32- or 64-thread blocks looked 0.02-0.04 us
 *    faster for one- or two-block grids, but launching the 128-bound kernel with 32/64 threads was
 *    0.02 us slower, and an A/B of the old and new kernel on one machine showed the compiled
 *    differences within 0.005 us: machine-to-machine spread (up to ~5 % per decode cell) was
 *    larger than the effect, so the block stays 128;
 *  - PDL: on for sm_90+ in every class: on the H200 it was faster than off in every graph cell,
 *    large batches of narrow rows included (e.g. 128 B x 65536: 11.6 vs 12.2 us);
 *  - PDL trigger (griddepcontrol.launch_dependents) before the grid's own wait for decode batches,
 *    after it beyond. Where it sits changes only when the next grid may be scheduled (its wait
 *    still waits for this grid). H200, graph, tune_store A/B on one machine (2026-11-30): decode
 *    stores 4-6 % faster, hot inputs 128 B x 16 0.658 -> 0.630 us, 1024 B x 16 0.685 -> 0.644,
 *    2048 B x 16 0.692 -> 0.663, 8192 B x 16 0.738 -> 0.698, batch 1 0.613 -> 0.590; from DRAM
 *    128..2048 B x 16 2-4 % faster, 4096 / 8192 B x 16 1-2 % slower. At batches 64..4096 with
 *    L2-resident inputs it was up to 1.85x slower (1024 B x 512: 1.00 -> 1.84 us; 8192 B x 64,
 *    2048 B x 256, 512 B x 1024 alike) and gained 1-10 % elsewhere (128 B x 16384 hot 2.30 -> 2.08,
 *    128 B x 65536 10.47 -> 10.24), so the mid and large classes keep it after the wait. Choosing
 *    at run time by grid size (a predicated trigger) was slower than both (128 B x 16 0.686 us).
 *    Quantizing plans keep it after the wait (no A/B yet);
 *  - quantizing, at most 8 source bytes per access for decode batches: a lane's chain of
 *    conversions is what a decode store waits for (bf16 -> e4m3, H200, hot inputs: 2048 B x 1
 *    0.99 -> 0.84 us, x 16 1.05 -> 0.88 us; 4 bytes was worse at 8192 B x 16), 16 bytes beyond
 *    (2048 B x 256: 1.34 us at 16 vs 1.58 at 8; x 65536: 112 vs 158 us). Quantizing plans keep one
 *    access per lane, one item per group and plain stores: with evict-first stores the fused fp8
 *    store moved by -0.14..+0.22 us per cell against an earlier run on another machine (2048 B x 1
 *    0.79 -> 0.85, x 16 0.97 -> 0.87), not separable from the machine-to-machine spread, so no
 *    rule until an A/B on one machine.
 * The table below is the one place to retune after measuring.
 */
#include "store_kv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "status.h"

/* The op's template (kernel_src/), embedded at build time by this folder's meson.build. */
extern const char kvjit_src_store_kv_cache[];
/* The same joined with kernel_src/layout.cuh and store_kv_layout.cuh (laid-out caches). */
extern const char kvjit_src_store_kv_layout[];

static const kvjit_store_kv_class_rule class_rules[KVJIT_STORE_KV_CLASSES] = {
    /* max_batch, chunks_per_lane, pdl_min_row_bytes, quant_max_vec, pair_max_lanes, evict_first_min_row,
     * pdl_trigger_first, narrow_max_row, narrow_max_vec, whole_lane_groups */
    [KVJIT_STORE_KV_CLASS_DECODE] = {16, 1, 0, 8, 0, 1024, 1, 256, 8, 1},
    /* latency: evict-first stores for rows >= 1 KiB, early trigger, 8 B accesses for rows <= 256 B,
     * no idle lanes */
    [KVJIT_STORE_KV_CLASS_MID_SMALL] = {512, 1, 0, 16, 0, 0, 0, 256, 8, 1},
    /* as mid, and 8 B accesses for rows <= 256 B, no idle lanes */
    [KVJIT_STORE_KV_CLASS_MID] = {32768, 1, 0, 16, 0, 0, 0, 0, 16, 0},
    /* evict-first stores for every row */
    [KVJIT_STORE_KV_CLASS_LARGE] = {INT64_MAX, 1, 0, 16, 8, -1, 0, 0, 16, 0},
    /* bandwidth: two items per group for narrow rows */
};

const kvjit_store_kv_class_rule *kvjit_store_kv_class_rule_get(int batch_class) {
  if (batch_class < 0 || batch_class >= KVJIT_STORE_KV_CLASSES) return NULL;
  return &class_rules[batch_class];
}

int kvjit_store_kv_batch_class(int64_t batch) {
  int c = 0;
  while (c < KVJIT_STORE_KV_CLASSES - 1 && batch > class_rules[c].max_batch) c++;
  return c;
}

static int is_fp8(kvjit_dtype d) { return d == KVJIT_DTYPE_FP8_E4M3 || d == KVJIT_DTYPE_FP8_E5M2; }
static int is_float_src(kvjit_dtype d) { return d == KVJIT_DTYPE_F16 || d == KVJIT_DTYPE_BF16 || d == KVJIT_DTYPE_F32; }

kvjit_status kvjit_store_kv_quant_resolve(kvjit_store_kv_quant *out, int *quantize, kvjit_dtype dtype,
                                          kvjit_dtype cache_dtype, kvjit_scale_kind scale_kind, int64_t num_heads) {
  *quantize = 0;
  if (kvjit_dtype_name(dtype) == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "dtype: not a kvjit_dtype, got %d", (int)dtype);
  }
  if (kvjit_dtype_name(cache_dtype) == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "cache_dtype: not a kvjit_dtype, got %d", (int)cache_dtype);
  }
  if (scale_kind != KVJIT_SCALE_NONE && scale_kind != KVJIT_SCALE_PER_TENSOR && scale_kind != KVJIT_SCALE_PER_HEAD) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "scale_kind: must be KVJIT_SCALE_NONE (0), _PER_TENSOR (1) or _PER_HEAD (2), got %d",
                      (int)scale_kind);
  }
  int plain = cache_dtype == KVJIT_DTYPE_BYTES || cache_dtype == dtype;
  if (plain) {
    if (scale_kind != KVJIT_SCALE_NONE) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                        "scale_kind: %d needs an fp8 cache_dtype fed from f16/bf16/f32; cache_dtype is %s (a plain copy)",
                        (int)scale_kind, kvjit_dtype_name(cache_dtype == KVJIT_DTYPE_BYTES ? dtype : cache_dtype));
    }
    return KVJIT_OK;
  }
  if (!is_fp8(cache_dtype)) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "cache_dtype: %s from dtype %s: only fp8_e4m3 / fp8_e5m2 caches convert",
                      kvjit_dtype_name(cache_dtype), kvjit_dtype_name(dtype));
  }
  if (!is_float_src(dtype)) {
    return kvjit_fail(dtype == KVJIT_DTYPE_BYTES ? KVJIT_ERR_INVALID_ARGUMENT : KVJIT_ERR_UNSUPPORTED,
                      "dtype: quantizing to %s needs an f16, bf16 or f32 source, got %s", kvjit_dtype_name(cache_dtype),
                      kvjit_dtype_name(dtype));
  }
  if (scale_kind == KVJIT_SCALE_PER_HEAD) {
    if (num_heads < 1 || num_heads > KVJIT_STORE_KV_QUANT_MAX_HEADS) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: must be 1..%d with KVJIT_SCALE_PER_HEAD, got %lld",
                        KVJIT_STORE_KV_QUANT_MAX_HEADS, (long long)num_heads);
    }
  } else {
    num_heads = 0;
  }
  out->dtype = dtype;
  out->cache_dtype = cache_dtype;
  out->scale_kind = scale_kind;
  out->num_heads = num_heads;
  *quantize = 1;
  return KVJIT_OK;
}

kvjit_status kvjit_store_kv_quant_check(const kvjit_store_kv_quant *q, int64_t k_row_bytes, int64_t v_row_bytes,
                                        int split, int *vec) {
  int elem = kvjit_dtype_bytes(q->dtype);
  const char *name = kvjit_dtype_name(q->dtype);
  if (elem < 2 || !is_fp8(q->cache_dtype)) {
    return kvjit_fail(KVJIT_ERR_INTERNAL, "quant: unresolved dtypes %d -> %d", (int)q->dtype, (int)q->cache_dtype);
  }
  if (k_row_bytes > KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES || v_row_bytes > KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %lld is more than a quantizing store takes (%lld)",
                      k_row_bytes > KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES ? "k_row_bytes" : "v_row_bytes",
                      (long long)(k_row_bytes > v_row_bytes ? k_row_bytes : v_row_bytes),
                      (long long)KVJIT_STORE_KV_QUANT_MAX_ROW_BYTES);
  }
  if (k_row_bytes % elem != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_row_bytes: %lld is not a whole number of %d-byte %s elements",
                      (long long)k_row_bytes, elem, name);
  }
  if (v_row_bytes % elem != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_row_bytes: %lld is not a whole number of %d-byte %s elements",
                      (long long)v_row_bytes, elem, name);
  }
  if (split > KVJIT_STORE_KV_QUANT_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be at most %d when quantizing, got %d",
                      KVJIT_STORE_KV_QUANT_MAX_SPLIT, split);
  }
  if (split > 0 && ((k_row_bytes / split) % elem != 0 || (v_row_bytes / split) % elem != 0)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d cuts a %d-byte %s element in two", split, elem, name);
  }
  uint64_t bits = (uint64_t)*vec;
  if (q->scale_kind == KVJIT_SCALE_PER_HEAD) {
    if (q->num_heads < 1 || q->num_heads > KVJIT_STORE_KV_QUANT_MAX_HEADS) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: must be 1..%d, got %lld",
                        KVJIT_STORE_KV_QUANT_MAX_HEADS, (long long)q->num_heads);
    }
    int64_t k_elems = k_row_bytes / elem, v_elems = v_row_bytes / elem;
    if (k_elems % q->num_heads != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: %lld does not divide the %lld elements of a K row",
                        (long long)q->num_heads, (long long)k_elems);
    }
    if (v_elems % q->num_heads != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: %lld does not divide the %lld elements of a V row",
                        (long long)q->num_heads, (long long)v_elems);
    }
    bits |= (uint64_t)(k_row_bytes / q->num_heads) | (uint64_t)(v_row_bytes / q->num_heads);
  }
  int narrowed = kvjit_rows_vec_of(bits);
  if (narrowed < elem) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "vector_bytes: %d is narrower than one %d-byte %s element", *vec, elem,
                      name);
  }
  *vec = narrowed;
  return KVJIT_OK;
}

void kvjit_store_kv_plan_view_of(const kvjit_view *view, kvjit_store_kv_plan_view *out) {
  memset(out, 0, sizeof *out);
  if (kvjit_view_is_flat(view)) return;
  out->page_size = view->page_size;
  out->atom = view->atom;
  for (int d = 0; d < view->num_dims; d++) out->extents[d] = view->extents[d];
}

static int view_flat(const kvjit_store_kv_plan_view *v) { return v == NULL || (v->page_size == 0 && v->extents[0] == 0); }

/* One view's access width: what the pointers allow (@p vec), narrowed to the class's rules, the
 * view's contiguous runs (in source bytes: @p elem per cache byte) and the row. */
static kvjit_status view_vec(int *vec, const kvjit_store_kv_class_rule *rule, int64_t row, int64_t widest,
                             const kvjit_store_kv_plan_view *view, const kvjit_store_kv_quant *quant, int64_t k_row,
                             int64_t v_row, int split) {
  int elem = 1;
  if (quant != NULL) {
    kvjit_status st = kvjit_store_kv_quant_check(quant, k_row, v_row, split, vec);
    if (st != KVJIT_OK) return st;
    elem = kvjit_dtype_bytes(quant->dtype);
    const int cap = rule->quant_max_vec > elem ? rule->quant_max_vec : elem;
    if (*vec > cap) *vec = cap;
  } else if (widest <= rule->narrow_max_row && *vec > rule->narrow_max_vec) {
    *vec = rule->narrow_max_vec;
  }
  uint64_t bits = (uint64_t)*vec | (uint64_t)row;
  if (view->extents[0] != 0) bits |= (uint64_t)(view->atom * elem);
  *vec = kvjit_rows_vec_of(bits);
  if (*vec < elem) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "vector_bytes: %d is narrower than one %d-byte %s element", *vec,
                      elem, kvjit_dtype_name(quant->dtype));
  }
  return KVJIT_OK;
}

/* A layout plan, over the flat plan of the same call (its PDL, stores and quantizing kept): each
 * view its own access width, within its contiguous runs; one item per group; every lane's
 * accesses in flight at once (the layout kernel has no round-by-round path). */
static kvjit_status layout_plan(kvjit_store_kv_plan *out, const kvjit_store_kv_class_rule *rule, int vec, int v_vec,
                                int split, const kvjit_store_kv_quant *quant, const kvjit_store_kv_plan_view *k_view,
                                const kvjit_store_kv_plan_view *v_view) {
  static const kvjit_store_kv_plan_view flat;
  const int64_t k_row = out->k_row_bytes, v_row = out->v_row_bytes;
  const int64_t widest = k_row > v_row ? k_row : v_row;
  int kv = vec, vv = v_row > 0 ? (v_vec ? v_vec : vec) : vec;
  if (k_view == NULL) k_view = &flat;
  if (v_view == NULL) v_view = &flat;
  kvjit_status st = view_vec(&kv, rule, k_row, widest, k_view, quant, k_row, v_row, split);
  if (st == KVJIT_OK && v_row > 0) st = view_vec(&vv, rule, v_row, widest, v_view, quant, k_row, v_row, split);
  if (st != KVJIT_OK) return st;
  if (split > 0) {
    /* An explicit split keeps slices whole vectors by narrowing them (the flat plan checked it divides the rows). */
    kv = kvjit_rows_vec_of((uint64_t)kv | (uint64_t)(k_row / split));
    if (v_row > 0) vv = kvjit_rows_vec_of((uint64_t)vv | (uint64_t)(v_row / split));
  }
  /* In accesses: a split must divide both counts. */
  const int64_t k_chunks = k_row / kv, v_chunks = v_row > 0 ? v_row / vv : 0;
  if (split == 0) {
    /* Whole lane groups where the wider row's slices still fit its lanes (K and V may differ in width). */
    const int64_t wider = k_chunks > v_chunks ? k_chunks : v_chunks;
    if (quant == NULL && rule->whole_lane_groups) split = kvjit_rows_whole_split(k_chunks, v_chunks, 1, rule->chunks_per_lane);
    if (split > 0 && wider / split > 32 * (int64_t)rule->chunks_per_lane) split = 0;
    if (split == 0) split = kvjit_rows_auto_split(k_chunks, v_chunks, 1, rule->chunks_per_lane);
  }
  const int64_t k_per_slice = k_chunks / split, v_per_slice = v_chunks / split;
  const int64_t most = k_per_slice > v_per_slice ? k_per_slice : v_per_slice;
  const int lanes = kvjit_rows_lanes(most, rule->chunks_per_lane);
  const int64_t per_lane = (k_per_slice + lanes - 1) / lanes + (v_per_slice + lanes - 1) / lanes;
  if (per_lane > 16) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED,
                      "split: %d leaves %lld accesses per lane (K %lld B at %d, V %lld B at %d); a layout store holds "
                      "at most 16",
                      split, (long long)per_lane, (long long)k_row, kv, (long long)v_row, vv);
  }
  out->split = split;
  out->vec = kv;
  out->v_vec = vv;
  out->lanes = lanes;
  out->items = 1;
  out->layout = 1;
  out->k_view = *k_view;
  out->v_view = *v_view;
  return KVJIT_OK;
}

kvjit_status kvjit_store_kv_plan_make_layout(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes,
                                             int64_t v_row_bytes, int vec, int v_vec, kvjit_index_type index_type,
                                             kvjit_pdl_mode pdl, int split, int batch_class,
                                             const kvjit_store_kv_quant *quant, const kvjit_store_kv_plan_view *k_view,
                                             const kvjit_store_kv_plan_view *v_view) {
  const kvjit_store_kv_class_rule *rule = kvjit_store_kv_class_rule_get(batch_class);
  if (rule == NULL) return kvjit_fail(KVJIT_ERR_INTERNAL, "batch class %d: out of range", batch_class);
  if (arch <= 0 || arch > KVJIT_STORE_KV_MAX_ARCH) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "arch: must be a compute capability 1..%d, got %d",
                      KVJIT_STORE_KV_MAX_ARCH, arch);
  }
  if (k_row_bytes <= 0 || k_row_bytes > KVJIT_STORE_KV_MAX_ROW_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "k_row_bytes: must be 1..%lld, got %lld",
                      (long long)KVJIT_STORE_KV_MAX_ROW_BYTES, (long long)k_row_bytes);
  }
  if (v_row_bytes < 0 || v_row_bytes > KVJIT_STORE_KV_MAX_ROW_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_row_bytes: must be 0 (K only) or 1..%lld, got %lld",
                      (long long)KVJIT_STORE_KV_MAX_ROW_BYTES, (long long)v_row_bytes);
  }
  if (vec < 1 || vec > 16 || (vec & (vec - 1)) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "vector_bytes: must be 1, 2, 4, 8 or 16, got %d", vec);
  }
  if (index_type != KVJIT_INDEX_INT32 && index_type != KVJIT_INDEX_INT64) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "index_type: must be KVJIT_INDEX_INT32 (1) or KVJIT_INDEX_INT64 (2), got %d",
                      (int)index_type);
  }
  if (pdl != KVJIT_PDL_AUTO && pdl != KVJIT_PDL_ON && pdl != KVJIT_PDL_OFF) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "pdl: must be KVJIT_PDL_AUTO (0), _ON (1) or _OFF (2), got %d",
                      (int)pdl);
  }
  if (pdl == KVJIT_PDL_ON && arch < 90) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "pdl: KVJIT_PDL_ON needs sm_90 or newer, the target is sm_%d", arch);
  }
  if (split < 0 || split > KVJIT_STORE_KV_MAX_SPLIT) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: must be 0 (automatic) or 1..%d, got %d",
                      KVJIT_STORE_KV_MAX_SPLIT, split);
  }
  if (v_vec != 0 && (v_vec < 1 || v_vec > 16 || (v_vec & (v_vec - 1)) != 0)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_vec: must be 0 (= vec), 1, 2, 4, 8 or 16, got %d", v_vec);
  }
  const int asked_vec = vec, asked_split = split;
  if (quant != NULL) {
    kvjit_status st = kvjit_store_kv_quant_check(quant, k_row_bytes, v_row_bytes, split, &vec);
    if (st != KVJIT_OK) return st;
    /* Never below one element: f32 keeps at least its 4 bytes. */
    int elem = kvjit_dtype_bytes(quant->dtype);
    int cap = rule->quant_max_vec > elem ? rule->quant_max_vec : elem;
    if (vec > cap) vec = cap;
  }
  int64_t widest = k_row_bytes > v_row_bytes ? k_row_bytes : v_row_bytes;
  if (quant == NULL && widest <= rule->narrow_max_row && vec > rule->narrow_max_vec) vec = rule->narrow_max_vec;
  /* The rows bound the vector too: a 196 B row takes 4 B accesses whatever the pointers allow. */
  vec = kvjit_rows_vec_of((uint64_t)vec | (uint64_t)k_row_bytes | (uint64_t)v_row_bytes);
  if (split == 0) {
    if (quant == NULL && rule->whole_lane_groups) {
      split = kvjit_rows_whole_split(k_row_bytes, v_row_bytes, vec, rule->chunks_per_lane);
    }
    if (split == 0) split = kvjit_rows_auto_split(k_row_bytes, v_row_bytes, vec, rule->chunks_per_lane);
  } else {
    kvjit_status st = kvjit_rows_split_given(k_row_bytes, v_row_bytes, split, &vec);
    if (st != KVJIT_OK) return st;
  }
  memset(out, 0, sizeof *out);
  out->arch = arch;
  out->k_row_bytes = k_row_bytes;
  out->v_row_bytes = v_row_bytes;
  out->split = split;
  out->vec = vec;
  out->lanes = kvjit_rows_lanes(widest / split / vec, rule->chunks_per_lane);
  out->block = KVJIT_STORE_KV_BLOCK;
  /* Two items per group: only where every lane makes one access per row (kernel's static_assert). */
  out->items = quant == NULL && out->lanes <= rule->pair_max_lanes &&
                       (widest / split / vec + out->lanes - 1) / out->lanes <= 1
                   ? 2
                   : 1;
  out->evict_first =
      quant == NULL && arch >= 80 && rule->evict_first_min_row >= 0 && widest >= rule->evict_first_min_row;
  out->index64 = index_type == KVJIT_INDEX_INT64;
  if (pdl == KVJIT_PDL_AUTO) {
    out->pdl = arch >= 90 && widest >= rule->pdl_min_row_bytes;
  } else {
    out->pdl = pdl == KVJIT_PDL_ON;
  }
  out->pdl_trigger_first = quant == NULL && out->pdl && rule->pdl_trigger_first;
  if (quant != NULL) {
    /* An explicit split may have narrowed the vector below one element: kvjit_store_kv_quant_check caught a
     * split cutting an element, so vec >= element here. */
    out->src_dtype = quant->dtype;
    out->cache_dtype = quant->cache_dtype;
    out->scale_kind = quant->scale_kind;
    out->num_heads = quant->scale_kind == KVJIT_SCALE_PER_HEAD ? quant->num_heads : 0;
    out->fp8_soft = arch < KVJIT_STORE_KV_FP8_HW_ARCH;
  }
  if (!view_flat(k_view) || !view_flat(v_view)) {
    return layout_plan(out, rule, asked_vec, v_vec, asked_split, quant, k_view, v_view);
  }
  if (v_vec != 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "v_vec: %d given for flat caches (one vec)", v_vec);
  return KVJIT_OK;
}

int kvjit_store_kv_kernel_name(const kvjit_store_kv_plan *plan, char *out, size_t capacity) {
  const int quant = plan->cache_dtype != KVJIT_DTYPE_BYTES;
  /* The template's arguments in its order (kernel_src/store_kv_cache.cuh): what the #define
   * prelude of each variant's program held before issue 19, value for value. */
  int n = snprintf(out, capacity, KVJIT_STORE_KV_KERNEL "<%lld,%lld,%d,%d,%d,%d,%d,%d,%d,%d,%d,%lld,%lld,%d,%d,%d,%d>",
                   (long long)plan->k_row_bytes, (long long)plan->v_row_bytes, plan->split, plan->vec, plan->lanes,
                   plan->block, plan->index64 ? 1 : 0, plan->pdl ? 1 : 0, quant ? (int)plan->src_dtype : 0,
                   !quant ? 0 : plan->cache_dtype == KVJIT_DTYPE_FP8_E4M3 ? 1 : 2, quant ? (int)plan->scale_kind : 0,
                   (long long)(plan->num_heads ? plan->k_row_bytes / plan->num_heads : 0),
                   (long long)(plan->num_heads ? plan->v_row_bytes / plan->num_heads : 0), plan->fp8_soft ? 1 : 0,
                   plan->items == 2 ? 2 : 1, plan->evict_first ? 1 : 0, plan->pdl && plan->pdl_trigger_first ? 1 : 0);
  if (n < 0 || (size_t)n >= capacity) return -1;
  if (plan->layout) {
    /* The layout kernel's overload (kernel_src/store_kv_layout.cuh): V's width and the two views. */
    const kvjit_store_kv_plan_view *k = &plan->k_view, *v = &plan->v_view;
    int m = snprintf(out + n - 1, capacity - (size_t)n + 1, ",%d,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld>",
                     plan->v_vec, (long long)k->page_size, (long long)(k->atom ? k->atom : 1), (long long)k->extents[0],
                     (long long)k->extents[1], (long long)k->extents[2], (long long)v->page_size,
                     (long long)(v->atom ? v->atom : 1), (long long)v->extents[0], (long long)v->extents[1],
                     (long long)v->extents[2]);
    if (m < 0 || (size_t)m >= capacity - (size_t)n + 1) return -1;
    n += m - 1;
  }
  return n;
}

/* -minimal: NVRTC leaves out of its built-in header what the template does not use (textures,
 * device-side runtime calls and launches), a part of every compile's front end; the kernels' code
 * is the same with and without it (tests/test_group_sass.c). */
static const char *const store_kv_options[] = {"-std=c++17", "-minimal"};

kvjit_status kvjit_store_kv_program(const kvjit_store_kv_plan *plan, kvjit_op_program *out) {
  /* One name for every store program of flat caches: the template is the source of all of them, so
   * plain and quantizing variants of one arch can share a program (the kernel names tell them
   * apart). The name is part of the key: keep it stable. Laid-out caches: the second template
   * (the first joined with layout.cuh and store_kv_layout.cuh), so flat kernels keep their key. */
  if (plan->layout) {
    kvjit_op_program_init(out, "kvjit_store_kv_layout.cu", kvjit_src_store_kv_layout, store_kv_options,
                          sizeof store_kv_options / sizeof store_kv_options[0], plan->arch);
  } else {
    kvjit_op_program_init(out, "kvjit_store_kv_cache.cu", kvjit_src_store_kv_cache, store_kv_options,
                          sizeof store_kv_options / sizeof store_kv_options[0], plan->arch);
  }
  if (kvjit_store_kv_kernel_name(plan, out->kernel, sizeof out->kernel) < 0) {
    return kvjit_fail(KVJIT_ERR_INTERNAL, "store_kv_cache: kernel name longer than %d bytes",
                      KVJIT_OP_MAX_KERNEL_NAME - 1);
  }
  return KVJIT_OK;
}
