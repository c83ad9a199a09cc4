#include "bench_util.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

bench_stats bench_summarize(double *values, size_t count) {
  bench_stats s = {0, 0, 0, count};
  if (count == 0) return s;
  qsort(values, count, sizeof *values, compare_doubles);
  s.min = values[0];
  s.max = values[count - 1];
  s.median = count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
  return s;
}

int bench_ref_split(int64_t row_bytes) {
  if (row_bytes % 2048 == 0) return 4;
  if (row_bytes % 1024 == 0) return 2;
  return 1;
}

void bench_ref_kernel_name(char *out, size_t capacity, int64_t row_bytes, int split, int pdl, int index64) {
  snprintf(out, capacity, "ref_store_kvcache<%lld, %d, %s, %s>", (long long)row_bytes, split, pdl ? "true" : "false",
           index64 ? "long long" : "int");
}

void *bench_cuda_proc(const char *symbol, int abi_version) {
  /* RTLD_NOLOAD first: reuse the copy kvjit_driver_get() loaded; fall back to loading it. */
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return NULL;
  PFN_cuGetProcAddress_v12000 get_proc = NULL;
  void *sym = dlsym(lib, "cuGetProcAddress_v2");
  memcpy(&get_proc, &sym, sizeof get_proc);
  if (!get_proc) return NULL;
  void *fn = NULL;
  CUdriverProcAddressQueryResult found;
  if (get_proc(symbol, &fn, abi_version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS ||
      found != CU_GET_PROC_ADDRESS_SUCCESS)
    return NULL;
  return fn;
}

void bench_die_cuda(const char *program, int result, const char *what, int line) {
  const char *name = "?";
  PFN_cuGetErrorName_v6000 get_name = (PFN_cuGetErrorName_v6000)bench_cuda_proc("cuGetErrorName", 6000);
  if (get_name) get_name((CUresult)result, &name);
  fprintf(stderr, "%s: line %d: %s: %s\n", program, line, what, name);
  exit(2);
}

size_t bench_parse_list(const char *text, int64_t *out, size_t capacity) {
  size_t n = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v <= 0 || n == capacity) return 0;
    out[n++] = v;
    if (*end == ',') end++;
    else if (*end) return 0;
    p = end;
  }
  return n;
}
