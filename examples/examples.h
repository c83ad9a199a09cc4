/* The examples' entry points (the .c files of examples/), for the tests that build and run them. */
#ifndef KVJIT_EXAMPLES_H
#define KVJIT_EXAMPLES_H

#include <stdint.h>

#include <kvjit.h>

kvjit_status example_scale(kvjit_context *ctx, float *x, unsigned blocks, float factor,
                           struct CUstream_st *stream);
kvjit_status example_build(kvjit_context *ctx, const char *include_dir);
kvjit_status example_block_sum_prepare(kvjit_context *ctx, kvjit_program_handle **out);
kvjit_status example_block_sum(kvjit_program_handle *handle, float *out, const float *in, unsigned blocks,
                               unsigned threads, unsigned shared_bytes, struct CUstream_st *stream);
kvjit_status example_store_flash(kvjit_context *ctx, void *cache, const void *k, const void *v,
                                 const int64_t *slots, int64_t batch, int64_t num_blocks,
                                 struct CUstream_st *stream);

#endif
