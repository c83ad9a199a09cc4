/*
 * Kernels (launch.c): launches, attributes and parameters for kvjit.h; here, what the op layer
 * reads of a loaded program besides its kernels.
 */
#ifndef KVJIT_LAUNCH_H
#define KVJIT_LAUNCH_H

#include <stddef.h>

#include "driver.h"
#include "kvjit_tools.h"

/** Device address of a __device__ variable of a loaded program, in the current CUDA context. */
kvjit_status kvjit_program_global(const kvjit_program *program, CUdeviceptr *ptr, size_t *bytes, const char *name);

#endif
