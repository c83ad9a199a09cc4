/* Element types: names, sizes and parsing, shared by the ops and their manifest lines. */
#include "dtype.h"

#include <string.h>

#include "status.h"

static const struct {
  kvjit_dtype dtype;
  const char *name;
  int bytes;
} dtype_table[] = {
    {KVJIT_DTYPE_BYTES, "bytes", 1}, {KVJIT_DTYPE_F16, "f16", 2},          {KVJIT_DTYPE_BF16, "bf16", 2},
    {KVJIT_DTYPE_F32, "f32", 4},     {KVJIT_DTYPE_FP8_E4M3, "fp8_e4m3", 1}, {KVJIT_DTYPE_FP8_E5M2, "fp8_e5m2", 1},
};
#define DTYPE_COUNT (sizeof dtype_table / sizeof dtype_table[0])

int kvjit_dtype_bytes(kvjit_dtype dtype) {
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (dtype_table[i].dtype == dtype) return dtype_table[i].bytes;
  }
  return 0;
}

const char *kvjit_dtype_name(kvjit_dtype dtype) {
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (dtype_table[i].dtype == dtype) return dtype_table[i].name;
  }
  return NULL;
}

kvjit_status kvjit_dtype_parse(const char *name, kvjit_dtype *out) {
  static const struct {
    const char *name;
    kvjit_dtype dtype;
  } aliases[] = {{"fp16", KVJIT_DTYPE_F16},  {"float16", KVJIT_DTYPE_F16},  {"half", KVJIT_DTYPE_F16},
                 {"bfloat16", KVJIT_DTYPE_BF16}, {"fp32", KVJIT_DTYPE_F32}, {"float32", KVJIT_DTYPE_F32},
                 {"float", KVJIT_DTYPE_F32}, {"e4m3", KVJIT_DTYPE_FP8_E4M3}, {"e5m2", KVJIT_DTYPE_FP8_E5M2},
                 {"float8_e4m3fn", KVJIT_DTYPE_FP8_E4M3}, {"float8_e5m2", KVJIT_DTYPE_FP8_E5M2}};
  if (name == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: NULL", name ? "out" : "name");
  for (size_t i = 0; i < DTYPE_COUNT; i++) {
    if (strcmp(name, dtype_table[i].name) == 0) {
      *out = dtype_table[i].dtype;
      return KVJIT_OK;
    }
  }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
    if (strcmp(name, aliases[i].name) == 0) {
      *out = aliases[i].dtype;
      return KVJIT_OK;
    }
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "dtype \"%s\": expected f16, bf16, f32, fp8_e4m3, fp8_e5m2 or bytes",
                    name);
}
