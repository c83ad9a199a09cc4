/* CPU ms of each main-set kernel compiled alone (minus a trivial kernel's), with its plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "compile.h"
#include "embedded.h"
#include "store_kv_plan.h"
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec * 1e-6; }
static double one(const char *k) {
  const char *opts[2] = {"-std=c++17", "-minimal"}; const char *ks[1] = {k};
  kvjit_compile_input in = {0}; in.name = "kvjit_store_kv_cache.cu"; in.source = kvjit_src_store_kv_cache; in.options = opts; in.num_options = 2;
  in.kernels = ks; in.kernels_given = ks; in.num_kernels = 1;
  kvjit_key_target t = {90, KVJIT_PAYLOAD_CUBIN, 0, 13, 0}; kvjit_compiled c;
  double c0 = cpu(); kvjit_nvrtc_compile(&c, &in, &t); double ms = cpu() - c0; kvjit_compiled_free(&c); return ms;
}
int main(void) {
  static const int64_t rows[] = {2048, 1024, 512, 256, 128};
  char seen[64][160]; int n = 0;
  one("kvjit_store_kv<128,128,1,16,8,128,1,1,0,0,0,0,0,0,1,0,0>");
  for (int r = 0; r < 5; r++) for (int idx = 1; idx <= 2; idx++) for (int q = 0; q < 2; q++) {
    if (rows[r] == 128 && q) continue;
    kvjit_store_kv_quant quant; int quantize = 0;
    kvjit_store_kv_quant_resolve(&quant, &quantize, q ? KVJIT_DTYPE_BF16 : KVJIT_DTYPE_BYTES, q ? KVJIT_DTYPE_FP8_E4M3 : KVJIT_DTYPE_BYTES, q ? KVJIT_SCALE_PER_TENSOR : KVJIT_SCALE_NONE, 0);
    for (int cls = 0; cls < 4; cls++) {
      kvjit_store_kv_plan p; memset(&p, 0, sizeof p);
      if (kvjit_store_kv_plan_make_quant(&p, 90, rows[r], rows[r], 16, (kvjit_index_type)idx, KVJIT_PDL_AUTO, 0, cls, quantize ? &quant : NULL)) continue;
      char nm[160]; kvjit_store_kv_kernel_name(&p, nm, sizeof nm);
      int dup = 0; for (int i = 0; i < n; i++) dup |= !strcmp(seen[i], nm);
      if (dup) continue;
      strcpy(seen[n++], nm);
      int64_t widest = p.k_row_bytes; int64_t chunks = widest / p.split / p.vec; int per_lane = (int)((chunks + p.lanes - 1) / p.lanes);
      printf("%6.1f ms  quant %d row %5lld split %2d vec %2d lanes %2d items %d per_lane %d  %s\n", one(nm), q, (long long)widest, p.split, p.vec, p.lanes, p.items, per_lane, nm);
    }
  }
  return 0;
}
