/*
 * bench_host_layouts: transfer_kv between a flat device cache (SGLang's MHA pool, [size, H, D] per
 * layer) and SGLang's paged host layouts page_first_direct ([pages, L, page, H, D]) and page_head
 * ([pages, H, page, L, D]) in both directions (issue 29), against the link's bound and against
 * what SGLang's "direct" backend does for them: per-page copies (page_first_direct: one
 * cuMemcpyAsync of a page's rows per layer and K/V; --layouts layer_first ([L, size, H, D]), the
 * reference beside them, the same; page_head, where a head's D bytes of a page's
 * slots are strided on both sides: one cuMemcpy2DAsync per layer, page, head and K/V). Items are
 * whole pages, page-aligned on both sides, as SGLang moves them; kvjit
 * makes one launch per layer (--layers 1) or one for every layer (--layers N: pointer tables).
 * Sampled rows are checked after each kvjit cell. Public API and test helpers only.
 *
 * The bound is the link's: one 256 MiB pinned cuMemcpyAsync each way; beside it, the same copy of
 * the cell's own bytes (what the copy engine does with a call of that size, its start included).
 * --max-ctas, --split and --pdl pass the call's arguments of those names (the plan's shape).
 *
 *   usage: bench_host_layouts [--layouts page_first_direct,page_head,layer_first] [--dirs d2h,h2d]
 *          [--head-bytes LIST] [--heads N] [--page N] [--batches LIST] [--layers N] [--reps N]
 *          [--max-ctas N] [--split N] [--pdl auto|on|off] [--cold-start] [--csv FILE] [--md FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_PROGRAM "bench_host_layouts"
#include "bench_util.h"
#include "gpu_util.h"
#include "host_layouts.h"

#define MAX_LIST 8
#define MAX_REPS 15
#define MAX_LAYERS 16

static const gpu_env *env;
typedef CUresult (*memcpy2d_async_fn)(const CUDA_MEMCPY2D *copy, CUstream stream);
static memcpy2d_async_fn memcpy2d_async;

typedef struct options {
  int kinds[3], dirs[2]; /* [page_first_direct, page_head, layer_first], [d2h, h2d] */
  int64_t head_bytes[MAX_LIST], batches[MAX_LIST];
  size_t nhead_bytes, nbatches;
  int64_t heads, page;
  int layers, reps;
  int max_ctas, split; /* the call's arguments */
  int cold;            /* --cold-start: rounds start on an idle stream (the host's launch latency counted, as before) */
  kvjit_pdl_mode pdl;
  const char *csv, *md;
} options;
static options opt;

/* One cell's buffers: device K/V per layer (flat rows), the host K/V tensors, ids, tables. */
typedef struct cell {
  kvjit_host_layout host;
  int d2h, layers;
  int64_t row, batch, slots;
  CUdeviceptr dev[2][MAX_LAYERS];
  void *host_buf[2];
  CUdeviceptr ids_dev, ids_host, tables[4];
  int64_t *pages_dev, *pages_host; /* the batch's pages on each side (host copies) */
  kvjit_layout view;
} cell;

static CUdeviceptr hp(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

static void cell_make(cell *c, uint64_t *rng) {
  const size_t dev_bytes = (size_t)(c->slots * c->row), host_bytes = (size_t)kvjit_host_layout_bytes(&c->host);
  for (int t = 0; t < 2; t++) {
    for (int l = 0; l < c->layers; l++) {
      CU(env->drv->cuMemAlloc(&c->dev[t][l], dev_bytes));
      CU(env->drv->cuMemsetD8(c->dev[t][l], (unsigned char)(l * 2 + t + 1), dev_bytes));
    }
    CU(env->drv->cuMemHostAlloc(&c->host_buf[t], host_bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    gpu_fill_random(c->host_buf[t], host_bytes, rng);
  }
  /* Distinct random pages on each side, their slots in order (SGLang moves whole pages). */
  const int64_t pages = c->batch / c->host.page_size, total = c->slots / c->host.page_size;
  int64_t *ids[2], *perm = malloc((size_t)total * sizeof *perm);
  c->pages_dev = malloc((size_t)pages * sizeof *c->pages_dev);
  c->pages_host = malloc((size_t)pages * sizeof *c->pages_host);
  int64_t *page_lists[2] = {c->pages_dev, c->pages_host};
  for (int side = 0; side < 2; side++) {
    for (int64_t i = 0; i < total; i++) perm[i] = i;
    for (int64_t i = 0; i < pages; i++) {
      const int64_t j = i + (int64_t)(gpu_rand(rng) % (uint64_t)(total - i)), x = perm[i];
      perm[i] = perm[j];
      perm[j] = x;
      page_lists[side][i] = perm[i];
    }
    ids[side] = malloc((size_t)c->batch * sizeof *ids[side]);
    for (int64_t i = 0; i < c->batch; i++)
      ids[side][i] = page_lists[side][i / c->host.page_size] * c->host.page_size + i % c->host.page_size;
  }
  CU(env->drv->cuMemAlloc(&c->ids_dev, (size_t)c->batch * 8));
  CU(env->drv->cuMemAlloc(&c->ids_host, (size_t)c->batch * 8));
  CU(env->drv->cuMemcpyHtoD(c->ids_dev, ids[0], (size_t)c->batch * 8));
  CU(env->drv->cuMemcpyHtoD(c->ids_host, ids[1], (size_t)c->batch * 8));
  for (int side = 0; side < 2; side++) free(ids[side]);
  free(perm);
  /* Layer tables: [src_k, src_v, dst_k, dst_v], each layer's base (the host's: its slot 0). */
  for (int i = 0; i < 4; i++) {
    const int t = i % 2, host_side = (i >= 2) == c->d2h;
    uint64_t ptrs[MAX_LAYERS];
    for (int l = 0; l < c->layers; l++)
      ptrs[l] = host_side ? hp(c->host_buf[t]) + (uint64_t)kvjit_host_layout_offset(&c->host, l, 0, 0) : c->dev[t][l];
    CU(env->drv->cuMemAlloc(&c->tables[i], (size_t)c->layers * 8));
    CU(env->drv->cuMemcpyHtoD(c->tables[i], ptrs, (size_t)c->layers * 8));
  }
  kvjit_host_layout_view(&c->host, &c->view);
}

static void cell_free(cell *c) {
  for (int t = 0; t < 2; t++) {
    for (int l = 0; l < c->layers; l++) env->drv->cuMemFree(c->dev[t][l]);
    env->drv->cuMemFreeHost(c->host_buf[t]);
  }
  for (int i = 0; i < 4; i++) env->drv->cuMemFree(c->tables[i]);
  env->drv->cuMemFree(c->ids_dev);
  env->drv->cuMemFree(c->ids_host);
  free(c->pages_dev);
  free(c->pages_host);
}

/* kvjit: every layer in one launch through the tables, or (one layer) layer 0's caches. */
static kvjit_status launch_kvjit(kvjit_context *ctx, const cell *c, CUstream stream) {
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  const int tables = c->layers > 1;
  void *ptr[4];
  for (int i = 0; i < 4; i++) {
    const int t = i % 2, host_side = (i >= 2) == c->d2h;
    ptr[i] = tables ? (void *)(uintptr_t)c->tables[i]
                    : (void *)(uintptr_t)(host_side ? hp(c->host_buf[t]) : c->dev[t][0]);
  }
  a.src_k = ptr[0], a.src_v = ptr[1], a.dst_k = ptr[2], a.dst_v = ptr[3];
  a.num_layers = tables ? c->layers : 0;
  a.src_indices = (const void *)(uintptr_t)(c->d2h ? c->ids_dev : c->ids_host);
  a.dst_indices = (const void *)(uintptr_t)(c->d2h ? c->ids_host : c->ids_dev);
  a.batch = c->batch;
  a.k_row_bytes = a.v_row_bytes = c->row;
  a.src_num_slots = a.dst_num_slots = c->slots;
  a.src = c->d2h ? KVJIT_LOCATION_DEVICE : KVJIT_LOCATION_HOST;
  a.dst = c->d2h ? KVJIT_LOCATION_HOST : KVJIT_LOCATION_DEVICE;
  if (c->d2h) a.dst_k_layout = a.dst_v_layout = &c->view;
  else a.src_k_layout = a.src_v_layout = &c->view;
  a.stream = (struct CUstream_st *)stream;
  a.max_ctas = opt.max_ctas;
  a.split = opt.split;
  a.pdl = opt.pdl;
  return kvjit_transfer_kv(ctx, &a);
}

/* SGLang's "direct" backend: per page (and, page_head, per head) copies of every layer, K and V. */
static void launch_per_page(const cell *c, CUstream stream) {
  const int64_t P = c->host.page_size, H = c->host.heads, D = c->host.head_bytes, pages = c->batch / P;
  for (int l = 0; l < c->layers; l++)
    for (int t = 0; t < 2; t++)
      for (int64_t i = 0; i < pages; i++) {
        const CUdeviceptr dev = c->dev[t][l] + (CUdeviceptr)(c->pages_dev[i] * P * c->row);
        if (c->host.kind != KVJIT_HOST_PAGE_HEAD) { /* a page's rows are contiguous on the host */
          const CUdeviceptr host =
              hp(c->host_buf[t]) + (CUdeviceptr)kvjit_host_layout_offset(&c->host, l, c->pages_host[i] * P, 0);
          CU(env->drv->cuMemcpyAsync(c->d2h ? host : dev, c->d2h ? dev : host, (size_t)(P * c->row), stream));
          continue;
        }
        for (int64_t h = 0; h < H; h++) {
          const CUdeviceptr host =
              hp(c->host_buf[t]) + (CUdeviceptr)kvjit_host_layout_offset(&c->host, l, c->pages_host[i] * P, h * D);
          CUDA_MEMCPY2D m;
          memset(&m, 0, sizeof m);
          m.srcMemoryType = m.dstMemoryType = CU_MEMORYTYPE_DEVICE; /* unified addressing */
          m.srcDevice = c->d2h ? dev + (CUdeviceptr)(h * D) : host;
          m.srcPitch = (size_t)(c->d2h ? c->row : c->host.layers * D);
          m.dstDevice = c->d2h ? host : dev + (CUdeviceptr)(h * D);
          m.dstPitch = (size_t)(c->d2h ? c->host.layers * D : c->row);
          m.WidthInBytes = (size_t)D;
          m.Height = (size_t)P;
          CU(memcpy2d_async(&m, stream));
        }
      }
}

/* Sampled rows of every layer: the destination's bytes against the source's, through the shapes. */
static int check_cell(const cell *c) {
  unsigned char *dev_row = malloc((size_t)c->row);
  int ok = 1;
  const int64_t step = c->batch / 61 + 1;
  for (int64_t i = 0; i < c->batch && ok; i += step)
    for (int l = 0; l < c->layers && ok; l++)
      for (int t = 0; t < 2 && ok; t++) {
        const int64_t P = c->host.page_size;
        const int64_t dslot = c->pages_dev[i / P] * P + i % P, hslot = c->pages_host[i / P] * P + i % P;
        CU(env->drv->cuMemcpyDtoH(dev_row, c->dev[t][l] + (CUdeviceptr)(dslot * c->row), (size_t)c->row));
        const unsigned char *host = c->host_buf[t];
        for (int64_t b = 0; b < c->row && ok; b++)
          ok = dev_row[b] == host[kvjit_host_layout_offset(&c->host, l, hslot, b)];
      }
  free(dev_row);
  return ok;
}

/* Median microseconds per call of @p reps rounds of @p n calls, each round behind one call more
 * (kvjit's), so that the stream is busy while the host enqueues them: the host's launch latency is
 * not the copy's time. */
static double time_calls(kvjit_context *ctx, const cell *c, CUstream stream, CUevent *ev, int per_page, int n,
                         int reps) {
  double us[MAX_REPS];
  for (int r = 0; r < reps; r++) {
    if (!opt.cold && launch_kvjit(ctx, c, stream) != KVJIT_OK) return -1;
    CU(env->drv->cuEventRecord(ev[0], stream));
    for (int j = 0; j < n; j++) {
      if (per_page) launch_per_page(c, stream);
      else if (launch_kvjit(ctx, c, stream) != KVJIT_OK) return -1;
    }
    CU(env->drv->cuEventRecord(ev[1], stream));
    CU(env->drv->cuEventSynchronize(ev[1]));
    float ms;
    CU(env->drv->cuEventElapsedTime(&ms, ev[0], ev[1]));
    us[r] = (double)ms * 1000.0 / n;
  }
  return bench_summarize(us, (size_t)reps).median;
}

/* One pinned copy of @p bytes each way, GB/s: of 256 MiB, the link's bound. */
static void link_bounds(CUstream stream, CUevent *ev, size_t bytes, double gbps[2]) {
  CUdeviceptr d;
  void *h;
  CU(env->drv->cuMemAlloc(&d, bytes));
  CU(env->drv->cuMemHostAlloc(&h, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  for (int dir = 0; dir < 2; dir++) { /* [d2h, h2d] */
    double us[5];
    for (int r = 0; r < 5; r++) {
      CU(env->drv->cuEventRecord(ev[0], stream));
      CU(env->drv->cuMemcpyAsync(dir ? d : hp(h), dir ? hp(h) : d, bytes, stream));
      CU(env->drv->cuEventRecord(ev[1], stream));
      CU(env->drv->cuEventSynchronize(ev[1]));
      float ms;
      CU(env->drv->cuEventElapsedTime(&ms, ev[0], ev[1]));
      us[r] = (double)ms * 1000.0;
    }
    gbps[dir] = (double)bytes / bench_summarize(us, 5).median * 1e-3;
  }
  env->drv->cuMemFreeHost(h);
  env->drv->cuMemFree(d);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_host_layouts [--layouts page_first_direct,page_head,layer_first] [--dirs d2h,h2d] "
                  "[--head-bytes LIST] [--heads N] [--page N] [--batches LIST] [--layers N] [--reps N] [--max-ctas N] "
                  "[--split N] [--pdl auto|on|off] [--cold-start] [--csv FILE] [--md FILE]\n");
  exit(2);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  options o = {.kinds = {1, 1}, .dirs = {1, 1}, .head_bytes = {256, 512}, .nhead_bytes = 2,
               .batches = {1024, 4096, 16384}, .nbatches = 3, .heads = 8, .page = 64, .layers = 1, .reps = 7};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--cold-start") == 0) {
      o.cold = 1;
      continue;
    }
    if (v == NULL) usage();
    i++;
    if (strcmp(a, "--layouts") == 0) {
      o.kinds[0] = strstr(v, "page_first_direct") != NULL;
      o.kinds[1] = strstr(v, "page_head") != NULL;
      o.kinds[2] = strstr(v, "layer_first") != NULL;
    } else if (strcmp(a, "--dirs") == 0) {
      o.dirs[0] = strstr(v, "d2h") != NULL;
      o.dirs[1] = strstr(v, "h2d") != NULL;
    } else if (strcmp(a, "--head-bytes") == 0) {
      if ((o.nhead_bytes = bench_parse_list(v, o.head_bytes, MAX_LIST)) == 0) usage();
    } else if (strcmp(a, "--batches") == 0) {
      if ((o.nbatches = bench_parse_list(v, o.batches, MAX_LIST)) == 0) usage();
    } else if (strcmp(a, "--heads") == 0 && atoi(v) >= 1 && atoi(v) <= 128) {
      o.heads = atoi(v);
    } else if (strcmp(a, "--page") == 0 && atoi(v) >= 2 && atoi(v) <= 4096) {
      o.page = atoi(v);
    } else if (strcmp(a, "--layers") == 0 && atoi(v) >= 1 && atoi(v) <= MAX_LAYERS) {
      o.layers = atoi(v);
    } else if (strcmp(a, "--reps") == 0 && atoi(v) >= 2 && atoi(v) <= MAX_REPS) {
      o.reps = atoi(v);
    } else if (strcmp(a, "--max-ctas") == 0 && atoi(v) >= -1 && atoi(v) <= 4096) {
      o.max_ctas = atoi(v);
    } else if (strcmp(a, "--split") == 0 && atoi(v) >= 0 && atoi(v) <= 4096) {
      o.split = atoi(v);
    } else if (strcmp(a, "--pdl") == 0 && (!strcmp(v, "auto") || !strcmp(v, "on") || !strcmp(v, "off"))) {
      o.pdl = !strcmp(v, "on") ? KVJIT_PDL_ON : !strcmp(v, "off") ? KVJIT_PDL_OFF : KVJIT_PDL_AUTO;
    } else if (strcmp(a, "--csv") == 0) {
      o.csv = v;
    } else if (strcmp(a, "--md") == 0) {
      o.md = v;
    } else {
      usage();
    }
  }
  opt = o;
  gpu_env e;
  int rc = gpu_setup(&e);
  if (rc != 0) return rc;
  env = &e;
  memcpy2d_async = (memcpy2d_async_fn)bench_cuda_proc("cuMemcpy2DAsync", 3020);
  kvjit_context *ctx = NULL;
  char dir[64];
  if (gpu_context_create(&ctx, dir, sizeof dir, "host_layouts", NULL) != 0) return 1;
  CUstream stream;
  CUevent ev[2];
  CU(env->drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 2; i++) CU(env->drv->cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
  double bound[2];
  link_bounds(stream, ev, (size_t)256 << 20, bound);
  printf("bench_host_layouts: %s, sm_%d; pinned link DtoH %.1f GB/s, HtoD %.1f GB/s; %d layer(s) per call; max_ctas %d "
         "split %d pdl %d\n",
         env->name, env->sm, bound[0], bound[1], o.layers, o.max_ctas, o.split, (int)o.pdl);
  FILE *csv = o.csv ? fopen(o.csv, "w") : NULL, *md = o.md ? fopen(o.md, "w") : NULL;
  if (csv)
    fprintf(csv, "layout,direction,row_bytes,batch,layers,kvjit_us,kvjit_gbps,pct_of_link,per_page_us,check,"
                 "same_size_memcpy_gbps\n");
  if (md)
    fprintf(md, "# bench_host_layouts: SGLang's host layouts through transfer_kv (%s, sm_%d, kvjit %s)\n\nDevice: flat "
                "[size, H, D] per layer; host: the layout, pages of %lld slots, %lld heads, %d layer(s) per call; whole "
                "pages, random on both sides. Link (one 256 MiB pinned copy): DtoH %.1f, HtoD %.1f GB/s.\n\n| layout | "
                "dir | row B | batch | kvjit µs | GB/s | %% of link | per-page copies µs | kvjit speedup | check |\n| --- "
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
            env->name, env->sm, kvjit_version_string(), (long long)o.page, (long long)o.heads, o.layers, bound[0],
            bound[1]);
  uint64_t rng = 0x1234567;
  int failures = 0;
  double worst_pct = 1e9, worst_speedup = 1e9;
  static const kvjit_host_layout_kind kinds[3] = {KVJIT_HOST_PAGE_FIRST_DIRECT, KVJIT_HOST_PAGE_HEAD,
                                                  KVJIT_HOST_LAYER_FIRST};
  for (int k = 0; k < 3; k++)
    for (int d = 0; d < 2; d++)
      for (size_t r = 0; r < o.nhead_bytes; r++)
        for (size_t b = 0; b < o.nbatches; b++) {
          if (!o.kinds[k] || !o.dirs[d]) continue;
          cell c;
          memset(&c, 0, sizeof c);
          c.d2h = d == 0;
          c.layers = o.layers;
          c.batch = o.batches[b] / o.page * o.page;
          c.row = o.heads * o.head_bytes[r];
          c.slots = 2 * c.batch;
          const kvjit_host_layout h = {kinds[k], o.heads, o.head_bytes[r], o.page, o.layers, c.slots};
          c.host = h;
          if (c.batch <= 0) continue;
          cell_make(&c, &rng);
          const double kv = time_calls(ctx, &c, stream, ev, 0, 4, o.reps);
          const int ok = kv > 0 && check_cell(&c);
          failures += !ok;
          const double pp = h.kind == KVJIT_HOST_PAGE_HEAD && !memcpy2d_async ? 0 : time_calls(ctx, &c, stream, ev, 1, 1, o.reps > 3 ? 3 : o.reps);
          const double bytes = 2.0 * (double)c.batch * (double)c.row * c.layers;
          const double gbps = kv > 0 ? bytes / kv * 1e-3 : 0, pct = 100.0 * gbps / bound[d];
          double same[2];
          link_bounds(stream, ev, (size_t)bytes, same);
          if (c.row >= 2048 && c.batch >= 1024 && pct < worst_pct) worst_pct = pct;
          if (pp > 0 && kv > 0 && pp / kv < worst_speedup) worst_speedup = pp / kv;
          const char *name = kvjit_host_layout_name(h.kind), *dname = c.d2h ? "d2h" : "h2d";
          printf("%-17s %s row %5lld batch %6lld: kvjit %9.2f us %6.1f GB/s (%5.1f %% of link; a memcpy of the same "
                 "bytes %5.1f GB/s) | per-page %10.2f us %s\n",
                 name, dname, (long long)c.row, (long long)c.batch, kv, gbps, pct, same[d], pp,
                 ok ? "" : "CHECK FAILED");
          if (csv)
            fprintf(csv, "%s,%s,%lld,%lld,%d,%.3f,%.2f,%.1f,%.3f,%s,%.2f\n", name, dname, (long long)c.row,
                    (long long)c.batch, c.layers, kv, gbps, pct, pp, ok ? "ok" : "FAIL", same[d]);
          if (md)
            fprintf(md, "| %s | %s | %lld | %lld | %.2f | %.1f | %.1f | %.2f | %.1fx | %s |\n", name, dname,
                    (long long)c.row, (long long)c.batch, kv, gbps, pct, pp, pp > 0 && kv > 0 ? pp / kv : 0,
                    ok ? "ok" : "FAIL");
          cell_free(&c);
        }
  if (md) {
    if (worst_pct < 1e9)
      fprintf(md, "\n- rows >= 2 KiB, batches >= 1024: worst cell at %.1f %% of the measured link (target >= 90 %%): "
                  "%s\n",
              worst_pct, worst_pct >= 90.0 ? "met" : "NOT met");
    if (worst_speedup < 1e9)
      fprintf(md, "- slowest cell against per-page copies: kvjit %.1fx faster (target: faster in every cell): %s\n",
              worst_speedup, worst_speedup > 1.0 ? "met" : "NOT met");
    fprintf(md, "- check failures: %d\n", failures);
    fclose(md);
  }
  if (csv) fclose(csv);
  for (int i = 0; i < 2; i++) CU(env->drv->cuEventDestroy(ev[i]));
  CU(env->drv->cuStreamDestroy(stream));
  gpu_context_destroy(ctx, dir);
  gpu_teardown(&e);
  return failures ? 1 : 0;
}
