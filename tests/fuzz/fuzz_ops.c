/*
 * libFuzzer harness over the op layer's inputs, with no GPU and the disk cache off. The first byte
 * picks what the rest is:
 *  - even: a manifest line of any op. A line that parses is checked, formats, and parses back to
 *    the same variant; one that does not leaves a message.
 *  - odd: every field of kvjit_transfer_kv_args (pointers are device addresses, never read on the
 *    host: AddressSanitizer would catch one). Without a driver, only a valid batch-0 call succeeds,
 *    and the call and prepare refuse an argument with the same status.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvjit.h"
#include "kvjit_tools.h"

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
  for (size_t i = 0; i < n; i++) v = (v << 8) | (r->left ? (r->left--, *r->p++) : 0);
  return v;
}

static int64_t take_i64(reader *r) {
  switch (take(r, 1) % 8) {
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
  return (void *)(uintptr_t)(0x7f0000000000ull + (take(r, 4) << (mode % 5)));
}

static void fuzz_line(const uint8_t *data, size_t size) {
  char line[1024];
  size_t n = size < sizeof line - 1 ? size : sizeof line - 1;
  memcpy(line, data, n);
  line[n] = '\0';
  kvjit_variant v;
  kvjit_status st = kvjit_variant_parse(&v, line);
  CHECK(strcmp(kvjit_status_name(st), "UNKNOWN") != 0);
  if (st != KVJIT_OK) {
    CHECK(kvjit_last_error()[0] != '\0');
    return;
  }
  kvjit_variant checked = v;
  CHECK(kvjit_variant_check(&checked) == KVJIT_OK);
  CHECK(memcmp(&checked, &v, sizeof v) == 0);
  char out[512];
  CHECK(kvjit_variant_format(&v, out, sizeof out) == KVJIT_OK);
  kvjit_variant again;
  CHECK(kvjit_variant_parse(&again, out) == KVJIT_OK);
  CHECK(memcmp(&again, &v, sizeof v) == 0);
}

static void fuzz_transfer(const uint8_t *data, size_t size) {
  reader r = {data, size};
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  uint8_t flags = (uint8_t)take(&r, 1);
  if (flags & 1) a.version = (unsigned)take(&r, 4);
  a.src_k = take_ptr(&r);
  a.src_v = take_ptr(&r);
  a.dst_k = take_ptr(&r);
  a.dst_v = take_ptr(&r);
  a.src_indices = take_ptr(&r);
  a.dst_indices = take_ptr(&r);
  a.index_type = (kvjit_index_type)(int)(int8_t)take(&r, 1);
  a.src_index_stride = take_i64(&r);
  a.dst_index_stride = take_i64(&r);
  a.batch = take_i64(&r);
  a.k_row_bytes = take_i64(&r);
  a.v_row_bytes = take_i64(&r);
  a.src_k_stride = take_i64(&r);
  a.src_v_stride = take_i64(&r);
  a.dst_k_stride = take_i64(&r);
  a.dst_v_stride = take_i64(&r);
  a.src_num_slots = take_i64(&r);
  a.dst_num_slots = take_i64(&r);
  a.num_layers = (flags & 2) ? take_i64(&r) : 0;
  a.src = (kvjit_location)(int)(int8_t)take(&r, 1);
  a.dst = (kvjit_location)(int)(int8_t)take(&r, 1);
  a.split = (int)(int8_t)take(&r, 1);
  a.pdl = (kvjit_pdl_mode)(int)(int8_t)take(&r, 1);
  kvjit_status prep = kvjit_transfer_kv_prepare(ctx, &a);
  CHECK(prep != KVJIT_OK);
  CHECK(strcmp(kvjit_status_name(prep), "UNKNOWN") != 0);
  CHECK(kvjit_last_error()[0] != '\0');
  kvjit_status call = kvjit_transfer_kv(ctx, &a);
  CHECK(strcmp(kvjit_status_name(call), "UNKNOWN") != 0);
  if (call == KVJIT_OK) {
    CHECK(a.batch == 0);
  } else {
    CHECK(kvjit_last_error()[0] != '\0');
    if (call == KVJIT_ERR_INVALID_ARGUMENT || call == KVJIT_ERR_UNSUPPORTED) CHECK(prep == call);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ctx == NULL) {
    kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
    o.disable_cache = 1;
    o.log = 0;
    CHECK(kvjit_context_create(&ctx, &o) == KVJIT_OK);
  }
  if (size == 0) return 0;
  if (data[0] % 2 == 0) fuzz_line(data + 1, size - 1);
  else fuzz_transfer(data + 1, size - 1);
  return 0;
}
