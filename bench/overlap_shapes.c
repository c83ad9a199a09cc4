/*
 * bench_overlap's launch shapes (overlap_shapes.h): the real transfer_kv template, other constants.
 */
#include "overlap_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_peers.h"
#include "bench_util.h"

/* Mirrors kernel_src/transfer_kv.cuh's kvjit_transfer_kv_params (every field 8 bytes). */
typedef struct shape_view {
  int64_t page_stride, slot_stride, strides[3];
} shape_view;
typedef struct shape_params {
  const void *src_k, *src_v, *dst_k, *dst_v, *src_indices, *dst_indices;
  int64_t src_k_stride, src_v_stride, dst_k_stride, dst_v_stride, src_index_stride, dst_index_stride;
  int64_t batch, src_num_slots, dst_num_slots;
  const float *k_scale, *v_scale;
  int64_t scale_stride;
  shape_view views[4];
} shape_params;

int overlap_shape_parse(const char *spec, overlap_shape *out) {
  memset(out, 0, sizeof *out);
  if (strlen(spec) >= sizeof out->name) return 0;
  snprintf(out->name, sizeof out->name, "%s", spec);
  const int fat = strncmp(spec, "spinfat:", 8) == 0;
  if (fat || strncmp(spec, "spin:", 5) == 0) {
    out->spin = 1 + fat;
    return sscanf(spec + (fat ? 8 : 5), "%d:%d", &out->ctas, &out->threads) == 2 && out->ctas >= 1 &&
           out->ctas <= 4096 &&
           out->threads >= 32 && out->threads <= 1024 && out->threads % 32 == 0;
  }
  return sscanf(spec, "%d:%d:%d:%d:%d", &out->ctas, &out->threads, &out->cpl, &out->pdl, &out->stream) == 5 &&
         out->ctas >= 1 && out->ctas <= 4096 && out->threads >= 32 && out->threads <= 1024 &&
         out->threads % 32 == 0 && (out->cpl == 1 || out->cpl == 2 || out->cpl == 4 || out->cpl == 8) &&
         out->pdl >= 0 && out->pdl <= 2 && (out->stream == 0 || out->stream == 1);
}

/* Lanes and split for @p cpl accesses of 16 B per lane per slice: 32 lanes (a 512-byte instruction
 * per group) unless the row is too short for them. */
static int shape_geometry(int64_t row, int cpl, int *lanes, int *split) {
  const int64_t chunks = row / 16;
  if (row % 16 != 0) return 0;
  int l = 32;
  while (l > 1 && (int64_t)l * cpl > chunks) l /= 2;
  if (chunks % ((int64_t)l * cpl) != 0) return 0;
  *lanes = l;
  *split = (int)(chunks / ((int64_t)l * cpl));
  return 1;
}

int overlap_kernels_make(kvjit_context *ctx, const overlap_shape *shapes, int n, int64_t row, int index64,
                         overlap_kernel *out) {
  char names[64][200];
  const char *list[64];
  int where[64], count = 0;
  if (n > 64) return 0;
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].shape = &shapes[i];
    if (shapes[i].spin) {
      snprintf(names[count], sizeof names[count], shapes[i].spin == 2 ? "bench_spin_fat" : "bench_spin");
    } else {
      if (!shape_geometry(row, shapes[i].cpl, &out[i].lanes, &out[i].split)) continue;
      /* The template's arguments in its order (transfer_kv_plan.c's kvjit_transfer_kv_kernel_name()):
       * a plain copy of flat caches, one layer, Loop 1. */
      snprintf(names[count], sizeof names[count],
               "kvjit_transfer_kv<%lld,%lld,%d,16,%d,%d,1,%d,%d,0,0,0,0,0,0,0,1,0,0,0,0,0,0,0,0,0,0,%d>",
               (long long)row, (long long)row, out[i].split, out[i].lanes, shapes[i].threads, index64 ? 1 : 0,
               shapes[i].pdl, shapes[i].stream);
    }
    list[count] = names[count];
    where[count++] = i;
  }
  /* The spins live in bench_kernels.cuh: a program of their own. */
  const kvjit_kernel *k[64];
  int copies = 0, spins = 0;
  const char *copy_list[64];
  int copy_where[64];
  for (int j = 0; j < count; j++) {
    if (strncmp(list[j], "bench_spin", 10) == 0) {
      spins++;
    } else {
      copy_list[copies] = list[j];
      copy_where[copies++] = where[j];
    }
  }
  if (copies > 0) {
    if (!bench_peer_kernels(ctx, "bench_transfer_kv_shapes.cu", bench_src_transfer_kv, copy_list, copies, k)) return 0;
    for (int j = 0; j < copies; j++) out[copy_where[j]].kernel = k[j];
  }
  if (spins > 0) {
    const char *spin[] = {"bench_spin", "bench_spin_fat"};
    const kvjit_kernel *sk[2];
    if (!bench_peer_kernels(ctx, "bench_kernels.cu", bench_src_kernels, spin, 2, sk)) return 0;
    for (int i = 0; i < n; i++)
      if (shapes[i].spin) out[i].kernel = sk[shapes[i].spin - 1];
  }
  for (int i = 0; i < n; i++) {
    if (out[i].kernel == NULL) continue;
    kvjit_kernel_get_attribute(out[i].kernel, KVJIT_KERNEL_NUM_REGS, KVJIT_CURRENT_DEVICE, &out[i].regs);
    kvjit_kernel_get_attribute(out[i].kernel, KVJIT_KERNEL_LOCAL_SIZE_BYTES, KVJIT_CURRENT_DEVICE,
                               &out[i].local_bytes);
  }
  return 1;
}

kvjit_status overlap_kernel_launch(const overlap_kernel *k, const kvjit_transfer_kv_args *a, CUstream stream) {
  const overlap_shape *s = k->shape;
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.block[0] = (unsigned)s->threads;
  cfg.stream = (struct CUstream_st *)stream;
  if (s->spin) {
    cfg.grid[0] = (unsigned)s->ctas;
    unsigned long long ns = k->spin_ns;
    void *args[] = {&ns};
    return kvjit_launch(k->kernel, &cfg, args);
  }
  shape_params p;
  memset(&p, 0, sizeof p);
  p.src_k = a->src_k, p.src_v = a->src_v, p.dst_k = a->dst_k, p.dst_v = a->dst_v;
  p.src_indices = a->src_indices, p.dst_indices = a->dst_indices;
  p.src_k_stride = a->src_k_stride ? a->src_k_stride : a->k_row_bytes;
  p.src_v_stride = a->src_v_stride ? a->src_v_stride : a->k_row_bytes;
  p.dst_k_stride = a->dst_k_stride ? a->dst_k_stride : a->k_row_bytes;
  p.dst_v_stride = a->dst_v_stride ? a->dst_v_stride : a->k_row_bytes;
  p.src_index_stride = a->src_index_stride ? a->src_index_stride : 1;
  p.dst_index_stride = a->dst_index_stride ? a->dst_index_stride : 1;
  p.batch = a->batch, p.src_num_slots = a->src_num_slots, p.dst_num_slots = a->dst_num_slots;
  /* The plan's grid: the units' groups, capped at the shape's CTAs (the kernel loops). */
  const int64_t units = a->batch * k->split, groups = s->threads / k->lanes;
  const int64_t need = (units + groups - 1) / groups;
  cfg.grid[0] = (unsigned)(need < s->ctas ? need : s->ctas);
  cfg.programmatic_serialization = s->pdl != 0;
  void *args[] = {&p};
  return kvjit_launch(k->kernel, &cfg, args);
}
