/* The host cost of an eager op call against a raw cuLaunchKernelEx (bench_host_cost.h). */
#define BENCH_PROGRAM "bench_host_cost"

#include "bench_host_cost.h"

#include <stdlib.h>
#include <string.h>

const char *const host_kind_names[HOST_KINDS] = {"kvjit_call", "raw_cuLaunchKernelEx", "raw_cuCtxGetDevice_launch",
                                                 "raw_cuFunction", "raw_ctx_id_cuFunction",
                                                 "raw_stream_ctx_cuFunction", "raw_stream_id_cuFunction"};
const char *const host_mode_names[HOST_MODES] = {"cpu", "cpu_groups16", "cpu_call_sync10", "cpu_call_sync125"};

/* Rounds (one sample of each kind per round) and calls per sample of each mode; the per-call modes
 * synchronise every 10 and 125 calls (HOST_KINDS divides neither: the kinds' places after a sync
 * rotate as the rounds do). */
static const int rounds_of[HOST_MODES] = {HOST_GROUPS, 801, 3000, 3000};
static const int calls_of[HOST_MODES] = {HOST_CALLS, 16, 1, 1};
static const int sync_calls_of[HOST_MODES] = {0, 0, 10, 125};
#define MAX_ROUNDS 3000

typedef struct raw_launch {
  const gpu_driver *drv;
  CUlaunchConfig cfg;
  CUlaunchAttribute attr;
  CUfunction fn, function; /* as the node names it; its CUfunction in the current context */
  PFN_cuCtxGetId_v12000 get_id;
  PFN_cuStreamGetCtx_v9020 stream_ctx;
  PFN_cuStreamGetId_v12000 stream_id;
  void **params, **extra;
  host_call_fn call;
  void *self;
} raw_launch;

/* @p n calls of kind @p kind. @return 0 when every one succeeded. */
static int run_kind(const raw_launch *r, int kind, int n) {
  int bad = 0;
  CUdevice dev;
  CUcontext ctx;
  unsigned long long id;
  for (int i = 0; i < n; i++) {
    if (kind == HOST_KVJIT) {
      bad |= r->call(r->self) != KVJIT_OK;
      continue;
    }
    if (kind == HOST_RAW_CTX) CU(r->drv->cuCtxGetDevice(&dev));
    if (kind == HOST_RAW_CTX_ID_FUNCTION || kind == HOST_RAW_STREAM_CTX_FUNCTION) CU(r->stream_ctx(r->cfg.hStream, &ctx));
    if (kind == HOST_RAW_CTX_ID_FUNCTION) CU(r->get_id(ctx, &id));
    if (kind == HOST_RAW_STREAM_ID_FUNCTION) CU(r->stream_id(r->cfg.hStream, &id));
    const CUfunction fn = kind >= HOST_RAW_FUNCTION ? r->function : r->fn;
    CU(r->drv->cuLaunchKernelEx(&r->cfg, fn, r->params, r->extra));
  }
  return bad;
}

static host_stat summarize(double *v, int n) {
  host_stat h;
  h.s = bench_summarize(v, (size_t)n); /* sorts v */
  h.p10 = v[(n - 1) / 10];
  h.p90 = v[(n - 1) - (n - 1) / 10];
  return h;
}

/* Read the one kernel node a captured call left: its kernel, grid and argument block. */
static int read_back(const gpu_driver *drv, CUstream stream, raw_launch *r, int pdl, CUgraph *graph, int node[2]) {
  PFN_cuGraphGetNodes_v10000 get_nodes = (PFN_cuGraphGetNodes_v10000)bench_cuda_proc("cuGraphGetNodes", 10000);
  PFN_cuGraphKernelNodeGetParams_v12000 get_params =
      (PFN_cuGraphKernelNodeGetParams_v12000)bench_cuda_proc("cuGraphKernelNodeGetParams", 12000);
  PFN_cuKernelGetFunction_v12000 get_function =
      (PFN_cuKernelGetFunction_v12000)bench_cuda_proc("cuKernelGetFunction", 12000);
  r->get_id = (PFN_cuCtxGetId_v12000)bench_cuda_proc("cuCtxGetId", 12000);
  r->stream_ctx = (PFN_cuStreamGetCtx_v9020)bench_cuda_proc("cuStreamGetCtx", 9020);
  r->stream_id = (PFN_cuStreamGetId_v12000)bench_cuda_proc("cuStreamGetId", 12000);
  if (!get_nodes || !get_params || !get_function || !r->get_id || !r->stream_ctx || !r->stream_id) {
    fprintf(stderr, "host cost: cuGraphGetNodes / cuGraphKernelNodeGetParams / cuKernelGetFunction / cuCtxGetId / "
                    "cuStreamGetCtx / cuStreamGetId unavailable\n");
    return -1;
  }
  if (r->call(r->self) != KVJIT_OK) return -1;
  CU(drv->cuStreamSynchronize(stream));
  CU(drv->cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  kvjit_status st = r->call(r->self);
  CU(drv->cuStreamEndCapture(stream, graph));
  CUgraphNode nodes[8];
  size_t num_nodes = 8, kernels = 0;
  CUDA_KERNEL_NODE_PARAMS kp, found;
  memset(&found, 0, sizeof found);
  if (st == KVJIT_OK) CU(get_nodes(*graph, nodes, &num_nodes));
  for (size_t i = 0; st == KVJIT_OK && i < num_nodes && i < 8; i++)
    if (get_params(nodes[i], &kp) == CUDA_SUCCESS) {
      found = kp;
      kernels++;
    }
  if (kernels != 1) {
    fprintf(stderr, "host cost: the call captured %zu kernel nodes (expected 1)\n", kernels);
    return -1;
  }
  memset(&r->attr, 0, sizeof r->attr);
  r->attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  r->attr.value.programmaticStreamSerializationAllowed = 1;
  memset(&r->cfg, 0, sizeof r->cfg);
  r->cfg.gridDimX = found.gridDimX;
  r->cfg.gridDimY = found.gridDimY;
  r->cfg.gridDimZ = found.gridDimZ;
  r->cfg.blockDimX = found.blockDimX;
  r->cfg.blockDimY = found.blockDimY;
  r->cfg.blockDimZ = found.blockDimZ;
  r->cfg.sharedMemBytes = found.sharedMemBytes;
  r->cfg.hStream = stream;
  r->cfg.attrs = pdl ? &r->attr : NULL;
  r->cfg.numAttrs = pdl ? 1 : 0;
  /* The node names the kernel as a CUkernel when it was launched through one (as kvjit does). */
  r->fn = found.kern ? (CUfunction)found.kern : found.func;
  r->function = found.func;
  if (found.kern) CU(get_function(&r->function, found.kern));
  node[0] = found.kern != NULL;
  node[1] = found.func != NULL;
  r->params = found.kernelParams; /* owned by the graph, which lives until the end */
  r->extra = found.extra;
  return 0;
}

/* One mode: rounds of one sample per kind, the kinds' order rotating round by round. */
static int run_mode(const raw_launch *r, CUstream stream, int mode, host_cost *out, double (*t)[MAX_ROUNDS]) {
  const int rounds = rounds_of[mode], calls = calls_of[mode], sync_calls = sync_calls_of[mode];
  int since_sync = 0;
  int bad = run_kind(r, HOST_KVJIT, calls) | run_kind(r, HOST_RAW, calls); /* warm-up */
  CU(r->drv->cuStreamSynchronize(stream));
  for (int g = 0; g < rounds; g++) {
    for (int o = 0; o < HOST_KINDS; o++) {
      const int kind = (o + g) % HOST_KINDS;
      const uint64_t t0 = bench_now_ns();
      bad |= run_kind(r, kind, calls);
      t[kind][g] = (double)(bench_now_ns() - t0) / calls;
      if (calls > 1 || ++since_sync == sync_calls) {
        CU(r->drv->cuStreamSynchronize(stream));
        since_sync = 0;
      }
    }
  }
  CU(r->drv->cuStreamSynchronize(stream));
  static double diff[MAX_ROUNDS];
  for (int k = 0; k < HOST_KINDS; k++) {
    for (int g = 0; g < rounds; g++) diff[g] = t[k][g] - t[HOST_RAW][g];
    out->paired_ns[mode][k] = bench_summarize(diff, (size_t)rounds).median;
  }
  for (int k = 0; k < HOST_KINDS; k++) out->ns[mode][k] = summarize(t[k], rounds);
  out->calls[mode] = calls;
  out->samples[mode] = rounds;
  return bad;
}

int host_cost_measure(const gpu_driver *drv, CUstream stream, host_call_fn call, void *self, int pdl,
                      host_cost *out) {
  memset(out, 0, sizeof *out);
  raw_launch r;
  memset(&r, 0, sizeof r);
  r.drv = drv;
  r.call = call;
  r.self = self;
  CUgraph graph = NULL;
  int node[2] = {0, 0};
  const int found = read_back(drv, stream, &r, pdl, &graph, node);
  out->node_kernel = node[0];
  out->node_function = node[1];
  static double t[HOST_KINDS][MAX_ROUNDS];
  int bad = found != 0;
  for (int mode = 0; mode < HOST_MODES && !bad; mode++) bad |= run_mode(&r, stream, mode, out, t);
  double clk[1001];
  for (int i = 0; i < 1001; i++) {
    const uint64_t t0 = bench_now_ns();
    clk[i] = (double)(bench_now_ns() - t0);
  }
  out->clock_ns = bench_summarize(clk, 1001).median;
  if (graph) CU(drv->cuGraphDestroy(graph));
  out->done = !bad;
  return bad ? -1 : 0;
}

bench_stats host_cost_us(const host_stat *h) {
  bench_stats us = {h->s.median / 1e3, h->s.min / 1e3, h->s.max / 1e3, h->s.count};
  return us;
}

void host_cost_print(FILE *f, const char *label, const host_cost *h) {
  fprintf(f, "host cost, %s: ns per call, median [p10 p90]; / raw: median over the raw launch's median; paired: "
             "median of (kind - raw launch) in the same round; a clock read %.0f ns; the node named %s%s%s\n",
          label, h->clock_ns, h->node_kernel ? "a CUkernel" : "", h->node_kernel && h->node_function ? " and " : "",
          h->node_function ? "a CUfunction" : "");
  for (int m = 0; m < HOST_MODES; m++) {
    const host_stat *s = h->ns[m];
    const double raw = s[HOST_RAW].s.median;
    fprintf(f, "  %s (%d calls per sample, %d samples per kind)\n", host_mode_names[m], h->calls[m], h->samples[m]);
    for (int k = 0; k < HOST_KINDS; k++)
      fprintf(f, "    %-26s %6.0f [%6.0f %6.0f]  / raw %6.3f  paired %+6.0f\n", host_kind_names[k], s[k].s.median,
              s[k].p10, s[k].p90, raw > 0 ? s[k].s.median / raw : 0.0, h->paired_ns[m][k]);
  }
}

void host_cost_csv(FILE *f, const char *lead, const host_cost *h) {
  const char *node = h->node_kernel ? "CUkernel" : h->node_function ? "CUfunction" : "none";
  for (int m = 0; m < HOST_MODES; m++)
    for (int k = 0; k < HOST_KINDS; k++) {
      const host_stat *s = &h->ns[m][k];
      fprintf(f, "%s,%s,%s,%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%s\n", lead, host_mode_names[m], host_kind_names[k],
              h->calls[m], h->samples[m], s->s.median, s->p10, s->p90, s->s.min, s->s.max, h->paired_ns[m][k],
              h->clock_ns, node);
    }
}
