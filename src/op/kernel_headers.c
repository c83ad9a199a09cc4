/* The kernel headers the ops share (kernel_headers.h), embedded by kernel_src/meson.build. */
#include "kernel_headers.h"

extern const char kvjit_src_header_fp8[];

const kvjit_header kvjit_kernel_headers[] = {
    {"kvjit_fp8.cuh", kvjit_src_header_fp8},
};
const size_t kvjit_num_kernel_headers = sizeof kvjit_kernel_headers / sizeof kvjit_kernel_headers[0];
