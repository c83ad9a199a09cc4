/* Cache entry format: round trip, and every corruption is caught (never parsed as good). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "entry.h"
#include "entry_util.h"
#include "xxh.h"

static const char *kernels[] = {"scale<128, float>", "plain"};
static const char *lowered[] = {"_Z5scaleILi128EfEvPf", "plain"};
static const char *kernels_of_alias[] = {"scale<128,float>", "plain"};
static const char *lowered_of_alias[] = {"_Z5scaleILi128EfEvPf", "plain"};

static const kvjit_entry_digests digests = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};

static void make_entry(uint8_t **buf, size_t *len, kvjit_key *key) {
  static uint8_t payload[1000];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 131 + 7);
  kvjit_entry_meta m = {.content = {0x0123456789abcdefull, 0xfedcba9876543210ull},
                        .target = {90, KVJIT_PAYLOAD_CUBIN, 'a', 13, 0},
                        .created = 1700000000,
                        .program = "prog.cu",
                        .op = "store_kv_cache",
                        .variant = "store_kv_cache arch=90 k_row_bytes=256",
                        .compiler = "NVRTC 13.0",
                        .num_kernels = 2,
                        .kernels = kernels,
                        .lowered = lowered,
                        .digests = &digests};
  kvjit_key_derive(&m.key, &m.target, m.num_kernels, kernels, &m.content);
  *key = m.key;
  assert_int_equal(kvjit_entry_encode(buf, len, &m, payload, sizeof payload), KVJIT_OK);
}

static void test_round_trip(void **state) {
  (void)state;
  uint8_t *buf;
  size_t len;
  kvjit_key key;
  make_entry(&buf, &len, &key);
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, &key, 1), KVJIT_OK);
  assert_true(kvjit_key_equal(&v.key, &key));
  assert_int_equal(v.target.nvrtc_major, 13);
  assert_int_equal(v.target.arch, 90);
  assert_int_equal(v.target.kind, KVJIT_PAYLOAD_CUBIN);
  assert_int_equal(v.target.suffix, 'a');
  assert_int_equal(v.content.low, 0xfedcba9876543210ull);
  assert_int_equal(v.op_len, strlen("store_kv_cache"));
  assert_memory_equal(v.op, "store_kv_cache", v.op_len);
  assert_int_equal(v.variant_len, strlen("store_kv_cache arch=90 k_row_bytes=256"));
  assert_memory_equal(v.compiler, "NVRTC 13.0", v.compiler_len);
  assert_int_equal(v.created, 1700000000);
  assert_int_equal(v.program_len, 7);
  assert_memory_equal(v.program, "prog.cu", 7);
  assert_int_equal(v.num_kernels, 2);
  assert_int_equal(v.payload_len, 1000);
  assert_int_equal(v.payload[999], (uint8_t)(999 * 131 + 7));
  for (uint32_t i = 0; i < 2; i++) {
    const char *n, *l;
    size_t nl, ll;
    kvjit_entry_kernel(&v, i, &n, &nl, &l, &ll);
    assert_int_equal(nl, strlen(kernels[i]));
    assert_memory_equal(n, kernels[i], nl);
    assert_int_equal(ll, strlen(lowered[i]));
    assert_memory_equal(l, lowered[i], ll);
  }
  free(buf);
}

static void expect_corrupt(const uint8_t *buf, size_t len, const kvjit_key *key, const char *why) {
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, key, 1), KVJIT_ERR_CORRUPT);
  if (why && strstr(kvjit_last_error(), why) == NULL) fail_msg("\"%s\" lacks \"%s\"", kvjit_last_error(), why);
}

static void test_truncated_at_every_length(void **state) {
  (void)state;
  uint8_t *buf;
  size_t len;
  kvjit_key key;
  make_entry(&buf, &len, &key);
  for (size_t n = 0; n < len; n++) expect_corrupt(buf, n, &key, NULL);
  free(buf);
}

static void test_every_flipped_byte_is_caught(void **state) {
  (void)state;
  uint8_t *buf;
  size_t len;
  kvjit_key key;
  make_entry(&buf, &len, &key);
  for (size_t i = 0; i < len; i++) {
    buf[i] ^= 0x5a;
    expect_corrupt(buf, len, &key, NULL);
    buf[i] ^= 0x5a;
  }
  free(buf);
}

static void test_named_cases(void **state) {
  (void)state;
  uint8_t *buf;
  size_t len;
  kvjit_key key;
  make_entry(&buf, &len, &key);
  expect_corrupt(buf, 0, &key, "truncated");
  buf[0] = 'X';
  expect_corrupt(buf, len, &key, "magic");
  buf[0] = 'K';
  buf[8] = 1; /* format version 1 */
  expect_corrupt(buf, len, &key, "version 1");
  buf[8] = KVJIT_ENTRY_VERSION;
  kvjit_key other = key;
  other.low ^= 1;
  expect_corrupt(buf, len, &other, "key mismatch");
  buf[len - 1] ^= 1;
  expect_corrupt(buf, len, &key, "payload checksum");
  buf[len - 1] ^= 1;
  /* Trailing garbage after the payload. */
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, buf, len);
  longer[len] = 0;
  expect_corrupt(longer, len + 1, &key, "file size");
  free(longer);
  /* A header that lies about its target or kernels, checksums made good again: the key it stores
   * is not the one its fields derive. */
  for (size_t at = 48; at < 58; at++) {
    if (at == 56) continue; /* the payload kind byte: other values are rejected by name */
    uint8_t *lie = malloc(len);
    memcpy(lie, buf, len);
    lie[at] ^= 1;
    entry_reseal(lie);
    expect_corrupt(lie, len, &key, at == 57 ? "suffix" : at >= 54 && at <= 55 ? "range" : "derive");
    free(lie);
  }
  /* Without payload checking a flipped payload byte passes (listing without verify). */
  buf[len - 1] ^= 1;
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, NULL, 0), KVJIT_OK);
  free(buf);
}

/* Version 3 records the key inputs' digests; a version 2 entry still reads, its digests unknown. */
static void test_digests_and_version_2(void **state) {
  (void)state;
  uint8_t *buf;
  size_t len;
  kvjit_key key;
  make_entry(&buf, &len, &key);
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, &key, 1), KVJIT_OK);
  assert_int_equal(v.version, 3);
  assert_memory_equal(&v.digests, &digests, sizeof digests);
  size_t old_len;
  uint8_t *old = entry_as_version_2(buf, len, &old_len);
  assert_int_equal(kvjit_entry_parse(&v, old, old_len, &key, 1), KVJIT_OK);
  assert_int_equal(v.version, 2);
  assert_int_equal(v.digests.sources.low, 0);
  assert_int_equal(v.payload_len, 1000);
  free(old);
  /* A digests block that claims more or less than the header holds. */
  uint32_t header = (uint32_t)buf[12] | (uint32_t)buf[13] << 8 | (uint32_t)buf[14] << 16 | (uint32_t)buf[15] << 24;
  uint8_t *at = buf + header - 8 - 4 - KVJIT_ENTRY_DIGESTS_BYTES;
  at[0] = KVJIT_ENTRY_DIGESTS_BYTES - 16;
  entry_reseal(buf);
  expect_corrupt(buf, len, &key, "digests");
  at[0] = KVJIT_ENTRY_DIGESTS_BYTES + 16;
  entry_reseal(buf);
  expect_corrupt(buf, len, &key, "digests");
  free(buf);
}

/* An alias: the key of the cubin it stands for, one kernel, a 24-byte payload naming its bundle. */
static void make_alias(uint8_t **buf, size_t *len, kvjit_key *key, size_t num_kernels, const kvjit_entry_alias *alias,
                       size_t payload_len) {
  kvjit_entry_meta m = {.content = {0x0123456789abcdefull, 0xfedcba9876543210ull},
                        .target = {90, KVJIT_PAYLOAD_CUBIN, 0, 13, 0},
                        .created = 1700000000,
                        .program = "prog.cu",
                        .num_kernels = num_kernels,
                        .kernels = kernels_of_alias,
                        .lowered = lowered_of_alias};
  kvjit_key_derive(&m.key, &m.target, m.num_kernels, kernels_of_alias, &m.content);
  *key = m.key;
  m.target.kind = KVJIT_PAYLOAD_ALIAS;
  uint8_t payload[64] = {0};
  kvjit_entry_alias_encode(payload, alias);
  assert_int_equal(kvjit_entry_encode(buf, len, &m, payload, payload_len), KVJIT_OK);
}

static void test_alias(void **state) {
  (void)state;
  const kvjit_entry_alias good = {{0x1111, 0x2222}, 2, 3};
  uint8_t *buf;
  size_t len;
  kvjit_key key;
  make_alias(&buf, &len, &key, 1, &good, KVJIT_ENTRY_ALIAS_BYTES);
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, &key, 1), KVJIT_OK);
  assert_int_equal(v.target.kind, KVJIT_PAYLOAD_ALIAS);
  kvjit_entry_alias a;
  kvjit_entry_alias_get(&v, &a);
  assert_true(kvjit_key_equal(&a.bundle, &good.bundle));
  assert_int_equal(a.index, 2);
  assert_int_equal(a.count, 3);
  /* Its kind byte made cubin (checksum made good): the same key, an entry of 24 bytes that the
   * driver refuses (and the loader then rebuilds); made PTX: not its key. */
  buf[56] = KVJIT_PAYLOAD_CUBIN;
  entry_reseal(buf);
  assert_int_equal(kvjit_entry_parse(&v, buf, len, &key, 1), KVJIT_OK);
  buf[56] = KVJIT_PAYLOAD_PTX;
  entry_reseal(buf);
  expect_corrupt(buf, len, &key, "derive");
  free(buf);
  /* Malformed: two kernels, another payload size, an index past the count, no count, itself. */
  make_alias(&buf, &len, &key, 2, &good, KVJIT_ENTRY_ALIAS_BYTES);
  expect_corrupt(buf, len, &key, "malformed alias");
  free(buf);
  make_alias(&buf, &len, &key, 1, &good, KVJIT_ENTRY_ALIAS_BYTES + 8);
  expect_corrupt(buf, len, &key, "malformed alias");
  free(buf);
  const kvjit_entry_alias past = {{0x1111, 0x2222}, 3, 3}, none = {{0x1111, 0x2222}, 0, 0};
  make_alias(&buf, &len, &key, 1, &past, KVJIT_ENTRY_ALIAS_BYTES);
  expect_corrupt(buf, len, &key, "malformed alias");
  free(buf);
  make_alias(&buf, &len, &key, 1, &none, KVJIT_ENTRY_ALIAS_BYTES);
  expect_corrupt(buf, len, &key, "malformed alias");
  free(buf);
  kvjit_entry_alias self = good;
  make_alias(&buf, &len, &key, 1, &self, KVJIT_ENTRY_ALIAS_BYTES);
  self.bundle = key;
  free(buf);
  make_alias(&buf, &len, &key, 1, &self, KVJIT_ENTRY_ALIAS_BYTES);
  expect_corrupt(buf, len, &key, "alias of itself");
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_truncated_at_every_length),
      cmocka_unit_test(test_every_flipped_byte_is_caught),
      cmocka_unit_test(test_named_cases),
      cmocka_unit_test(test_alias),
      cmocka_unit_test(test_digests_and_version_2),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
