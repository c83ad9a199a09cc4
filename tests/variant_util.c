/* Variants by field name (variant_util.h). */
#include "variant_util.h"

#include <string.h>

int variant_field(const kvjit_op_info *op, const char *name) {
  for (size_t i = 0; op != NULL && i < op->num_fields; i++)
    if (strcmp(op->fields[i].name, name) == 0) return (int)i;
  return -1;
}

int64_t variant_value(const kvjit_variant *v, const char *name) {
  int i = variant_field(v->op, name);
  return i < 0 ? 0 : v->values[i];
}

int variant_set(kvjit_variant *v, const char *name, int64_t value) {
  int i = variant_field(v->op, name);
  if (i < 0) return 0;
  v->values[i] = value;
  return 1;
}

kvjit_status store_variant(kvjit_variant *out, int arch, int64_t k_row_bytes, int64_t v_row_bytes,
                           kvjit_index_type index, kvjit_pdl_mode pdl, int split, int vec) {
  kvjit_status st = kvjit_variant_init(out, kvjit_op_find("store_kv_cache"));
  if (st != KVJIT_OK) return st;
  variant_set(out, "arch", arch);
  variant_set(out, "k_row_bytes", k_row_bytes);
  variant_set(out, "v_row_bytes", v_row_bytes);
  variant_set(out, "index", index);
  variant_set(out, "pdl", pdl);
  variant_set(out, "split", split);
  variant_set(out, "vec", vec);
  return KVJIT_OK;
}

void store_variant_quantize(kvjit_variant *v, kvjit_dtype dtype, kvjit_dtype cache_dtype, kvjit_scale_kind scale,
                            int64_t num_heads) {
  variant_set(v, "dtype", dtype);
  variant_set(v, "cache_dtype", cache_dtype);
  variant_set(v, "scale", scale);
  variant_set(v, "num_heads", num_heads);
}
