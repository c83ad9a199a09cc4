/*
 * libFuzzer harness over store_kv_cache argument validation, with no GPU and the disk cache off:
 * every field of kvjit_store_kv_args comes from the input, the quantizing ones of version 2 too
 * (pointers included: they are device
 * addresses and must never be dereferenced on the host, so AddressSanitizer would catch a read).
 * Without a driver both calls must fail with a known status and a message, except a valid
 * batch-0 store, which is a no-op.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvjit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) __builtin_trap();                                                               \
  } while (0)

static kvjit_context *ctx;

typedef struct reader {
  const uint8_t *p;
  size_t left;
} reader;

static uint64_t take(reader *r, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    v = (v << 8) | (r->left ? (r->left--, *r->p++) : 0);
  }
  return v;
}

/* Mostly small or boundary values, sometimes anything: validation's edges are near 0 and limits. */
static int64_t take_i64(reader *r) {
  uint8_t mode = (uint8_t)take(r, 1);
  switch (mode % 8) {
    case 0: return 0;
    case 1: return (int64_t)(int8_t)take(r, 1);
    case 2: return (int64_t)take(r, 2);
    case 3: return (int64_t)take(r, 4);
    case 4: return INT64_MAX - (int64_t)take(r, 1);
    case 5: return INT64_MIN + (int64_t)take(r, 1);
    case 6: return (int64_t)1 << (take(r, 1) % 63);
    default: return (int64_t)take(r, 8);
  }
}

static void *take_ptr(reader *r) {
  uint8_t mode = (uint8_t)take(r, 1);
  if (mode % 4 == 0) return NULL;
  /* Device-looking addresses with fuzzed low bits (alignment picks the vector width). */
  return (void *)(uintptr_t)(0x7f0000000000ull + (take(r, 4) << (mode % 5)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ctx == NULL) {
    kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
    o.disable_cache = 1;
    o.log = 0;
    CHECK(kvjit_context_create(&ctx, &o) == KVJIT_OK);
  }
  reader r = {data, size};
  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  uint8_t flags = (uint8_t)take(&r, 1);
  if (flags & 1) a.version = (unsigned)take(&r, 4);
  a.k = take_ptr(&r);
  a.v = take_ptr(&r);
  a.k_cache = take_ptr(&r);
  a.v_cache = take_ptr(&r);
  a.indices = take_ptr(&r);
  a.index_type = (kvjit_index_type)(int)(int8_t)take(&r, 1);
  a.index_stride = take_i64(&r);
  a.batch = take_i64(&r);
  a.k_row_bytes = take_i64(&r);
  a.v_row_bytes = take_i64(&r);
  a.k_stride = take_i64(&r);
  a.v_stride = take_i64(&r);
  a.k_cache_stride = take_i64(&r);
  a.v_cache_stride = take_i64(&r);
  a.num_slots = take_i64(&r);
  a.skip_slot = (flags & 2) ? take_i64(&r) : KVJIT_NO_SKIP_SLOT;
  a.split = (int)(int8_t)take(&r, 1);
  a.pdl = (kvjit_pdl_mode)(int)(int8_t)take(&r, 1);
  a.stream = (flags & 4) ? (struct CUstream_st *)take_ptr(&r) : NULL;
  if (flags & 8) { /* quantize on store (version 2): mostly valid enums, sometimes not */
    a.dtype = (kvjit_dtype)((int)(take(&r, 1) % 8) - 1);
    a.cache_dtype = (kvjit_dtype)((int)(take(&r, 1) % 8) - 1);
    a.scale_kind = (kvjit_scale_kind)((int)(take(&r, 1) % 5) - 1);
    a.k_scale = (const float *)take_ptr(&r);
    a.v_scale = (const float *)take_ptr(&r);
    a.num_heads = take_i64(&r);
  }

  kvjit_status prep = kvjit_store_kv_cache_prepare(ctx, &a);
  CHECK(prep != KVJIT_OK); /* no driver: nothing can be loaded */
  CHECK(strcmp(kvjit_status_name(prep), "UNKNOWN") != 0);
  CHECK(kvjit_last_error()[0] != '\0');
  kvjit_status store = kvjit_store_kv_cache(ctx, &a);
  CHECK(strcmp(kvjit_status_name(store), "UNKNOWN") != 0);
  if (store == KVJIT_OK) {
    CHECK(a.batch == 0); /* the only success without a GPU: a valid no-op */
  } else {
    CHECK(kvjit_last_error()[0] != '\0');
    /* An argument refused by one is refused by the other, with the same status. */
    if (store == KVJIT_ERR_INVALID_ARGUMENT || store == KVJIT_ERR_UNSUPPORTED) CHECK(prep == store);
  }
  /* A batch-0 store is OK exactly when validation passed, which prepare then got past. */
  if (a.batch == 0 && store == KVJIT_OK) CHECK(prep != KVJIT_ERR_INVALID_ARGUMENT);
  return 0;
}
