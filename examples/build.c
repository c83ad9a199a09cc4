/* Build without a GPU (a build machine filling a cache, or a tool inspecting code): headers from
 * an include dir, an arch-specific target, the binary and its names; nothing is loaded. */
#include <stdio.h>

#include <kvjit.h>
#include <kvjit_tools.h> /* kvjit_parse_target(), kvjit_target_name() */

static const char *wgmma_source =
    "#include \"tile_config.h\"\n" /* found in include_dir, keyed by its content */
    "#include <cuda_bf16.h>\n"     /* the toolkit's: no option needed */
    "extern \"C\" __global__ void fence(__nv_bfloat16 *out) {\n"
    "  asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\"); /* sm_90a only */\n"
    "  out[threadIdx.x] = __float2bfloat16(TILE * 1.0f);\n"
    "}\n";

kvjit_status example_build(kvjit_context *ctx, const char *include_dir) {
  int target = 0;
  kvjit_status st = kvjit_parse_target("sm_90a", &target); /* or sm_100f, compute_90, ... */
  if (st != KVJIT_OK) return st;
  char include_option[4096];
  snprintf(include_option, sizeof include_option, "-I%s", include_dir);
  const char *options[] = {"-std=c++17", include_option};
  const char *kernels[] = {"fence"};
  kvjit_program_desc desc = KVJIT_PROGRAM_DESC_INIT;
  desc.name = "fence.cu";
  desc.source = wgmma_source;
  desc.options = options;
  desc.num_options = 2;
  desc.kernels = kernels;
  desc.num_kernels = 1;
  desc.arch = target;
  kvjit_program *program = NULL;
  kvjit_origin origin;
  st = kvjit_program_build(ctx, &program, &origin, &desc);
  if (st == KVJIT_ERR_COMPILE) fputs(kvjit_program_log(program), stderr);
  if (st != KVJIT_OK) return st;
  const void *binary;
  size_t bytes;
  st = kvjit_program_binary(program, &binary, &bytes);
  if (st != KVJIT_OK) return st;
  char name[32];
  kvjit_target_name(kvjit_program_arch(program), name, sizeof name);
  printf("%s: %s, %zu bytes, key %s, kernel %s (%s)\n", name,
         origin == KVJIT_FROM_COMPILE ? "compiled" : "cached", bytes, kvjit_program_key(program),
         kvjit_program_kernel_name(program, 0), kvjit_program_lowered_name(program, 0));
  return KVJIT_OK;
}
