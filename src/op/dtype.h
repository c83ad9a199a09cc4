/* Element types (kvjit_dtype): names, sizes, parsing. */
#ifndef KVJIT_DTYPE_H
#define KVJIT_DTYPE_H

#include "kvjit_tools.h"

/** Bytes of one element of @p dtype (1 for BYTES and the fp8 types), 0 for an unknown value. */
int kvjit_dtype_bytes(kvjit_dtype dtype);
/** "f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2", "bytes"; NULL for an unknown value. */
const char *kvjit_dtype_name(kvjit_dtype dtype);
/** Parse a name of kvjit_dtype_name() (also "fp16", "float16", "bfloat16", "fp32", "float32"). */
int kvjit_dtype_parse(const char *name, kvjit_dtype *out);

#endif
