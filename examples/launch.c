/* Compile a templated kernel once (cached on disk, keyed by everything that shapes it), then
 * launch it on the caller's device buffer; every failure says why and launches nothing. */
#include <stdio.h>

#include <kvjit.h>

static const char *scale_source =
    "template <int N, typename T> __global__ void scale(T *x, T factor) {\n"
    "  int i = blockIdx.x * N + threadIdx.x;\n"
    "  x[i] *= factor;\n"
    "}\n";

/* x: device pointer to blocks * 256 floats; stream: any CUDA stream (NULL: the default one). */
kvjit_status example_scale(kvjit_context *ctx, float *x, unsigned blocks, float factor,
                           struct CUstream_st *stream) {
  static const char *kernels[] = {"scale<256, float>"}; /* a name expression */
  kvjit_program_desc desc = KVJIT_PROGRAM_DESC_INIT;
  desc.name = "scale.cu";
  desc.source = scale_source;
  desc.kernels = kernels;
  desc.num_kernels = 1; /* desc.arch 0: the current GPU */
  kvjit_program *program = NULL;
  kvjit_status st = kvjit_program_get(ctx, &program, NULL, &desc);
  if (st == KVJIT_ERR_COMPILE) fputs(kvjit_program_log(program), stderr); /* the full log */
  if (st != KVJIT_OK) return st;
  kvjit_kernel *kernel = NULL;
  st = kvjit_program_kernel(program, &kernel, "scale<256,float>", 0); /* spacing is free */
  if (st != KVJIT_OK) return st;
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = blocks;
  cfg.block[0] = 256;
  cfg.stream = stream;
  cfg.num_args = 2; /* a kernel that takes another number of arguments is refused */
  void *args[] = {&x, &factor};
  return kvjit_launch(kernel, &cfg, args);
}
