/*
 * Canonical key encoding (cache/FORMAT.md, "Key"). Every field is tagged and length-prefixed (u64
 * little-endian), so no two different inputs encode alike ("ab"+"c" vs "a"+"bc"). Nothing
 * machine-specific (paths, hostnames) goes in, so a cache built on one machine hits on another
 * with the same NVRTC.
 */
#include "key.h"

#include <stdlib.h>
#include <string.h>

#include "le.h"
#include "names.h"

#include "xxh.h"

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((kvjit_key_builder *)0)->state), "kvjit_key_builder too small");
_Static_assert(_Alignof(XXH3_state_t) <= 64, "kvjit_key_builder under-aligned");

static XXH3_state_t *state_of(kvjit_key_builder *b) { return (XXH3_state_t *)(void *)b->state; }

static void put_u64(XXH3_state_t *st, uint64_t v) {
  uint8_t b[8];
  kvjit_le_put64(b, v);
  XXH3_128bits_update(st, b, sizeof b);
}

static void put_bytes(XXH3_state_t *st, char tag, const void *data, size_t len) {
  XXH3_128bits_update(st, &tag, 1);
  put_u64(st, (uint64_t)len);
  if (len > 0) XXH3_128bits_update(st, data, len);
}

static void put_str(XXH3_state_t *st, char tag, const char *s) {
  if (s == NULL) {
    /* NULL and "" differ for headers' names only in theory; tag them apart anyway. */
    put_bytes(st, (char)(tag | 0x40), "", 0);
    return;
  }
  put_bytes(st, tag, s, strlen(s));
}

static kvjit_key digest(XXH3_state_t *st) {
  XXH128_hash_t h = XXH3_128bits_digest(st);
  kvjit_key k = {h.high64, h.low64};
  return k;
}

void kvjit_key_content_begin(kvjit_key_builder *b, const char *magic) {
  XXH3_128bits_reset(state_of(b));
  put_str(state_of(b), 'M', magic);
}

void kvjit_key_put_u64(kvjit_key_builder *b, uint64_t v) { put_u64(state_of(b), v); }

void kvjit_key_put_bytes(kvjit_key_builder *b, char tag, const void *data, size_t len) {
  put_bytes(state_of(b), tag, data, len);
}

void kvjit_key_put_str(kvjit_key_builder *b, char tag, const char *s) { put_str(state_of(b), tag, s); }

void kvjit_key_content_end(kvjit_key_builder *b, kvjit_key *out) { *out = digest(state_of(b)); }

void kvjit_key_content_program(kvjit_key_builder *b, const char *name, const char *source, size_t num_options,
                               const char *const *options, size_t num_headers, const kvjit_header *headers) {
  XXH3_state_t *st = state_of(b);
  put_u64(st, (uint64_t)num_options);
  for (size_t i = 0; i < num_options; i++) put_str(st, 'O', options[i]);
  put_str(st, 'S', source);
  put_u64(st, (uint64_t)num_headers);
  for (size_t i = 0; i < num_headers; i++) {
    put_str(st, 'H', headers[i].name);
    put_str(st, 'C', headers[i].source);
  }
  /* The program name reaches NVRTC (it appears in diagnostics and __FILE__), so it shapes the output. */
  put_str(st, 'N', name);
}

void kvjit_key_of_bytes(kvjit_key *out, const void *data, size_t len) {
  XXH128_hash_t h = XXH3_128bits(data, len);
  out->high = h.high64;
  out->low = h.low64;
}

void kvjit_key_begin(kvjit_key_builder *b, const kvjit_key_target *target, size_t num_kernels) {
  XXH3_state_t *st = state_of(b);
  XXH3_128bits_reset(st);
  put_str(st, 'M', "kvjit-cache-key");
  put_u64(st, KVJIT_CACHE_FORMAT_VERSION);
  put_u64(st, (uint64_t)target->nvrtc_major);
  put_u64(st, (uint64_t)target->nvrtc_minor);
  put_u64(st, (uint64_t)target->arch);
  put_u64(st, (uint64_t)target->kind);
  put_u64(st, (uint64_t)target->suffix);
  put_u64(st, (uint64_t)num_kernels);
}

void kvjit_key_add_kernel(kvjit_key_builder *b, const char *name, size_t len) {
  put_bytes(state_of(b), 'K', name, len);
}

void kvjit_key_finish(kvjit_key_builder *b, const kvjit_key *content, kvjit_key *out) {
  XXH3_state_t *st = state_of(b);
  put_u64(st, content->high);
  put_u64(st, content->low);
  *out = digest(st);
}

void kvjit_key_derive(kvjit_key *out, const kvjit_key_target *target, size_t num_kernels, const char *const *kernels,
                      const kvjit_key *content) {
  kvjit_key_builder b;
  kvjit_key_begin(&b, target, num_kernels);
  for (size_t i = 0; i < num_kernels; i++) kvjit_key_add_kernel(&b, kernels[i], strlen(kernels[i]));
  kvjit_key_finish(&b, content, out);
}

void kvjit_key_hex(const kvjit_key *key, char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[i] = digits[(key->high >> (60 - 4 * i)) & 0xf];
    out[16 + i] = digits[(key->low >> (60 - 4 * i)) & 0xf];
  }
  out[32] = '\0';
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

int kvjit_key_parse_hex(kvjit_key *out, const char *hex) {
  uint64_t parts[2] = {0, 0};
  for (int i = 0; i < 32; i++) {
    int v = hex_value(hex[i]);
    if (v < 0) return -1;
    parts[i / 16] = (parts[i / 16] << 4) | (uint64_t)v;
  }
  if (hex[32] != '\0' && hex[32] != '.') return -1;
  out->high = parts[0];
  out->low = parts[1];
  return 0;
}
