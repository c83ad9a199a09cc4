/*
 * What tests and benchmarks build from the library's internals and the library itself does not
 * need: a description's key without a request, a store plan of flat caches, a store plan's grid. Each is
 * made of the library's own pieces (key.h, the store's plan, the op layer's grid), so a test of
 * it tests them.
 */
#ifndef KVJIT_TESTS_INTERNAL_UTIL_H
#define KVJIT_TESTS_INTERNAL_UTIL_H

#include <stdint.h>

#include "key.h"
#include "kvjit.h"
#include "store_kv_plan.h"

/**
 * Digest of the program's content: options in order, source, headers, program name. For a
 * description whose source includes nothing and whose options name no include dir this is the
 * digest the loader keys it by; the loader's own adds the resolved headers (includes.h).
 */
void kvjit_key_content(kvjit_key *out, const kvjit_program_desc *desc);

/**
 * Key of @p desc built for @p target (content digest, then derivation over the canonical kernel
 * names). desc->arch is ignored. The loader's key for descriptions that include nothing.
 */
void kvjit_key_compute(kvjit_key *out, const kvjit_program_desc *desc, const kvjit_key_target *target);

/** kvjit_store_kv_plan_make_layout() of flat caches (quantizing when @p quant is not NULL). */
kvjit_status kvjit_store_kv_plan_make_quant(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes,
                                            int64_t v_row_bytes, int vec, kvjit_index_type index_type,
                                            kvjit_pdl_mode pdl, int split, int batch_class,
                                            const kvjit_store_kv_quant *quant);

/** kvjit_store_kv_plan_make_quant() of a plain copy (no quantizing). */
kvjit_status kvjit_store_kv_plan_make(kvjit_store_kv_plan *out, int arch, int64_t k_row_bytes, int64_t v_row_bytes,
                                      int vec, kvjit_index_type index_type, kvjit_pdl_mode pdl, int split,
                                      int batch_class);

/** Blocks of a launch of @p batch items of @p plan (the op layer's kvjit_op_blocks()), 0 past 2^31 - 1. */
uint64_t kvjit_store_kv_blocks(const kvjit_store_kv_plan *plan, int64_t batch);

#endif
