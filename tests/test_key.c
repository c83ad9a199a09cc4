/* Cache keys: stable (known answer), and sensitive to every input, one at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "internal_util.h"
#include "key.h"

static const char *base_options[] = {"-std=c++17", "-DFOO=1"};
static const kvjit_header base_headers[] = {{"a.h", "#define A 1\n"}, {"b.h", "#define B 2\n"}};
static const char *base_kernels[] = {"k1", "k2<128, float>"};

static kvjit_program_desc base_desc(void) {
  kvjit_program_desc d = KVJIT_PROGRAM_DESC_INIT;
  d.name = "prog.cu";
  d.source = "extern \"C\" __global__ void k1() {}\n";
  d.options = base_options;
  d.num_options = 2;
  d.headers = base_headers;
  d.num_headers = 2;
  d.kernels = base_kernels;
  d.num_kernels = 2;
  return d;
}

static const kvjit_key_target base_target = {90, KVJIT_PAYLOAD_CUBIN, 0, 13, 0};

static kvjit_key key_of(const kvjit_program_desc *d, const kvjit_key_target *t) {
  kvjit_key k;
  kvjit_key_compute(&k, d, t);
  return k;
}

static void test_known_answer(void **state) {
  (void)state;
  kvjit_program_desc d = base_desc();
  kvjit_key k = key_of(&d, &base_target);
  char hex[33];
  kvjit_key_hex(&k, hex);
  /* Pinned: a change here invalidates every cache in the field; bump KVJIT_CACHE_FORMAT_VERSION
   * deliberately if the encoding must change. (Kernel names are keyed in canonical form since the
   * loader made whitespace in name expressions insignificant: "k2<128,float>" here; names without
   * whitespace kept their keys.) */
  assert_string_equal(hex, "37cd2bed8ff08cff5b4bc5c4e04f5e03");
  static const char *respaced[] = {" k1 ", "k2< 128 ,float >"};
  d.kernels = respaced;
  kvjit_key same = key_of(&d, &base_target);
  assert_true(kvjit_key_equal(&k, &same));
  kvjit_key back;
  assert_int_equal(kvjit_key_parse_hex(&back, hex), 0);
  assert_true(kvjit_key_equal(&k, &back));
  assert_int_not_equal(kvjit_key_parse_hex(&back, "xyz"), 0);
}

static void test_every_input_changes_the_key(void **state) {
  (void)state;
  kvjit_program_desc d = base_desc();
  kvjit_key base = key_of(&d, &base_target);
  kvjit_key seen[32];
  size_t n = 0;
  seen[n++] = base;
#define EXPECT_NEW(desc, target)                                                                 \
  do {                                                                                           \
    kvjit_key k_ = key_of(&(desc), &(target));                                                   \
    for (size_t i_ = 0; i_ < n; i_++) assert_false(kvjit_key_equal(&k_, &seen[i_]));             \
    seen[n++] = k_;                                                                              \
  } while (0)

  kvjit_key_target t = base_target;
  t.arch = 100;
  EXPECT_NEW(d, t);
  t = base_target;
  t.kind = KVJIT_PAYLOAD_PTX;
  EXPECT_NEW(d, t);
  t = base_target;
  t.suffix = 'a';
  EXPECT_NEW(d, t);
  t = base_target;
  t.suffix = 'f';
  EXPECT_NEW(d, t);
  t = base_target;
  t.nvrtc_minor = 1;
  EXPECT_NEW(d, t);
  t = base_target;
  t.nvrtc_major = 12;
  EXPECT_NEW(d, t);

  kvjit_program_desc x = base_desc();
  x.source = "extern \"C\" __global__ void k1() { }\n";
  EXPECT_NEW(x, base_target);
  x = base_desc();
  x.name = "other.cu";
  EXPECT_NEW(x, base_target);
  /* Options: a different one, one fewer, and the same two swapped (order matters to NVRTC). */
  const char *opt_other[] = {"-std=c++17", "-DFOO=2"};
  x = base_desc();
  x.options = opt_other;
  EXPECT_NEW(x, base_target);
  x = base_desc();
  x.num_options = 1;
  EXPECT_NEW(x, base_target);
  const char *opt_swapped[] = {"-DFOO=1", "-std=c++17"};
  x = base_desc();
  x.options = opt_swapped;
  EXPECT_NEW(x, base_target);
  /* Boundaries cannot move between options: "-std=c++17" "-DFOO=1" vs "-std=c++17-D" "FOO=1". */
  const char *opt_shifted[] = {"-std=c++17-D", "FOO=1"};
  x = base_desc();
  x.options = opt_shifted;
  EXPECT_NEW(x, base_target);
  /* Headers: contents, name, count. */
  const kvjit_header h_contents[] = {{"a.h", "#define A 2\n"}, {"b.h", "#define B 2\n"}};
  x = base_desc();
  x.headers = h_contents;
  EXPECT_NEW(x, base_target);
  const kvjit_header h_name[] = {{"c.h", "#define A 1\n"}, {"b.h", "#define B 2\n"}};
  x = base_desc();
  x.headers = h_name;
  EXPECT_NEW(x, base_target);
  x = base_desc();
  x.num_headers = 1;
  EXPECT_NEW(x, base_target);
  /* Kernels. */
  const char *k_other[] = {"k1", "k2<256, float>"};
  x = base_desc();
  x.kernels = k_other;
  EXPECT_NEW(x, base_target);
  x = base_desc();
  x.num_kernels = 1;
  EXPECT_NEW(x, base_target);
  /* desc->arch is not part of the key (the target's arch is). */
  x = base_desc();
  x.arch = 80;
  kvjit_key same = key_of(&x, &base_target);
  assert_true(kvjit_key_equal(&same, &base));
#undef EXPECT_NEW
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_answer),
      cmocka_unit_test(test_every_input_changes_the_key),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
