/* Target codes: parsing, spelling, the rules of which GPU may load what (no NVRTC needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "target.h"

static void test_spellings_round_trip(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int code;
  } cases[] = {
      {"sm_80", 80},
      {"sm_90a", 90 | KVJIT_TARGET_ARCH_SPECIFIC},
      {"sm_100f", 100 | KVJIT_TARGET_FAMILY},
      {"sm_121a", 121 | KVJIT_TARGET_ARCH_SPECIFIC},
      {"compute_90", 90 | KVJIT_TARGET_PTX},
      {"compute_90a", 90 | KVJIT_TARGET_PTX | KVJIT_TARGET_ARCH_SPECIFIC},
      {"compute_100f", 100 | KVJIT_TARGET_PTX | KVJIT_TARGET_FAMILY},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int code = -1;
    assert_int_equal(kvjit_parse_target(cases[i].text, &code), KVJIT_OK);
    assert_int_equal(code, cases[i].code);
    char name[32];
    assert_int_equal(kvjit_target_name(code, name, sizeof name), KVJIT_OK);
    assert_string_equal(name, cases[i].text);
  }
  int code = 0;
  assert_int_equal(kvjit_parse_target("90", &code), KVJIT_OK);
  assert_int_equal(code, 90); /* a plain number is sm_XY, as it always was */
  assert_int_equal(kvjit_parse_target("9.0", &code), KVJIT_OK);
  assert_int_equal(code, 90);
  assert_int_equal(kvjit_parse_target("10.3", &code), KVJIT_OK);
  assert_int_equal(code, 103);
  assert_int_equal(kvjit_parse_target("90a", &code), KVJIT_OK);
  assert_int_equal(code, 90 | KVJIT_TARGET_ARCH_SPECIFIC);
}

static void test_bad_spellings_and_codes(void **state) {
  (void)state;
  const char *bad[] = {"", "sm_", "sm_9", "sm_90b", "sm_90af", "compute_", "compute_9.0", "sm_9.0", "12", "sm_0900",
                       "SM_90", "sm_90 ", "compute_90x", "1234", "a90"};
  int code;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(kvjit_parse_target(bad[i], &code), KVJIT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kvjit_last_error(), "target"));
  }
  assert_int_equal(kvjit_parse_target(NULL, &code), KVJIT_ERR_INVALID_ARGUMENT);
  char name[32];
  const int bad_codes[] = {-1, 0, 5, 1000, 90 | KVJIT_TARGET_ARCH_SPECIFIC | KVJIT_TARGET_FAMILY, 90 | 0x100000};
  for (size_t i = 0; i < sizeof bad_codes / sizeof bad_codes[0]; i++) {
    assert_int_equal(kvjit_target_name(bad_codes[i], name, sizeof name), KVJIT_ERR_INVALID_ARGUMENT);
    assert_string_equal(name, "");
  }
  assert_int_equal(kvjit_target_name(90, name, 5), KVJIT_ERR_INVALID_ARGUMENT); /* "sm_90" needs 6 */
  assert_int_equal(kvjit_target_check(KVJIT_TARGET_ARCH_SPECIFIC, 1, "desc->arch"), KVJIT_OK);
  assert_int_equal(kvjit_target_check(0, 1, "desc->arch"), KVJIT_OK);
  assert_int_equal(kvjit_target_check(-3, 1, "desc->arch"), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "desc->arch: -3"));
}

static void test_ops_refuse_loader_targets(void **state) {
  (void)state;
  int sm = 0;
  const char *loader_only[] = {"sm_90a", "sm_100f", "compute_90", "compute_90a"};
  for (size_t i = 0; i < 4; i++) {
    assert_int_equal(kvjit_parse_arch(loader_only[i], &sm), KVJIT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kvjit_last_error(), loader_only[i]));
    assert_non_null(strstr(kvjit_last_error(), "kvjit_parse_target"));
  }
  assert_int_equal(kvjit_parse_arch("10.0", &sm), KVJIT_OK);
  assert_int_equal(sm, 100);
  /* The refusal names the plain arch to use instead. */
  assert_int_equal(kvjit_parse_arch("sm_90a", &sm), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "sm_90 runs on the same GPUs"));
}

/* Ops take a GPU's name as people type it (issue 25); an unknown one says what is expected. */
static void test_ops_take_gpu_names(void **state) {
  (void)state;
  const struct {
    const char *text;
    int sm;
  } names[] = {{"h100", 90},     {"H100", 90},      {"NVIDIA H200", 90}, {"h100-sxm5-80gb", 90}, {"GH200", 90},
               {"a100", 80},     {"A10G", 86},      {"a10", 86},         {"L40S", 89},           {"RTX 4090", 89},
               {"b200", 100},    {"GB300", 103},    {"h20", 90},         {"SM_90", 90}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int sm = 0;
    assert_int_equal(kvjit_parse_arch(names[i].text, &sm), KVJIT_OK);
    assert_int_equal(sm, names[i].sm);
  }
  const char *unknown[] = {"h1000", "h10", "x100", "nvidia", "a1000"};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    int sm = 0;
    assert_int_equal(kvjit_parse_arch(unknown[i], &sm), KVJIT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kvjit_last_error(), "a GPU name (e.g. h100"));
  }
}

static void test_which_gpu_may_load_what(void **state) {
  (void)state;
  const int a90 = 90 | KVJIT_TARGET_ARCH_SPECIFIC, f100 = 100 | KVJIT_TARGET_FAMILY, p90 = 90 | KVJIT_TARGET_PTX;
  assert_int_equal(kvjit_target_check_device(90, 90), KVJIT_OK);
  assert_int_equal(kvjit_target_check_device(80, 86), KVJIT_OK);  /* same major, later minor */
  assert_int_equal(kvjit_target_check_device(86, 80), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(kvjit_target_check_device(80, 90), KVJIT_ERR_UNSUPPORTED); /* cubins do not cross majors */
  assert_int_equal(kvjit_target_check_device(a90, 90), KVJIT_OK);
  assert_int_equal(kvjit_target_check_device(a90, 100), KVJIT_ERR_UNSUPPORTED);
  assert_non_null(strstr(kvjit_last_error(), "sm_90a"));
  assert_non_null(strstr(kvjit_last_error(), "sm_100"));
  assert_int_equal(kvjit_target_check_device(100 | KVJIT_TARGET_ARCH_SPECIFIC, 103), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(kvjit_target_check_device(f100, 103), KVJIT_OK);
  assert_int_equal(kvjit_target_check_device(f100, 100), KVJIT_OK);
  assert_int_equal(kvjit_target_check_device(f100, 120), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(kvjit_target_check_device(103 | KVJIT_TARGET_FAMILY, 100), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(kvjit_target_check_device(p90, 90), KVJIT_OK);
  assert_int_equal(kvjit_target_check_device(p90, 120), KVJIT_OK); /* PTX: any later GPU */
  assert_int_equal(kvjit_target_check_device(p90, 89), KVJIT_ERR_UNSUPPORTED);
  assert_int_equal(kvjit_target_check_device(p90 | KVJIT_TARGET_ARCH_SPECIFIC, 100), KVJIT_ERR_UNSUPPORTED);
}

static void test_key_targets_are_distinct(void **state) {
  (void)state;
  kvjit_key_target t[4] = {{90, KVJIT_PAYLOAD_CUBIN, 0, 13, 0},
                           {90, KVJIT_PAYLOAD_CUBIN, 'a', 13, 0},
                           {90, KVJIT_PAYLOAD_PTX, 0, 13, 0},
                           {100, KVJIT_PAYLOAD_CUBIN, 'f', 13, 0}};
  const int codes[4] = {90, 90 | KVJIT_TARGET_ARCH_SPECIFIC, 90 | KVJIT_TARGET_PTX, 100 | KVJIT_TARGET_FAMILY};
  const char *options[4] = {"--gpu-architecture=sm_90", "--gpu-architecture=sm_90a", "--gpu-architecture=compute_90",
                            "--gpu-architecture=sm_100f"};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(kvjit_target_code(&t[i]), codes[i]);
    char opt[64];
    kvjit_target_option(&t[i], opt, sizeof opt);
    assert_string_equal(opt, options[i]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spellings_round_trip),
      cmocka_unit_test(test_bad_spellings_and_codes),
      cmocka_unit_test(test_ops_refuse_loader_targets),
      cmocka_unit_test(test_ops_take_gpu_names),
      cmocka_unit_test(test_which_gpu_may_load_what),
      cmocka_unit_test(test_key_targets_are_distinct),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
