/*
 * transfer_kv's peers beyond the reference (bench_peers.c's table), on the cell's own buffers:
 *  - the bound: kvjit's own kernel with consecutive slots on both sides (set s moves slots
 *    s * batch .. on both), every cell: what the same kernel does when nothing is scattered;
 *  - over the host link, kvjit with every SM the batch needs (max_ctas KVJIT_TRANSFER_KV_ALL_CTAS)
 *    beside its default of few CTAs (issue 29: the default keeps >= 97 % of it);
 *  - per-row copies: what a backend without a kernel does with the ids on the host (SGLang's
 *    "direct" backend): two cuMemcpyAsync per item and layer, enqueued back to back on the stream
 *    (host-bound: timed on the stream, one launch per round, up to 16384 copies of each tensor).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_peers.h"
#include "check/check_transfer.h"

#define PER_ROW_MAX_ITEMS 16384

typedef struct transfer_peer {
  kvjit_context *ctx;
  CUdeviceptr seq;              /* consecutive ids of every set */
  int64_t *src_ids, *dst_ids;   /* per-row copies: set 0's ids on the host */
  uint64_t src_k[64], src_v[64], dst_k[64], dst_v[64]; /* per layer */
} transfer_peer;

void transfer_peer_release(void *state) {
  transfer_peer *p = state;
  if (p == NULL) return;
  gpu_free(p->seq);
  free(p->src_ids);
  free(p->dst_ids);
  free(p);
}

/* Plain copies between flat caches (the converting and host-layout cases are the harness's). */
static int plain(const transfer_case *c) { return c->src_dtype == c->dst_dtype && c->host.kind == KVJIT_HOST_FLAT; }

int transfer_peer_any(const bench_peer *self, const void *c) {
  (void)self;
  return plain(c);
}

int transfer_peer_host(const bench_peer *self, const void *cv) {
  (void)self;
  const transfer_case *c = cv;
  return plain(c) && (c->src == KVJIT_LOCATION_HOST || c->dst == KVJIT_LOCATION_HOST);
}

void *transfer_peer_all_sms_prepare(const bench_peer *self, kvjit_context *ctx, const void *c, const check_world *w) {
  (void)self;
  transfer_peer *p = calloc(1, sizeof *p);
  if (p == NULL) abort();
  p->ctx = ctx;
  kvjit_transfer_kv_args a;
  check_launch l = {((const check_common *)c)->pdl, NULL, 0, 1};
  check_transfer_args(c, w, &l, &a);
  a.max_ctas = KVJIT_TRANSFER_KV_ALL_CTAS;
  if (kvjit_transfer_kv_prepare(ctx, &a) != KVJIT_OK) {
    fprintf(stderr, "bench_ops: all SMs: %s\n", kvjit_last_error());
    transfer_peer_release(p);
    return NULL;
  }
  return p;
}

kvjit_status transfer_peer_all_sms_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  const transfer_peer *p = state;
  kvjit_transfer_kv_args a;
  check_transfer_args(c, w, l, &a);
  a.max_ctas = KVJIT_TRANSFER_KV_ALL_CTAS;
  return kvjit_transfer_kv(p->ctx, &a);
}

static void consecutive_args(const transfer_peer *p, const void *c, const check_world *w, const check_launch *l,
                             kvjit_transfer_kv_args *a) {
  const transfer_case *tc = c;
  check_transfer_args(c, w, l, a);
  const int64_t set = w->sets > 1 ? l->step % w->sets : 0;
  a->src_indices = a->dst_indices = (const char *)(uintptr_t)p->seq + (size_t)(set * tc->batch) * 8;
  a->index_type = KVJIT_INDEX_INT64;
  a->src_index_stride = a->dst_index_stride = 1;
}

void *transfer_peer_consecutive_prepare(const bench_peer *self, kvjit_context *ctx, const void *c,
                                        const check_world *w) {
  (void)self;
  const transfer_case *tc = c;
  transfer_peer *p = calloc(1, sizeof *p);
  if (p == NULL) abort();
  p->ctx = ctx;
  const int64_t n = tc->batch * w->sets;
  int64_t *seq = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (seq == NULL) abort();
  for (int64_t i = 0; i < n; i++) seq[i] = i;
  p->seq = gpu_alloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  gpu_upload(p->seq, seq, sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  free(seq);
  kvjit_transfer_kv_args a;
  check_launch l = {tc->common.pdl, NULL, 0, 1};
  consecutive_args(p, c, w, &l, &a);
  if (kvjit_transfer_kv_prepare(ctx, &a) != KVJIT_OK) {
    fprintf(stderr, "bench_ops: consecutive slots: %s\n", kvjit_last_error());
    transfer_peer_release(p);
    return NULL;
  }
  return p;
}

kvjit_status transfer_peer_consecutive_launch(void *state, const void *c, const check_world *w,
                                              const check_launch *l) {
  const transfer_peer *p = state;
  kvjit_transfer_kv_args a;
  consecutive_args(p, c, w, l, &a);
  return kvjit_transfer_kv(p->ctx, &a);
}

/* ---- per-row copies ---------------------------------------------------------------------------------- */

int transfer_peer_per_row(const bench_peer *self, const void *c) {
  (void)self;
  const transfer_case *tc = c;
  const int layers = tc->layers > 0 ? tc->layers : 1;
  return plain(tc) && tc->batch * layers <= PER_ROW_MAX_ITEMS && tc->v_row == tc->k_row && layers <= 64 &&
         tc->index_type == KVJIT_INDEX_INT64 && tc->src_index_stride == 1 && tc->dst_index_stride == 1;
}

/* The host copy (init) of the buffer that holds device address @p ptr, at its offset. */
static const unsigned char *host_copy(const check_world *w, const void *ptr) {
  const uint64_t at = (uint64_t)(uintptr_t)ptr;
  for (int i = 0; i < w->num_bufs; i++)
    if (at >= w->bufs[i].ptr && at < w->bufs[i].ptr + w->bufs[i].bytes && w->bufs[i].init)
      return w->bufs[i].init + (at - w->bufs[i].ptr);
  return NULL;
}

void *transfer_peer_per_row_prepare(const bench_peer *self, kvjit_context *ctx, const void *c,
                                    const check_world *w) {
  (void)self;
  const transfer_case *tc = c;
  kvjit_transfer_kv_args a;
  check_launch l = {tc->common.pdl, NULL, 0, 0};
  check_transfer_args(c, w, &l, &a);
  const unsigned char *si = host_copy(w, a.src_indices), *di = host_copy(w, a.dst_indices);
  transfer_peer *p = calloc(1, sizeof *p);
  if (p == NULL || si == NULL || di == NULL) abort();
  p->ctx = ctx;
  p->src_ids = malloc(sizeof(int64_t) * (size_t)tc->batch);
  p->dst_ids = malloc(sizeof(int64_t) * (size_t)tc->batch);
  if (p->src_ids == NULL || p->dst_ids == NULL) abort();
  memcpy(p->src_ids, si, sizeof(int64_t) * (size_t)tc->batch);
  memcpy(p->dst_ids, di, sizeof(int64_t) * (size_t)tc->batch);
  /* One layer: the tensors themselves; tables: their entries, as the kernel would read them. */
  const void *const ptrs[4] = {a.src_k, a.src_v, a.dst_k, a.dst_v};
  uint64_t *const outs[4] = {p->src_k, p->src_v, p->dst_k, p->dst_v};
  for (int t = 0; t < 4; t++) {
    if (a.num_layers == 0) {
      outs[t][0] = (uint64_t)(uintptr_t)ptrs[t];
      continue;
    }
    const unsigned char *table = host_copy(w, ptrs[t]);
    if (table == NULL) abort();
    memcpy(outs[t], table, sizeof(uint64_t) * (size_t)a.num_layers);
  }
  return p;
}

kvjit_status transfer_peer_per_row_launch(void *state, const void *c, const check_world *w, const check_launch *l) {
  (void)w;
  const transfer_peer *p = state;
  const transfer_case *tc = c;
  const gpu_driver *drv = gpu_current()->drv;
  const size_t row = (size_t)tc->k_row, ss = (size_t)(tc->k_row + tc->src_pad), ds = (size_t)(tc->k_row + tc->dst_pad);
  /* Set 0's ids every time: the copies are host-bound, which ids they move does not change that. */
  for (int layer = 0; layer < (tc->layers > 0 ? tc->layers : 1); layer++)
    for (int64_t i = 0; i < tc->batch; i++) {
      const size_t so = (size_t)p->src_ids[i] * ss, dof = (size_t)p->dst_ids[i] * ds;
      if (drv->cuMemcpyAsync(p->dst_k[layer] + dof, p->src_k[layer] + so, row, (CUstream)l->stream) != CUDA_SUCCESS ||
          drv->cuMemcpyAsync(p->dst_v[layer] + dof, p->src_v[layer] + so, row, (CUstream)l->stream) != CUDA_SUCCESS)
        return KVJIT_ERR_CUDA;
    }
  return KVJIT_OK;
}
