/*
 * libFuzzer harness over the cache entry parser (src/entry.c): any bytes a cache file can hold.
 *  - parse never reads outside the buffer (the input is copied to an exact-size allocation so
 *    AddressSanitizer sees one byte past it) and, when it accepts, every field it hands out lies
 *    inside the buffer;
 *  - an entry encoded from fuzzed names and payload parses back to the same fields (also header
 *    first, as a listing reads it), and any single flipped byte of it is rejected (header and
 *    payload are both checksummed);
 *  - the payload check (src/payload.c: ELF section/symbol walk, PTX directives) runs over every
 *    accepted entry's payload, fuzzed bytes included, without reading outside it (the seeds hold a
 *    real sm_90 cubin and PTX, which it must accept).
 *  - an alias (payload kind 3) it accepts is well formed (one kernel, an index inside its bundle).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "payload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) __builtin_trap();                                                               \
  } while (0)

static int inside(const void *p, size_t n, const uint8_t *buf, size_t len) {
  const uint8_t *b = p;
  return b >= buf && n <= len && (size_t)(b - buf) <= len - n;
}

static void check_view(const kvjit_entry_view *v, const uint8_t *buf, size_t len) {
  CHECK(inside(v->program, v->program_len, buf, len));
  if (v->target.kind == KVJIT_PAYLOAD_ALIAS) {
    /* An alias the parser accepts is well formed: one kernel, its index inside its bundle. */
    kvjit_entry_alias a;
    kvjit_entry_alias_get(v, &a);
    CHECK(v->num_kernels == 1 && v->payload_len == KVJIT_ENTRY_ALIAS_BYTES && a.index < a.count);
    CHECK(!kvjit_key_equal(&a.bundle, &v->key));
  }
  CHECK(inside(v->payload, (size_t)v->payload_len, buf, len));
  CHECK(v->payload + v->payload_len == buf + len);
  for (uint32_t i = 0; i < v->num_kernels; i++) {
    const char *name, *lowered;
    size_t nl, ll;
    kvjit_entry_kernel(v, i, &name, &nl, &lowered, &ll);
    CHECK(inside(name, nl, buf, len) && inside(lowered, ll, buf, len));
  }
}

/* Raw bytes as a file. */
static void parse_raw(const uint8_t *data, size_t size) {
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf) return;
  if (size) memcpy(buf, data, size);
  kvjit_entry_view v;
  for (int check_payload = 0; check_payload < 2; check_payload++) {
    if (kvjit_entry_parse(&v, buf, size, NULL, check_payload) == KVJIT_OK) {
      check_view(&v, buf, size);
      kvjit_status payload_ok = kvjit_entry_check_payload(&v);
      CHECK(payload_ok == KVJIT_OK || payload_ok == KVJIT_ERR_CORRUPT);
      /* With the key it claims, it must still parse; with another, never. */
      kvjit_key other = v.key;
      CHECK(kvjit_entry_parse(&v, buf, size, &other, check_payload) == KVJIT_OK);
      other.low ^= 1;
      CHECK(kvjit_entry_parse(&v, buf, size, &other, check_payload) == KVJIT_ERR_CORRUPT);
    }
  }
  free(buf);
}

/* Fuzzed fields through the encoder: strings are NUL-free pieces of the input. */
static void round_trip(const uint8_t *data, size_t size) {
  if (size < 24) return;
  kvjit_entry_meta m;
  memset(&m, 0, sizeof m);
  memcpy(&m.content.high, data, 8);
  memcpy(&m.content.low, data + 8, 8);
  m.target.nvrtc_major = data[16];
  m.target.nvrtc_minor = data[17];
  m.target.arch = 1 + data[18];
  m.target.kind = (data[19] & 1) ? KVJIT_PAYLOAD_PTX : KVJIT_PAYLOAD_CUBIN;
  m.target.suffix = (data[19] & 6) == 2 ? 'a' : (data[19] & 6) == 4 ? 'f' : 0;
  m.created = (int64_t)data[20] << 24;
  size_t nk = 1 + data[21] % 4;
  size_t flip_at = (size_t)data[22] << 8 | data[23];
  data += 24;
  size -= 24;
  /* Split the rest at 0xff bytes: program, then kernel/lowered pairs, then the payload. */
  char *pieces[12] = {0};
  size_t want = 1 + 2 * nk, got = 0;
  const uint8_t *p = data, *end = data + size;
  while (got < want) {
    const uint8_t *stop = memchr(p, 0xff, (size_t)(end - p));
    size_t n = stop ? (size_t)(stop - p) : (size_t)(end - p);
    pieces[got] = calloc(n + 1, 1);
    if (!pieces[got]) goto out;
    for (size_t i = 0; i < n; i++) pieces[got][i] = p[i] ? (char)p[i] : 'x';
    got++;
    p = stop ? stop + 1 : end;
  }
  m.program = pieces[0];
  const char *names[4], *lowered[4];
  for (size_t i = 0; i < nk; i++) {
    names[i] = pieces[1 + 2 * i];
    lowered[i] = pieces[2 + 2 * i];
  }
  for (size_t i = 0; i < nk; i++) {
    if (names[i][0] == '\0' || lowered[i][0] == '\0') goto out; /* empty names are refused by the parser */
  }
  m.num_kernels = nk;
  m.kernels = names;
  m.lowered = lowered;
  m.op = m.variant = m.compiler = "";
  kvjit_key_derive(&m.key, &m.target, nk, names, &m.content);
  uint8_t *enc = NULL;
  size_t len = 0;
  if (kvjit_entry_encode(&enc, &len, &m, p, (size_t)(end - p)) != KVJIT_OK) goto out;
  kvjit_entry_view v;
  CHECK(kvjit_entry_parse(&v, enc, len, &m.key, 1) == KVJIT_OK);
  check_view(&v, enc, len);
  CHECK(v.target.arch == m.target.arch && v.target.kind == m.target.kind && v.target.suffix == m.target.suffix &&
        v.target.nvrtc_major == m.target.nvrtc_major && v.created == m.created);
  CHECK(v.program_len == strlen(m.program) && memcmp(v.program, m.program, v.program_len) == 0);
  CHECK(v.num_kernels == nk && v.payload_len == (uint64_t)(end - p));
  for (uint32_t i = 0; i < nk; i++) {
    const char *name, *low;
    size_t nl, ll;
    kvjit_entry_kernel(&v, i, &name, &nl, &low, &ll);
    CHECK(nl == strlen(names[i]) && memcmp(name, names[i], nl) == 0);
    CHECK(ll == strlen(lowered[i]) && memcmp(low, lowered[i], ll) == 0);
  }
  /* Header first, as `cache ls` reads it: the same verdict, no payload handed out. */
  uint32_t header = (uint32_t)enc[12] | (uint32_t)enc[13] << 8 | (uint32_t)enc[14] << 16 | (uint32_t)enc[15] << 24;
  kvjit_entry_view hv;
  CHECK(kvjit_entry_parse_header(&hv, enc, header, len, &m.key) == KVJIT_OK && hv.payload == (header == len ? enc + header : NULL));
  CHECK(kvjit_entry_parse_header(&hv, enc, header - 1, len, &m.key) == KVJIT_ERR_CORRUPT);
  /* The payload check never reads outside the payload; a real cubin or PTX of the seeds passes. */
  kvjit_status payload_ok = kvjit_entry_check_payload(&v);
  CHECK(payload_ok == KVJIT_OK || payload_ok == KVJIT_ERR_CORRUPT);
  /* One flipped bit anywhere: rejected with the payload check (a checksum collision aside). */
  size_t at = flip_at % len;
  enc[at] ^= 0x10;
  CHECK(kvjit_entry_parse(&v, enc, len, &m.key, 1) == KVJIT_ERR_CORRUPT);
  /* Truncated by one byte: rejected even without the payload check. */
  enc[at] ^= 0x10;
  CHECK(kvjit_entry_parse(&v, enc, len - 1, &m.key, 0) == KVJIT_ERR_CORRUPT);
  free(enc);
out:
  for (size_t i = 0; i < got; i++) free(pieces[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  parse_raw(data, size);
  round_trip(data, size);
  return 0;
}
