/* Cache entry encode/parse. Layout in cache/FORMAT.md. All integers little-endian. */
#include "entry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "le.h"
#include "nvrtc_lib.h"
#include "status.h"
#include "xxh.h"

/* The header's strings, in file order: program, op, variant, compiler (u16 length + bytes each). */
enum { ENTRY_STRINGS = 4 };

static uint8_t *put_string(uint8_t *p, const char *s, size_t n) {
  kvjit_le_put16(p, (uint16_t)n);
  if (n) memcpy(p + 2, s, n);
  return p + 2 + n;
}

/* The digests block of version 3: u32 length, then the four digests (high, low each). A reader
 * takes the fields it knows from a longer block, so later versions can append digests. */
static uint8_t *put_digests(uint8_t *p, const kvjit_entry_digests *d) {
  static const kvjit_entry_digests unknown;
  if (d == NULL) d = &unknown;
  const kvjit_key *keys[4] = {&d->nvrtc, &d->toolkit, &d->options, &d->sources};
  kvjit_le_put32(p, KVJIT_ENTRY_DIGESTS_BYTES);
  p += 4;
  for (int i = 0; i < 4; i++, p += 16) {
    kvjit_le_put64(p, keys[i]->high);
    kvjit_le_put64(p + 8, keys[i]->low);
  }
  return p;
}

static void get_digests(const uint8_t *p, kvjit_entry_digests *d) {
  kvjit_key *keys[4] = {&d->nvrtc, &d->toolkit, &d->options, &d->sources};
  for (int i = 0; i < 4; i++, p += 16) {
    keys[i]->high = kvjit_le_get64(p);
    keys[i]->low = kvjit_le_get64(p + 8);
  }
}

kvjit_status kvjit_entry_encode(uint8_t **out, size_t *out_len, const kvjit_entry_meta *meta, const void *payload,
                                size_t payload_len) {
  const char *strings[ENTRY_STRINGS] = {meta->program, meta->op ? meta->op : "", meta->variant ? meta->variant : "",
                                        meta->compiler ? meta->compiler : ""};
  static const char *const string_names[ENTRY_STRINGS] = {"program name", "op name", "variant line", "compiler"};
  size_t lens[ENTRY_STRINGS];
  size_t header = KVJIT_ENTRY_FIXED_BYTES;
  for (int i = 0; i < ENTRY_STRINGS; i++) {
    lens[i] = strlen(strings[i]);
    if (lens[i] > UINT16_MAX) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: longer than 65535 bytes", string_names[i]);
    header += 2 + lens[i];
  }
  if (meta->num_kernels == 0 || meta->num_kernels > KVJIT_ENTRY_MAX_KERNELS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernels: %zu, an entry holds 1..%u", meta->num_kernels,
                      KVJIT_ENTRY_MAX_KERNELS);
  }
  for (size_t i = 0; i < meta->num_kernels; i++) {
    size_t a = strlen(meta->kernels[i]), b = strlen(meta->lowered[i]);
    if (a > UINT16_MAX || b > UINT16_MAX) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "kernel name %zu: longer than 65535 bytes", i);
    }
    header += 4 + a + b;
  }
  header += 4 + KVJIT_ENTRY_DIGESTS_BYTES + 8; /* the digests block, the header checksum */
  if (header > KVJIT_ENTRY_MAX_HEADER_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "entry header: %zu bytes, the format allows %u", header,
                      KVJIT_ENTRY_MAX_HEADER_BYTES);
  }
  if ((uint64_t)payload_len > KVJIT_ENTRY_MAX_PAYLOAD_BYTES) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "payload: %zu bytes, the format allows %llu", payload_len,
                      (unsigned long long)KVJIT_ENTRY_MAX_PAYLOAD_BYTES);
  }
  const kvjit_key_target *t = &meta->target;
  if (t->suffix != 0 && t->suffix != 'a' && t->suffix != 'f') {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "target suffix %d: must be 0, 'a' or 'f'", t->suffix);
  }
  uint8_t *buf = malloc(header + payload_len);
  if (buf == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "entry: cannot allocate %zu bytes", header + payload_len);
  memcpy(buf, KVJIT_ENTRY_MAGIC, 8);
  kvjit_le_put32(buf + 8, KVJIT_ENTRY_VERSION);
  kvjit_le_put32(buf + 12, (uint32_t)header);
  kvjit_le_put64(buf + 16, meta->key.high);
  kvjit_le_put64(buf + 24, meta->key.low);
  kvjit_le_put64(buf + 32, meta->content.high);
  kvjit_le_put64(buf + 40, meta->content.low);
  kvjit_le_put16(buf + 48, (uint16_t)t->nvrtc_major);
  kvjit_le_put16(buf + 50, (uint16_t)t->nvrtc_minor);
  kvjit_le_put32(buf + 52, (uint32_t)t->arch);
  buf[56] = (uint8_t)t->kind;
  buf[57] = (uint8_t)t->suffix;
  kvjit_le_put16(buf + 58, 0);
  kvjit_le_put32(buf + 60, (uint32_t)meta->num_kernels);
  kvjit_le_put64(buf + 64, (uint64_t)payload_len);
  kvjit_le_put64(buf + 72, XXH3_64bits(payload, payload_len));
  kvjit_le_put64(buf + 80, (uint64_t)meta->created);
  uint8_t *p = buf + KVJIT_ENTRY_FIXED_BYTES;
  for (int i = 0; i < ENTRY_STRINGS; i++) p = put_string(p, strings[i], lens[i]);
  for (size_t i = 0; i < meta->num_kernels; i++) {
    p = put_string(p, meta->kernels[i], strlen(meta->kernels[i]));
    p = put_string(p, meta->lowered[i], strlen(meta->lowered[i]));
  }
  p = put_digests(p, meta->digests);
  kvjit_le_put64(p, XXH3_64bits(buf, header - 8));
  if (payload_len > 0) memcpy(buf + header, payload, payload_len);
  *out = buf;
  *out_len = header + payload_len;
  return KVJIT_OK;
}

static kvjit_status corrupt(const char *why) { return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: %s", why); }

kvjit_status kvjit_entry_check_prefix(const uint8_t *data, size_t len, uint64_t file_len) {
  if (len < KVJIT_ENTRY_FIXED_BYTES || file_len < KVJIT_ENTRY_FIXED_BYTES + 2 * ENTRY_STRINGS + 8) {
    return corrupt("truncated header");
  }
  if (memcmp(data, KVJIT_ENTRY_MAGIC, 8) != 0) return corrupt("bad magic");
  uint32_t version = kvjit_le_get32(data + 8);
  if (version != 2 && version != KVJIT_ENTRY_VERSION) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: format version %u, expected 2 or %u", version,
                      KVJIT_ENTRY_VERSION);
  }
  uint64_t header = kvjit_le_get32(data + 12), payload = kvjit_le_get64(data + 64);
  if (header < KVJIT_ENTRY_FIXED_BYTES + 2 * ENTRY_STRINGS + 8 || header > KVJIT_ENTRY_MAX_HEADER_BYTES) {
    return corrupt("bad header length");
  }
  if (payload > KVJIT_ENTRY_MAX_PAYLOAD_BYTES) return corrupt("payload larger than the format allows");
  if (header + payload != file_len) return corrupt("payload length does not match the file size");
  return KVJIT_OK;
}

/* A string field at *p (u16 length + bytes) that must end before @p end; NULL when truncated. */
static const uint8_t *take_string(const uint8_t *p, const uint8_t *end, const char **s, size_t *len) {
  if (end - p < 2) return NULL;
  size_t n = kvjit_le_get16(p);
  if ((size_t)(end - p - 2) < n) return NULL;
  *s = (const char *)p + 2;
  *len = n;
  return p + 2 + n;
}

kvjit_status kvjit_entry_parse_header(kvjit_entry_view *out, const uint8_t *data, size_t len, uint64_t file_len,
                                      const kvjit_key *expect) {
  kvjit_status st = kvjit_entry_check_prefix(data, len, file_len);
  if (st != KVJIT_OK) return st;
  uint32_t header = kvjit_le_get32(data + 12);
  if (len < header || len > file_len) return corrupt("truncated header");
  if (kvjit_le_get64(data + header - 8) != XXH3_64bits(data, header - 8)) return corrupt("header checksum mismatch");
  kvjit_entry_view v;
  memset(&v, 0, sizeof v);
  v.key.high = kvjit_le_get64(data + 16);
  v.key.low = kvjit_le_get64(data + 24);
  v.content.high = kvjit_le_get64(data + 32);
  v.content.low = kvjit_le_get64(data + 40);
  v.target.nvrtc_major = kvjit_le_get16(data + 48);
  v.target.nvrtc_minor = kvjit_le_get16(data + 50);
  v.target.arch = (int32_t)kvjit_le_get32(data + 52);
  v.target.kind = (kvjit_payload_kind)data[56];
  v.target.suffix = data[57];
  v.num_kernels = kvjit_le_get32(data + 60);
  v.payload_len = kvjit_le_get64(data + 64);
  uint64_t checksum = kvjit_le_get64(data + 72);
  v.created = (int64_t)kvjit_le_get64(data + 80);
  if (v.target.kind != KVJIT_PAYLOAD_CUBIN && v.target.kind != KVJIT_PAYLOAD_PTX && v.target.kind != KVJIT_PAYLOAD_ALIAS) {
    return corrupt("unknown payload kind");
  }
  const int alias = v.target.kind == KVJIT_PAYLOAD_ALIAS;
  if (alias && (v.num_kernels != 1 || v.payload_len != KVJIT_ENTRY_ALIAS_BYTES)) return corrupt("malformed alias");
  if (v.target.suffix != 0 && v.target.suffix != 'a' && v.target.suffix != 'f') return corrupt("unknown target suffix");
  if (kvjit_le_get16(data + 58) != 0) return corrupt("reserved bytes are not zero");
  if (v.target.arch <= 0 || v.target.arch > 9999) return corrupt("arch out of range");
  if (v.num_kernels == 0 || v.num_kernels > KVJIT_ENTRY_MAX_KERNELS) return corrupt("kernel count out of range");
  /* Walk the variable part; every length is checked against the header end. */
  const uint8_t *p = data + KVJIT_ENTRY_FIXED_BYTES;
  const uint8_t *end = data + header - 8;
  if ((p = take_string(p, end, &v.program, &v.program_len)) == NULL ||
      (p = take_string(p, end, &v.op, &v.op_len)) == NULL ||
      (p = take_string(p, end, &v.variant, &v.variant_len)) == NULL ||
      (p = take_string(p, end, &v.compiler, &v.compiler_len)) == NULL) {
    return corrupt("truncated header strings");
  }
  v.kernel_table = p;
  /* An alias stands for a cubin: its key is that cubin's. */
  kvjit_key_target keyed = v.target;
  if (alias) keyed.kind = KVJIT_PAYLOAD_CUBIN;
  kvjit_key_builder kb;
  kvjit_key_begin(&kb, &keyed, v.num_kernels);
  for (uint32_t i = 0; i < v.num_kernels; i++) {
    const char *name, *lowered;
    size_t name_len, lowered_len;
    if ((p = take_string(p, end, &name, &name_len)) == NULL || (p = take_string(p, end, &lowered, &lowered_len)) == NULL) {
      return corrupt("truncated kernel table");
    }
    /* Names become C strings for NVRTC and the driver: an embedded NUL would cut them short. */
    if (name_len == 0 || lowered_len == 0 || memchr(name, 0, name_len) || memchr(lowered, 0, lowered_len)) {
      return corrupt("empty kernel name or one with a NUL byte");
    }
    kvjit_key_add_kernel(&kb, name, name_len);
  }
  v.version = kvjit_le_get32(data + 8);
  if (v.version >= 3) {
    if (end - p < 4) return corrupt("truncated digests");
    uint32_t block = kvjit_le_get32(p);
    if (block < KVJIT_ENTRY_DIGESTS_BYTES || (size_t)(end - p - 4) != block) return corrupt("malformed digests block");
    get_digests(p + 4, &v.digests);
    p += 4 + block;
  }
  if (p != end) return corrupt("header has trailing bytes");
  kvjit_key derived;
  kvjit_key_finish(&kb, &v.content, &derived);
  if (!kvjit_key_equal(&derived, &v.key)) {
    return corrupt("header fields (target, NVRTC version, kernels) do not derive its key");
  }
  v.payload = len == file_len ? data + header : NULL;
  v.payload_checksum = checksum;
  if (expect != NULL && !kvjit_key_equal(expect, &v.key)) return corrupt("key mismatch (entry of another key)");
  *out = v;
  return KVJIT_OK;
}

kvjit_status kvjit_entry_parse(kvjit_entry_view *out, const uint8_t *data, size_t len, const kvjit_key *expect,
                               int check_payload) {
  kvjit_entry_view v;
  kvjit_status st = kvjit_entry_parse_header(&v, data, len, len, expect);
  if (st != KVJIT_OK) return st;
  if (check_payload && XXH3_64bits(v.payload, (size_t)v.payload_len) != v.payload_checksum) {
    return corrupt("payload checksum mismatch");
  }
  if (v.target.kind == KVJIT_PAYLOAD_ALIAS) {
    kvjit_entry_alias a;
    kvjit_entry_alias_get(&v, &a);
    if (a.count == 0 || a.count > KVJIT_ENTRY_MAX_KERNELS || a.index >= a.count) return corrupt("malformed alias");
    if (kvjit_key_equal(&a.bundle, &v.key)) return corrupt("alias of itself");
  }
  *out = v;
  return KVJIT_OK;
}

void kvjit_entry_alias_encode(uint8_t out[KVJIT_ENTRY_ALIAS_BYTES], const kvjit_entry_alias *alias) {
  kvjit_le_put64(out, alias->bundle.high);
  kvjit_le_put64(out + 8, alias->bundle.low);
  kvjit_le_put32(out + 16, alias->index);
  kvjit_le_put32(out + 20, alias->count);
}

void kvjit_entry_alias_get(const kvjit_entry_view *view, kvjit_entry_alias *out) {
  const uint8_t *p = view->payload;
  out->bundle.high = kvjit_le_get64(p);
  out->bundle.low = kvjit_le_get64(p + 8);
  out->index = kvjit_le_get32(p + 16);
  out->count = kvjit_le_get32(p + 20);
}

void kvjit_entry_kernel(const kvjit_entry_view *view, uint32_t index, const char **name, size_t *name_len,
                        const char **lowered, size_t *lowered_len) {
  const uint8_t *p = view->kernel_table;
  for (uint32_t i = 0;; i++) {
    size_t a = kvjit_le_get16(p);
    size_t b = kvjit_le_get16(p + 2 + a);
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

kvjit_entry_meta kvjit_entry_meta_for_write(kvjit_entry_written *written, const kvjit_entry_label *label,
                                            const kvjit_key_target *target, const kvjit_key *key,
                                            const kvjit_key *content, const kvjit_entry_digests *digests,
                                            const char *program) {
  snprintf(written->compiler, sizeof written->compiler, "NVRTC %d.%d", target->nvrtc_major, target->nvrtc_minor);
  written->digests = *digests;
  kvjit_nvrtc_identity(&written->digests.nvrtc);
  return (kvjit_entry_meta){.key = *key,
                            .content = *content,
                            .digests = &written->digests,
                            .target = *target,
                            .created = (int64_t)time(NULL),
                            .program = program,
                            .op = label && label->op ? label->op : "",
                            .variant = label && label->variant ? label->variant : "",
                            .compiler = written->compiler};
}
