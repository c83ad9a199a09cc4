/*
 * transfer_kv plans and their programs (see transfer_kv_plan.h).
 *
 * The choice, per batch class and link (first cut; bench/bench_ops measures it on the GPU
 * against the bounds, and the rules are retuned from its tables):
 *  - vector width: the widest power of two <= 16 B dividing every stride, slice and pointer;
 *  - split and lanes: as store_kv_cache's (op/rows.h: kvjit_rows_auto_split, kvjit_rows_lanes): the smallest
 *    split whose slices need at most 32 lanes x chunks_per_lane vectors;
 *  - device to device: one access per lane (all of a lane's loads issued before its stores, as in
 *    the store); at batches > 32768 a group of <= 8 lanes moves two items, for the same wave
 *    reason as the store's pairing;
 *  - over the host link (either side pinned host memory): at most KVJIT_TRANSFER_KV_HOST_CTAS
 *    CTAs, KVJIT_TRANSFER_KV_HOST_WRITE_CTAS writing host memory (or the caller's max_ctas; the
 *    launch's cap, not the binary's) that stride over the batch, up to 8 accesses per lane per
 *    slice (4 reading host memory), at least a 128-byte line per group and instruction, and as
 *    many threads as hold 64 KiB in flight per CTA (128 KiB reading host memory): the link, not
 *    the SMs, is the bound, and the model running beside a transfer keeps its SMs and its memory
 *    system (issue 29; bench/bench_overlap.c). The
 *    all-SM plan (max_ctas KVJIT_TRANSFER_KV_ALL_CTAS): two accesses per lane from batch 65 up,
 *    the grid the batch needs. Either way cache-streaming accesses (kernel_src/transfer_kv.cuh).
 *  - converting (fp8 <-> f16/bf16/f32): the same, in source bytes; a dequantizing access reads at
 *    most 16 / (destination element size) bytes, so that its store is at most 16.
 *  - PDL: auto is on from sm_90, as for the store; on few CTAs the next grid launches when the
 *    CTAs are done (the template's Pdl 2), not while they copy.
 */
#include "transfer_kv_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "status.h"

/* The op's template (kernel_src/), embedded at build time by this folder's meson.build. */
extern const char kvjit_src_transfer_kv[];

int kvjit_transfer_kv_batch_class(int64_t batch) {
  if (batch <= 64) return KVJIT_TRANSFER_KV_CLASS_SMALL;
  if (batch <= 32768) return KVJIT_TRANSFER_KV_CLASS_MID;
  return KVJIT_TRANSFER_KV_CLASS_LARGE;
}

/* Target vector accesses per lane per slice: the rule above. */
static int chunks_per_lane(int host_link, int batch_class) {
  return host_link && batch_class != KVJIT_TRANSFER_KV_CLASS_SMALL ? 2 : 1;
}
/* On few CTAs: up to 8 accesses per lane per slice (16 with V, all in flight before the first
 * store; the template's most) ... */
#define FEW_CHUNKS_PER_LANE 8
/* ... and as many threads as hold this many bytes of rows in flight per CTA (a power of two,
 * 128..1024): reading host memory, 4 CTAs of 64 KiB kept >= 98.8 % of the all-SM plan's bandwidth at
 * 0.5-16 KiB rows (run xfer29-3 on the H200; 3 CTAs: 87-95 % at 512 B rows: PCIe reads of ~55 GB/s
 * take a few microseconds each), and reads now take 128 KiB (below); writing it, 3 CTAs (192 KiB)
 * keep >= 98.9 %.
 * A cuBLAS GEMM beside the copy (bench/bench_overlap.c): holding SMs at all costs it ~0-15 %
 * (its 132 persistent CTAs); the plan before (4 x 1024 threads x 128 B, 512 KiB, PDL triggered at
 * the start) added 40-130 points d2h by pushing host-bound stores into the GPU faster than the
 * link drains them; 4 CTAs of 64 KiB d2h +11/+26 %, 3 CTAs +3/+8 % (SGLang's 2 blocks -5/+4 %). */
#define FEW_BYTES_PER_CTA (64 << 10)
/* Reading host memory (host to device, host to host), 4 accesses per lane and 128 KiB per CTA
 * instead: the 4 MiB of a 1024 x 2 KiB load take 84.8-85.4 us on 1024-thread CTAs of 32 lanes x 4
 * accesses (runs xfer29-2, -3, tma29-2 on the H200) against 85.6-86.3 us on 256 threads x 16 lanes
 * x 8, the start of every copy being shorter with more warps issuing the first requests; the
 * steady rate is the same (~51.2 GB/s at 16384 rows either way; TMA bulk copies too, run tma29).
 * Nor does the load's form move it (run h2d29-Q1, bench/results/2026-12-02-h200-h2d29, every form
 * alternated on the same buffers): with an L2 prefetch size of 128 or 256 bytes (ld.global.cs.L2::128B,
 * ::256B) or L1 not allocated, the 4 MiB load takes the same 85.0-85.5 us (min) and 16384 x 2 KiB the
 * same ~1312 us; the read-only path (ld.global.nc.L1::no_allocate) is 7-9 % slower. The copy engine
 * streams at ~55.2 GB/s. */
#define FEW_READ_CHUNKS_PER_LANE 4
#define FEW_READ_BYTES_PER_CTA (128 << 10)
/* ... and at least a 128-byte line per instruction and group: with 4 lanes of 16 B (512 B rows at 8
 * accesses per lane, run D of issue 29) each request over the link carried 64 bytes, and the plan
 * reached 88-90 % of the all-SM plan's bandwidth; 16 lanes (2 KiB rows) reached 99.5-100 %. */
#define FEW_LINE_BYTES 128

/* Threads per CTA of a few-CTA plan: @p per_cta bytes over the bytes a thread holds in flight (its
 * K and V accesses of a slice, all of them up to the template's 16, else a round of 8). */
static int few_block(int64_t k_row, int64_t v_row, int split, int vec, int lanes, int64_t per_cta) {
  const int64_t per_lane = ((k_row / split / vec + lanes - 1) / lanes) + ((v_row / split / vec + lanes - 1) / lanes);
  const int64_t bytes = (per_lane <= 16 ? per_lane : 8) * vec;
  int block = KVJIT_TRANSFER_KV_FEW_BLOCK;
  while (block > 128 && (int64_t)block * bytes > per_cta) block /= 2;
  return block;
}

static int elem_bytes(kvjit_dtype d) { return d == KVJIT_DTYPE_BYTES ? 1 : kvjit_dtype_bytes(d); }

void kvjit_transfer_kv_shape_plain(kvjit_transfer_kv_shape *out, int64_t k_row_bytes, int64_t v_row_bytes,
                                   kvjit_location src, kvjit_location dst) {
  memset(out, 0, sizeof *out);
  out->k_row_bytes = k_row_bytes;
  out->v_row_bytes = v_row_bytes;
  out->vec = 16;
  out->index_type = KVJIT_INDEX_INT64;
  out->pdl = KVJIT_PDL_AUTO;
  out->src = src;
  out->dst = dst;
  out->src_dtype = out->dst_dtype = KVJIT_DTYPE_BYTES;
  out->scale_kind = KVJIT_SCALE_NONE;
  out->ctas = KVJIT_TRANSFER_KV_CTAS_AUTO;
  kvjit_view_flat(&out->src_view, 0, 0);
  kvjit_view_flat(&out->dst_view, 0, 0);
}

/* A view's static part as the template takes it: page size, run bytes, extents (flat: all 0). */
static void static_part(const kvjit_view *v, int64_t out[5]) {
  memset(out, 0, 5 * sizeof out[0]);
  if (kvjit_view_is_flat(v)) return;
  out[0] = v->page_size;
  out[1] = v->atom;
  for (int d = 0; d < v->num_dims; d++) out[2 + d] = v->extents[d];
}

static int is_fp8(kvjit_dtype d) { return d == KVJIT_DTYPE_FP8_E4M3 || d == KVJIT_DTYPE_FP8_E5M2; }
static int is_float(kvjit_dtype d) { return d == KVJIT_DTYPE_F16 || d == KVJIT_DTYPE_BF16 || d == KVJIT_DTYPE_F32; }

kvjit_status kvjit_transfer_kv_convert_resolve(kvjit_transfer_kv_shape *s) {
  if (kvjit_dtype_name(s->src_dtype) == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "src_dtype: not a kvjit_dtype, got %d", (int)s->src_dtype);
  }
  if (kvjit_dtype_name(s->dst_dtype) == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "dst_dtype: not a kvjit_dtype, got %d", (int)s->dst_dtype);
  }
  if (s->scale_kind != KVJIT_SCALE_NONE && s->scale_kind != KVJIT_SCALE_PER_TENSOR &&
      s->scale_kind != KVJIT_SCALE_PER_HEAD) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "scale_kind: must be KVJIT_SCALE_NONE (0), _PER_TENSOR (1) or _PER_HEAD (2), got %d",
                      (int)s->scale_kind);
  }
  if (s->dst_dtype == KVJIT_DTYPE_BYTES || s->dst_dtype == s->src_dtype) {
    if (s->scale_kind != KVJIT_SCALE_NONE) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                        "scale_kind: %d needs a conversion (fp8 <-> f16/bf16/f32); %s to %s is a plain copy",
                        (int)s->scale_kind, kvjit_dtype_name(s->src_dtype), kvjit_dtype_name(s->dst_dtype));
    }
    s->src_dtype = s->dst_dtype = KVJIT_DTYPE_BYTES; /* a plain copy's kernel knows no element type */
    s->num_heads = 0;
    return KVJIT_OK;
  }
  if (!(is_fp8(s->src_dtype) && is_float(s->dst_dtype)) && !(is_float(s->src_dtype) && is_fp8(s->dst_dtype))) {
    return kvjit_fail(s->src_dtype == KVJIT_DTYPE_BYTES ? KVJIT_ERR_INVALID_ARGUMENT : KVJIT_ERR_UNSUPPORTED,
                      "dst_dtype: %s from src_dtype %s: transfer_kv converts fp8 to f16/bf16/f32 and f16/bf16/f32 "
                      "to fp8 only",
                      kvjit_dtype_name(s->dst_dtype), kvjit_dtype_name(s->src_dtype));
  }
  if (s->scale_kind == KVJIT_SCALE_PER_HEAD) {
    if (s->num_heads < 1 || s->num_heads > KVJIT_TRANSFER_KV_MAX_HEADS) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: must be 1..%d with KVJIT_SCALE_PER_HEAD, got %lld",
                        KVJIT_TRANSFER_KV_MAX_HEADS, (long long)s->num_heads);
    }
  } else {
    s->num_heads = 0;
  }
  if (s->k_row_bytes > KVJIT_TRANSFER_KV_CONVERT_MAX_ROW_BYTES || s->v_row_bytes > KVJIT_TRANSFER_KV_CONVERT_MAX_ROW_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %lld is more than a converting copy takes (%lld)",
                      s->k_row_bytes > KVJIT_TRANSFER_KV_CONVERT_MAX_ROW_BYTES ? "k_row_bytes" : "v_row_bytes",
                      (long long)(s->k_row_bytes > s->v_row_bytes ? s->k_row_bytes : s->v_row_bytes),
                      (long long)KVJIT_TRANSFER_KV_CONVERT_MAX_ROW_BYTES);
  }
  return KVJIT_OK;
}

/* Converting: rows of whole source elements, and per-head scales' heads dividing both rows. */
static kvjit_status check_elements(const kvjit_transfer_kv_shape *s, int es, int64_t *k_head, int64_t *v_head) {
  *k_head = *v_head = 0;
  const char *name = kvjit_dtype_name(s->src_dtype);
  if (s->k_row_bytes % es != 0 || s->v_row_bytes % es != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %lld is not a whole number of %d-byte %s elements",
                      s->k_row_bytes % es ? "k_row_bytes" : "v_row_bytes",
                      (long long)(s->k_row_bytes % es ? s->k_row_bytes : s->v_row_bytes), es, name);
  }
  if (s->scale_kind != KVJIT_SCALE_PER_HEAD) return KVJIT_OK;
  const int64_t h = s->num_heads;
  if (h < 1 || (s->k_row_bytes / es) % h != 0 || (s->v_row_bytes / es) % h != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "num_heads: %lld does not divide the %lld K and %lld V elements of a row",
                      (long long)h, (long long)(s->k_row_bytes / es), (long long)(s->v_row_bytes / es));
  }
  *k_head = s->k_row_bytes / h;
  *v_head = s->v_row_bytes / h;
  return KVJIT_OK;
}

kvjit_status kvjit_transfer_kv_plan_make(kvjit_transfer_kv_plan *out, int arch, const kvjit_transfer_kv_shape *shape,
                                         int batch_class) {
  if (batch_class < 0 || batch_class >= KVJIT_TRANSFER_KV_CLASSES) {
    return kvjit_fail(KVJIT_ERR_INTERNAL, "transfer_kv: batch class %d out of range", batch_class);
  }
  if (shape->pdl == KVJIT_PDL_ON && arch < 90) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "pdl: on needs sm_90 or newer, the target is sm_%d", arch);
  }
  const int64_t k_row_bytes = shape->k_row_bytes, v_row_bytes = shape->v_row_bytes;
  const int host_link = shape->src == KVJIT_LOCATION_HOST || shape->dst == KVJIT_LOCATION_HOST;
  const int few = shape->ctas == KVJIT_TRANSFER_KV_CTAS_FEW || (shape->ctas == KVJIT_TRANSFER_KV_CTAS_AUTO && host_link);
  const int converting = shape->src_dtype != KVJIT_DTYPE_BYTES;
  const int es = elem_bytes(shape->src_dtype), ed = elem_bytes(shape->dst_dtype);
  int64_t k_head = 0, v_head = 0;
  if (converting) {
    kvjit_status st = check_elements(shape, es, &k_head, &v_head);
    if (st != KVJIT_OK) return st;
  }
  const int reads_host = few && shape->src == KVJIT_LOCATION_HOST;
  const int cpl = reads_host ? FEW_READ_CHUNKS_PER_LANE
                  : few      ? FEW_CHUNKS_PER_LANE
                             : chunks_per_lane(host_link, batch_class);
  /* A view's accesses stay inside its runs: the source's in source bytes, the destination's in
   * destination bytes (converting, as many source bytes as its elements). */
  const int src_laid = !kvjit_view_is_flat(&shape->src_view), dst_laid = !kvjit_view_is_flat(&shape->dst_view);
  if ((src_laid || dst_laid) && v_row_bytes != 0 && v_row_bytes != k_row_bytes) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED,
                      "v_row_bytes: laid-out caches take V rows of K's size (one view per side), got %lld and %lld",
                      (long long)v_row_bytes, (long long)k_row_bytes);
  }
  const uint64_t runs = (uint64_t)(shape->src_view.num_dims ? shape->src_view.atom : 0) |
                        (uint64_t)(shape->dst_view.num_dims ? shape->dst_view.atom / ed * es : 0);
  int vec = kvjit_rows_vec_of((uint64_t)shape->vec | (uint64_t)k_row_bytes | (uint64_t)v_row_bytes |
                              (uint64_t)k_head | (uint64_t)v_head | runs);
  /* Dequantizing widens each byte: a destination access of at most 16 bytes. */
  if (ed > es && vec > 16 / ed * es) vec = 16 / ed * es;
  int split = shape->split;
  if (split == 0) {
    split = kvjit_rows_auto_split(k_row_bytes, v_row_bytes, vec, cpl);
  } else {
    kvjit_status st = kvjit_rows_split_given(k_row_bytes, v_row_bytes, split, &vec);
    if (st != KVJIT_OK) return st;
  }
  if (vec < es) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "split: %d cuts a %d-byte %s element of a row in two", split, es,
                      kvjit_dtype_name(shape->src_dtype));
  }
  const int64_t widest = k_row_bytes > v_row_bytes ? k_row_bytes : v_row_bytes;
  memset(out, 0, sizeof *out);
  out->arch = arch;
  out->k_row_bytes = k_row_bytes;
  out->v_row_bytes = v_row_bytes;
  out->split = split;
  out->vec = vec;
  out->lanes = kvjit_rows_lanes(widest / split / vec, cpl);
  if (few) {
    const int whole = kvjit_rows_lanes(widest / split / vec, 1); /* one access each */
    const int line = FEW_LINE_BYTES / vec < whole ? FEW_LINE_BYTES / vec : whole;
    if (out->lanes < line) out->lanes = line;
  }
  out->block = few ? few_block(k_row_bytes, v_row_bytes, split, vec, out->lanes,
                               reads_host ? FEW_READ_BYTES_PER_CTA : FEW_BYTES_PER_CTA)
                   : KVJIT_TRANSFER_KV_BLOCK;
  const int one_access = (widest / split / vec + out->lanes - 1) / out->lanes <= 1;
  out->items = !few && !host_link && !src_laid && !dst_laid && batch_class == KVJIT_TRANSFER_KV_CLASS_LARGE &&
                       out->lanes <= 8 && one_access
                   ? 2
                   : 1;
  out->index64 = shape->index_type == KVJIT_INDEX_INT64;
  const kvjit_pdl_mode pdl = shape->pdl;
  out->pdl = pdl == KVJIT_PDL_AUTO ? arch >= 90 : pdl == KVJIT_PDL_ON;
  /* Few CTAs: the next grid launches when this one's CTAs are done, not while they copy (the
   * template's Pdl 2; why: kernel_src/transfer_kv.cuh). Reading host memory, triggering at the start
   * (Pdl 1) or once a CTA has issued its last loads took the same time per back-to-back call, within
   * 0.5 us of Pdl 2 (run h2d29-Q1: the ~3 us a call costs beyond its bytes is not the next launch);
   * pdl off, 0.5-0.9 us more. */
  if (few && out->pdl) out->pdl = 2;
  out->table = shape->table != 0;
  out->host_link = host_link;
  out->src_dtype = shape->src_dtype;
  out->dst_dtype = shape->dst_dtype;
  out->scale = converting ? shape->scale_kind : KVJIT_SCALE_NONE;
  out->k_head_bytes = k_head;
  out->v_head_bytes = v_head;
  /* cvt.rn.satfinite to fp8 is sm_89's; before, the integer encoding (the same bits). */
  out->fp8_soft = converting && ed < es && arch < 89;
  out->loop = few;
  out->stream = host_link; /* the rule and its why: kernel_src/transfer_kv.cuh, Stream */
  static_part(&shape->src_view, out->src_view);
  static_part(&shape->dst_view, out->dst_view);
  return KVJIT_OK;
}

int kvjit_transfer_kv_kernel_name(const kvjit_transfer_kv_plan *plan, char *out, size_t capacity) {
  /* The template's arguments in its order (kernel_src/transfer_kv.cuh). */
  const int64_t *sv = plan->src_view, *dv = plan->dst_view;
  int n = snprintf(out, capacity,
                   KVJIT_TRANSFER_KV_KERNEL "<%lld,%lld,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%lld,%lld,%d,%d,%lld,%lld,%lld,"
                                            "%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d>",
                   (long long)plan->k_row_bytes, (long long)plan->v_row_bytes, plan->split, plan->vec, plan->lanes,
                   plan->block, plan->items, plan->index64 ? 1 : 0, plan->pdl, plan->table ? 1 : 0,
                   plan->src_dtype, plan->dst_dtype, plan->scale, (long long)plan->k_head_bytes,
                   (long long)plan->v_head_bytes, plan->fp8_soft, plan->loop, (long long)sv[0], (long long)sv[1],
                   (long long)sv[2], (long long)sv[3], (long long)sv[4], (long long)dv[0], (long long)dv[1],
                   (long long)dv[2], (long long)dv[3], (long long)dv[4], plan->stream);
  return n < 0 || (size_t)n >= capacity ? -1 : n;
}

/* -minimal: as the store's (store_kv_plan.c). */
static const char *const transfer_kv_options[] = {"-std=c++17", "-minimal"};

kvjit_status kvjit_transfer_kv_program(const kvjit_transfer_kv_plan *plan, kvjit_op_program *out) {
  /* The name shows in `kvjit cache ls` and is part of the key: keep it stable. */
  kvjit_op_program_init(out, "kvjit_transfer_kv.cu", kvjit_src_transfer_kv, transfer_kv_options,
                        sizeof transfer_kv_options / sizeof transfer_kv_options[0], plan->arch);
  if (kvjit_transfer_kv_kernel_name(plan, out->kernel, sizeof out->kernel) < 0) {
    return kvjit_fail(KVJIT_ERR_INTERNAL, "transfer_kv: kernel name longer than %d bytes",
                      KVJIT_OP_MAX_KERNEL_NAME - 1);
  }
  return KVJIT_OK;
}
