/* Tests' and benchmarks' helpers over the library's internals (internal_util.h). */
#include "internal_util.h"

#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "op.h"
#include "store_kv_op.h"

void kvjit_key_content(kvjit_key *out, const kvjit_program_desc *desc) {
  kvjit_key_builder b;
  kvjit_key_content_begin(&b, "kvjit-content");
  kvjit_key_content_program(&b, desc->name, desc->source, desc->num_options, desc->options, desc->num_headers,
                            desc->headers);
  kvjit_key_content_end(&b, out);
}

void kvjit_key_compute(kvjit_key *out, const kvjit_program_desc *desc, const kvjit_key_target *target) {
  kvjit_key content;
  kvjit_key_content(&content, desc);
  kvjit_key_builder b;
  kvjit_key_begin(&b, target, desc->num_kernels);
  for (size_t i = 0; i < desc->num_kernels; i++) {
    /* The loader keys canonical name expressions (names.h); so does this. */
    char small[256];
    size_t len = strlen(desc->kernels[i]);
    char *name = len < sizeof small ? small : malloc(len + 1);
    if (name == NULL) {
      kvjit_key_add_kernel(&b, desc->kernels[i], len);
      continue;
    }
    kvjit_key_add_kernel(&b, name, kvjit_name_canonical(desc->kernels[i], name));
    if (name != small) free(name);
  }
  kvjit_key_finish(&b, &content, out);
}

kvjit_status kvjit_store_kv_plan_make_quant(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes,
                                            int64_t v_row_bytes, int vec, kvjit_index_type index_type,
                                            kvjit_pdl_mode pdl, int split, int batch_class,
                                            const kvjit_store_kv_quant *quant) {
  return kvjit_store_kv_plan_make_layout(out, arch, k_row_bytes, v_row_bytes, vec, 0, index_type, pdl, split,
                                         batch_class, quant, NULL, NULL);
}

kvjit_status kvjit_store_kv_plan_make(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes, int64_t v_row_bytes,
                                      int vec, kvjit_index_type index_type, kvjit_pdl_mode pdl, int split,
                                      int batch_class) {
  return kvjit_store_kv_plan_make_quant(out, arch, k_row_bytes, v_row_bytes, vec, index_type, pdl, split, batch_class,
                                        NULL);
}

uint64_t kvjit_store_kv_blocks(const kvjit_store_kv_plan *plan, int64_t batch) {
  kvjit_op_geometry geo;
  kvjit_op_store_kv.geometry(plan, &geo);
  return kvjit_op_blocks(&geo, batch);
}
