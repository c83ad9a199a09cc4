/* NVRTC phases of the main set's kernels as bundles: plain and quantizing apart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "compile.h"
#include "embedded.h"
#include "store_kv_plan.h"
static char names[2][64][160]; static int n[2];
int main(int argc, char **argv) {
  static const int64_t rows[] = {2048, 1024, 512, 256, 128};
  for (int r = 0; r < 5; r++) for (int idx = 1; idx <= 2; idx++) for (int q = 0; q < 2; q++) {
    if (rows[r] == 128 && q) continue;
    kvjit_store_kv_quant quant; int quantize = 0;
    kvjit_store_kv_quant_resolve(&quant, &quantize, q ? KVJIT_DTYPE_BF16 : KVJIT_DTYPE_BYTES, q ? KVJIT_DTYPE_FP8_E4M3 : KVJIT_DTYPE_BYTES, q ? KVJIT_SCALE_PER_TENSOR : KVJIT_SCALE_NONE, 0);
    for (int cls = 0; cls < 4; cls++) {
      kvjit_store_kv_plan p; memset(&p, 0, sizeof p);
      if (kvjit_store_kv_plan_make_quant(&p, 90, rows[r], rows[r], 16, (kvjit_index_type)idx, KVJIT_PDL_AUTO, 0, cls, quantize ? &quant : NULL)) continue;
      char nm[160]; kvjit_store_kv_kernel_name(&p, nm, sizeof nm);
      int dup = 0; for (int i = 0; i < n[q]; i++) dup |= !strcmp(names[q][i], nm);
      if (!dup) strcpy(names[q][n[q]++], nm);
    }
  }
  for (int q = 0; q < 2; q++) {
    const char *k[64]; for (int i = 0; i < n[q]; i++) k[i] = names[q][i];
    char timeopt[64]; snprintf(timeopt, sizeof timeopt, "--time=/tmp/e_tools/phase%d.csv", q);
    const char *opts[3] = {"-std=c++17", "-minimal", timeopt};
    kvjit_compile_input in = {0}; in.name = "kvjit_store_kv_cache.cu"; in.source = kvjit_src_store_kv_cache; in.options = opts; in.num_options = 3;
    in.kernels = k; in.kernels_given = k; in.num_kernels = n[q];
    kvjit_key_target t = {90, KVJIT_PAYLOAD_CUBIN, 0, 13, 0}; kvjit_compiled c;
    if (kvjit_nvrtc_compile(&c, &in, &t)) { printf("%s\n", kvjit_last_error()); return 1; }
    printf("%s: %d kernels, %.0f ms, %.1f ms per kernel, cubin %zu B\n", q ? "quantizing" : "plain", n[q], c.ns / 1e6, c.ns / 1e6 / n[q], c.payload_len);
    kvjit_compiled_free(&c);
    char cmd[128]; snprintf(cmd, sizeof cmd, "tail -3 /tmp/e_tools/phase%d.csv", q); system(cmd);
  }
  return 0;
}
