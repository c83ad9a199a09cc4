/* Cache entry format: round trip, and every corruption is caught (never parsed as good). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "entry.h"

static const char *kernels[] = {"scale<128, float>", "plain"};
static const char *lowered[] = {"_Z5scaleILi128EfEvPf", "plain"};

static void make_entry(uint8_t **buf, size_t *len, kvjit_key *key) {
  static uint8_t payload[1000];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 131 + 7);
  key->high = 0x0123456789abcdefull;
  key->low = 0xfedcba9876543210ull;
  kvjit_entry_meta m = {*key, 13, 0, 90, KVJIT_PAYLOAD_CUBIN, 1700000000, "prog.cu", 2, kernels, lowered};
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
  assert_int_equal(v.nvrtc_major, 13);
  assert_int_equal(v.arch, 90);
  assert_int_equal(v.kind, KVJIT_PAYLOAD_CUBIN);
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
  if (why) assert_non_null(strstr(kvjit_last_error(), why));
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
  buf[8] = 2; /* format version 2 */
  expect_corrupt(buf, len, &key, "version 2");
  buf[8] = 1;
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
  /* Without payload checking a flipped payload byte passes (listing without verify). */
  buf[len - 1] ^= 1;
  kvjit_entry_view v;
  assert_int_equal(kvjit_entry_parse(&v, buf, len, NULL, 0), KVJIT_OK);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_truncated_at_every_length),
      cmocka_unit_test(test_every_flipped_byte_is_caught),
      cmocka_unit_test(test_named_cases),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
