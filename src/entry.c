/* Cache entry encode/parse. Layout in cache/FORMAT.md. All integers little-endian. */
#include "entry.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "xxh.h"

static void wr16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static uint64_t rd64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

kvjit_status kvjit_entry_encode(uint8_t **out, size_t *out_len, const kvjit_entry_meta *meta, const void *payload,
                                size_t payload_len) {
  size_t program_len = strlen(meta->program);
  if (program_len > UINT16_MAX) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program name: longer than 65535 bytes");
  size_t header = KVJIT_ENTRY_FIXED_BYTES + 2 + program_len;
  for (size_t i = 0; i < meta->num_kernels; i++) {
    size_t a = strlen(meta->kernels[i]), b = strlen(meta->lowered[i]);
    if (a > UINT16_MAX || b > UINT16_MAX) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel name %zu: longer than 65535 bytes", i);
    }
    header += 4 + a + b;
  }
  header += 8; /* header checksum */
  if (header > UINT32_MAX) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "entry header too large");
  uint8_t *buf = malloc(header + payload_len);
  if (buf == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "entry: cannot allocate %zu bytes", header + payload_len);
  memcpy(buf, KVJIT_ENTRY_MAGIC, 8);
  wr32(buf + 8, KVJIT_CACHE_FORMAT_VERSION);
  wr32(buf + 12, (uint32_t)header);
  wr64(buf + 16, meta->key.high);
  wr64(buf + 24, meta->key.low);
  wr16(buf + 32, (uint16_t)meta->nvrtc_major);
  wr16(buf + 34, (uint16_t)meta->nvrtc_minor);
  wr32(buf + 36, (uint32_t)meta->arch);
  wr32(buf + 40, (uint32_t)meta->kind);
  wr32(buf + 44, (uint32_t)meta->num_kernels);
  wr64(buf + 48, (uint64_t)payload_len);
  wr64(buf + 56, XXH3_64bits(payload, payload_len));
  wr64(buf + 64, (uint64_t)meta->created);
  uint8_t *p = buf + KVJIT_ENTRY_FIXED_BYTES;
  wr16(p, (uint16_t)program_len);
  memcpy(p + 2, meta->program, program_len);
  p += 2 + program_len;
  for (size_t i = 0; i < meta->num_kernels; i++) {
    size_t a = strlen(meta->kernels[i]), b = strlen(meta->lowered[i]);
    wr16(p, (uint16_t)a);
    memcpy(p + 2, meta->kernels[i], a);
    p += 2 + a;
    wr16(p, (uint16_t)b);
    memcpy(p + 2, meta->lowered[i], b);
    p += 2 + b;
  }
  wr64(p, XXH3_64bits(buf, header - 8));
  if (payload_len > 0) memcpy(buf + header, payload, payload_len);
  *out = buf;
  *out_len = header + payload_len;
  return KVJIT_OK;
}

static kvjit_status corrupt(const char *why) { return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: %s", why); }

kvjit_status kvjit_entry_parse(kvjit_entry_view *out, const uint8_t *data, size_t len, const kvjit_key *expect,
                               int check_payload) {
  if (len < KVJIT_ENTRY_FIXED_BYTES + 2 + 8) return corrupt("truncated header");
  if (memcmp(data, KVJIT_ENTRY_MAGIC, 8) != 0) return corrupt("bad magic");
  uint32_t version = rd32(data + 8);
  if (version != KVJIT_CACHE_FORMAT_VERSION) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: format version %u, expected %u", version,
                      KVJIT_CACHE_FORMAT_VERSION);
  }
  uint32_t header = rd32(data + 12);
  if (header < KVJIT_ENTRY_FIXED_BYTES + 2 + 8 || header > len) return corrupt("bad header length");
  if (rd64(data + header - 8) != XXH3_64bits(data, header - 8)) return corrupt("header checksum mismatch");
  kvjit_entry_view v;
  memset(&v, 0, sizeof v);
  v.key.high = rd64(data + 16);
  v.key.low = rd64(data + 24);
  v.nvrtc_major = rd16(data + 32);
  v.nvrtc_minor = rd16(data + 34);
  v.arch = (int32_t)rd32(data + 36);
  v.kind = (kvjit_payload_kind)rd32(data + 40);
  v.num_kernels = rd32(data + 44);
  v.payload_len = rd64(data + 48);
  uint64_t checksum = rd64(data + 56);
  v.created = (int64_t)rd64(data + 64);
  if (v.kind != KVJIT_PAYLOAD_CUBIN && v.kind != KVJIT_PAYLOAD_PTX) return corrupt("unknown payload kind");
  /* Walk the variable part; every length is checked against the header end. */
  const uint8_t *p = data + KVJIT_ENTRY_FIXED_BYTES;
  const uint8_t *end = data + header - 8;
  if (end - p < 2) return corrupt("truncated program name");
  v.program_len = rd16(p);
  if ((size_t)(end - p - 2) < v.program_len) return corrupt("truncated program name");
  v.program = (const char *)p + 2;
  p += 2 + v.program_len;
  v.kernel_table = p;
  for (uint32_t i = 0; i < v.num_kernels; i++) {
    for (int part = 0; part < 2; part++) {
      if (end - p < 2) return corrupt("truncated kernel table");
      size_t n = rd16(p);
      if ((size_t)(end - p - 2) < n) return corrupt("truncated kernel table");
      p += 2 + n;
    }
  }
  if (p != end) return corrupt("header has trailing bytes");
  if (v.payload_len != (uint64_t)(len - header)) return corrupt("payload length does not match the file size");
  v.payload = data + header;
  if (expect != NULL && !kvjit_key_equal(expect, &v.key)) return corrupt("key mismatch (entry of another key)");
  if (check_payload && XXH3_64bits(v.payload, (size_t)v.payload_len) != checksum) {
    return corrupt("payload checksum mismatch");
  }
  *out = v;
  return KVJIT_OK;
}

void kvjit_entry_kernel(const kvjit_entry_view *view, uint32_t index, const char **name, size_t *name_len,
                        const char **lowered, size_t *lowered_len) {
  const uint8_t *p = view->kernel_table;
  for (uint32_t i = 0;; i++) {
    size_t a = rd16(p);
    size_t b = rd16(p + 2 + a);
    if (i == index) {
      *name = (const char *)p + 2;
      *name_len = a;
      *lowered = (const char *)p + 4 + a;
      *lowered_len = b;
      return;
    }
    p += 4 + a + b;
  }
}
