/* A kernel launched on every step: prepare its description once (copied and keyed), then each
 * lookup is one driver call and an atomic load. The kernel wants more than 48 KiB of dynamic
 * shared memory, so its limit is raised before the launch. */
#include <kvjit.h>

static const char *block_sum_source =
    "extern \"C\" __global__ void __launch_bounds__(1024) block_sum(float *out, const float *in) {\n"
    "  extern __shared__ float tile[];\n"
    "  unsigned t = threadIdx.x;\n"
    "  tile[t] = in[blockIdx.x * blockDim.x + t];\n"
    "  for (unsigned s = blockDim.x / 2; s; s /= 2) {\n"
    "    __syncthreads();\n"
    "    if (t < s) tile[t] += tile[t + s];\n"
    "  }\n"
    "  if (t == 0) out[blockIdx.x] = tile[0];\n"
    "}\n";

kvjit_status example_block_sum_prepare(kvjit_context *ctx, kvjit_program_handle **out) {
  const char *kernels[] = {"block_sum"};
  kvjit_program_desc desc = KVJIT_PROGRAM_DESC_INIT;
  desc.name = "block_sum.cu";
  desc.source = block_sum_source;
  desc.kernels = kernels; /* copied: this array may go now */
  desc.num_kernels = 1;
  return kvjit_program_handle_create(ctx, out, &desc);
}

/* out[b] = sum of in[b * threads ...]; threads a power of two <= 1024; shared_bytes >= 4 * threads
 * (e.g. 64 KiB, past the default 48 KiB limit). */
kvjit_status example_block_sum(kvjit_program_handle *handle, float *out, const float *in, unsigned blocks,
                               unsigned threads, unsigned shared_bytes, struct CUstream_st *stream) {
  kvjit_program *program = NULL;
  kvjit_status st = kvjit_program_handle_get(handle, &program, NULL);
  kvjit_kernel *kernel = NULL;
  if (st == KVJIT_OK) st = kvjit_program_kernel(program, &kernel, NULL, 0);
  if (st == KVJIT_OK && shared_bytes > 48 * 1024) {
    st = kvjit_kernel_set_attribute(kernel, KVJIT_KERNEL_MAX_DYNAMIC_SHARED_SIZE_BYTES, KVJIT_CURRENT_DEVICE,
                                    (int)shared_bytes);
  }
  if (st != KVJIT_OK) return st;
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = blocks;
  cfg.block[0] = threads;
  cfg.shared_bytes = shared_bytes;
  cfg.stream = stream;
  cfg.num_args = 2;
  void *args[] = {&out, &in};
  return kvjit_launch(kernel, &cfg, args);
}
