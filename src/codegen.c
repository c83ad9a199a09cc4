/*
 * store_kv_cache specialisation: plans, keys and generated source (see codegen.h).
 *
 * The automatic choice, per batch class (kvjit_store_kv_batch_class()):
 *  - vector width: the widest power of two <= 16 B that divides every pointer, stride and slice;
 *  - split: the smallest split whose slices need at most 32 lanes x chunks_per_lane vectors, so
 *    every lane does one access per row (all issued before any store). Two accesses per lane for
 *    large batches measured 1-6 % slower on the H200 (2026-11-29, bench/results), most at 128 B rows;
 *  - lanes: just enough lanes for the slice (a 128 B row at 16 B uses 8 lanes, not a warp);
 *  - PDL: on for sm_90+ in every class: on the H200 it was faster than off in every graph cell,
 *    large batches of narrow rows included (e.g. 128 B x 65536: 11.6 vs 12.2 us).
 * The table below is the one place to retune after measuring.
 */
#include "codegen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "status.h"

static const kvjit_store_kv_class_rule class_rules[KVJIT_STORE_KV_BATCH_CLASSES] = {
    /* max_batch, chunks_per_lane, pdl_min_row_bytes */
    {16, 1, 0},        /* decode: latency, one access per lane per row */
    {4096, 1, 0},      /* mid: same geometry (kept separate so it can be tuned alone) */
    {INT64_MAX, 1, 0}, /* large: bandwidth (same geometry measured best; kept separate to retune) */
};

const kvjit_store_kv_class_rule *kvjit_store_kv_class_rule_get(int batch_class) {
  if (batch_class < 0 || batch_class >= KVJIT_STORE_KV_BATCH_CLASSES) return NULL;
  return &class_rules[batch_class];
}

static int64_t gcd64(int64_t a, int64_t b) {
  while (b != 0) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int log2_pow2(uint64_t v) {
  int n = 0;
  while (v > 1) {
    v >>= 1;
    n++;
  }
  return n;
}

int kvjit_store_kv_auto_split(int64_t k_row_bytes, int64_t v_row_bytes, int vec, int chunks_per_lane) {
  /* In vectors: a split s is valid when it divides both chunk counts. */
  int64_t k_chunks = k_row_bytes / vec;
  int64_t v_chunks = v_row_bytes / vec;
  int64_t both = v_chunks > 0 ? gcd64(k_chunks, v_chunks) : k_chunks;
  int64_t widest = k_chunks > v_chunks ? k_chunks : v_chunks;
  int64_t per_slice = 32 * (int64_t)chunks_per_lane;
  int64_t wanted = (widest + per_slice - 1) / per_slice;
  if (wanted <= 1 || both <= 1) return 1;
  int64_t limit = both < KVJIT_STORE_KV_MAX_SPLIT ? both : KVJIT_STORE_KV_MAX_SPLIT;
  /* Rows are almost always powers of two times a small odd number: the first try hits. The loops
   * are bounded by the max split either way. */
  for (int64_t s = wanted; s <= limit; s++) {
    if (both % s == 0) return (int)s;
  }
  for (int64_t s = wanted < limit ? wanted : limit; s > 1; s--) {
    if (both % s == 0) return (int)s;
  }
  return 1;
}

int kvjit_store_kv_lanes(int64_t slice_chunks, int chunks_per_lane) {
  int64_t need = (slice_chunks + chunks_per_lane - 1) / chunks_per_lane;
  int lanes = 1;
  while (lanes < 32 && lanes < need) lanes <<= 1;
  return lanes;
}

kvjit_status kvjit_store_kv_plan_make(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes, int64_t v_row_bytes,
                                      int vec, kvjit_index_type index_type, kvjit_pdl_mode pdl, int split,
                                      int batch_class) {
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
  /* The rows bound the vector too: a 196 B row takes 4 B accesses whatever the pointers allow. */
  vec = kvjit_store_kv_vec_of((uint64_t)vec | (uint64_t)k_row_bytes | (uint64_t)v_row_bytes);
  if (split == 0) {
    split = kvjit_store_kv_auto_split(k_row_bytes, v_row_bytes, vec, rule->chunks_per_lane);
  } else {
    if (k_row_bytes % split != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide k_row_bytes %lld", split,
                        (long long)k_row_bytes);
    }
    if (v_row_bytes % split != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d does not divide v_row_bytes %lld", split,
                        (long long)v_row_bytes);
    }
    /* An explicit split whose slices are not whole vectors narrows the vector instead of failing. */
    vec = kvjit_store_kv_vec_of((uint64_t)vec | (uint64_t)(k_row_bytes / split) | (uint64_t)(v_row_bytes / split));
  }
  int64_t widest = k_row_bytes > v_row_bytes ? k_row_bytes : v_row_bytes;
  memset(out, 0, sizeof *out);
  out->arch = arch;
  out->k_row_bytes = k_row_bytes;
  out->v_row_bytes = v_row_bytes;
  out->split = split;
  out->vec = vec;
  out->lanes = kvjit_store_kv_lanes(widest / split / vec, rule->chunks_per_lane);
  out->block = KVJIT_STORE_KV_BLOCK;
  out->index64 = index_type == KVJIT_INDEX_INT64;
  if (pdl == KVJIT_PDL_AUTO) {
    out->pdl = arch >= 90 && widest >= rule->pdl_min_row_bytes;
  } else {
    out->pdl = pdl == KVJIT_PDL_ON;
  }
  return KVJIT_OK;
}

/* b's layout: tag 0..7 | arch 8..17 | log2 vec 18..20 | log2 lanes 21..23 | block/32 24..29 |
 * index64 30 | pdl 31 | split 32..52. a: k_row_bytes << 32 | v_row_bytes. */
#define KVJIT_STORE_KV_KEY_TAG 0x51u

kvjit_fast_key kvjit_store_kv_plan_key(const kvjit_store_kv_plan *plan) {
  kvjit_fast_key key;
  key.a = (uint64_t)plan->k_row_bytes << 32 | (uint64_t)plan->v_row_bytes;
  key.b = (uint64_t)KVJIT_STORE_KV_KEY_TAG | (uint64_t)plan->arch << 8 | (uint64_t)log2_pow2((uint64_t)plan->vec) << 18 |
          (uint64_t)log2_pow2((uint64_t)plan->lanes) << 21 | (uint64_t)(plan->block / 32) << 24 |
          (uint64_t)(plan->index64 != 0) << 30 | (uint64_t)(plan->pdl != 0) << 31 | (uint64_t)plan->split << 32;
  return key;
}

char *kvjit_store_kv_source(const kvjit_store_kv_plan *plan) {
  char prelude[768];
  int n = snprintf(prelude, sizeof prelude,
                   "// kvjit store_kv_cache variant: generated by src/codegen.c\n"
                   "#define KVJIT_K_ROW_BYTES %lld\n"
                   "#define KVJIT_V_ROW_BYTES %lld\n"
                   "#define KVJIT_SPLIT %d\n"
                   "#define KVJIT_VEC %d\n"
                   "#define KVJIT_LANES %d\n"
                   "#define KVJIT_BLOCK %d\n"
                   "#define KVJIT_INDEX_INT64 %d\n"
                   "#define KVJIT_PDL %d\n",
                   (long long)plan->k_row_bytes, (long long)plan->v_row_bytes, plan->split, plan->vec, plan->lanes,
                   plan->block, plan->index64 ? 1 : 0, plan->pdl ? 1 : 0);
  if (n < 0 || (size_t)n >= sizeof prelude) return NULL;
  size_t body = (size_t)kvjit_src_store_kv_cache_len;
  char *src = malloc((size_t)n + body + 1);
  if (src == NULL) return NULL;
  memcpy(src, prelude, (size_t)n);
  memcpy(src + n, kvjit_src_store_kv_cache, body);
  src[(size_t)n + body] = '\0';
  return src;
}

static const char *const store_kv_options[] = {"-std=c++17"};
static const char *const store_kv_kernels[] = {KVJIT_STORE_KV_KERNEL};

void kvjit_store_kv_desc(const kvjit_store_kv_plan *plan, const char *source, kvjit_program_desc *desc) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "kvjit_store_kv_cache.cu";
  d.source = source;
  d.options = store_kv_options;
  d.num_options = sizeof store_kv_options / sizeof store_kv_options[0];
  d.kernels = store_kv_kernels;
  d.num_kernels = 1;
  d.arch = plan->arch;
  *desc = d;
}

uint64_t kvjit_store_kv_blocks(const kvjit_store_kv_plan *plan, int64_t batch) {
  uint64_t groups_per_block = (uint64_t)(plan->block / plan->lanes);
  if (batch <= 0 || (uint64_t)batch > UINT64_MAX / (uint64_t)plan->split) return 0;
  uint64_t groups = (uint64_t)batch * (uint64_t)plan->split;
  uint64_t blocks = groups / groups_per_block + (groups % groups_per_block != 0);
  return blocks > (uint64_t)INT32_MAX ? 0 : blocks;
}
