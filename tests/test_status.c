/* Status table, thread-local last error, version. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "status.h"

static void test_names_and_strings_come_from_one_table(void **state) {
  (void)state;
#define CHECK_(name, value, msg)                                                                 \
  assert_string_equal(kvjit_status_name(KVJIT_##name), #name);                                   \
  assert_string_equal(kvjit_status_string(KVJIT_##name), msg);                                   \
  assert_int_equal(KVJIT_##name, value);
  KVJIT_STATUS_MAP(CHECK_)
#undef CHECK_
  assert_string_equal(kvjit_status_name((kvjit_status)12345), "UNKNOWN");
  assert_string_equal(kvjit_status_string((kvjit_status)12345), "unknown status");
}

static void *other_thread(void *arg) {
  (void)arg;
  kvjit_fail(KVJIT_ERR_IO, "from the other thread");
  return NULL;
}

static void test_last_error_is_thread_local(void **state) {
  (void)state;
  assert_int_equal(kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: must be >= 0, got %d", -3),
                   KVJIT_ERR_INVALID_ARGUMENT);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
  pthread_join(t, NULL);
  assert_string_equal(kvjit_last_error(), "batch: must be >= 0, got -3");
  kvjit_clear_error();
  assert_string_equal(kvjit_last_error(), "");
}

static void test_version(void **state) {
  (void)state;
  assert_int_equal(kvjit_version_number(), KVJIT_VERSION_NUMBER);
  assert_non_null(strchr(kvjit_version_string(), '.'));
}

static void test_parse_arch(void **state) {
  (void)state;
  int sm = 0;
  assert_int_equal(kvjit_parse_arch("sm_90", &sm), KVJIT_OK);
  assert_int_equal(sm, 90);
  /* Suffixes and PTX are loader targets (test_target.c): an op's arch refuses them. */
  assert_int_equal(kvjit_parse_arch("sm_90a", &sm), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "kvjit_parse_target"));
  assert_int_equal(kvjit_parse_arch("100", &sm), KVJIT_OK);
  assert_int_equal(sm, 100);
  assert_int_equal(kvjit_parse_arch("8.6", &sm), KVJIT_OK);
  assert_int_equal(sm, 86);
  const char *bad[] = {"sm_9x", "", "sm_", "9", "sm_1234", "abc", "sm_90b", "12"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(kvjit_parse_arch(bad[i], &sm), KVJIT_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kvjit_last_error(), "arch"));
  }
}

static void test_context_arguments(void **state) {
  (void)state;
  assert_int_equal(kvjit_context_create(NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.version = 99;
  kvjit_context *ctx = (kvjit_context *)1;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_ERR_INVALID_ARGUMENT);
  assert_null(ctx);
  assert_non_null(strstr(kvjit_last_error(), "options->version"));
  kvjit_context_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names_and_strings_come_from_one_table),
      cmocka_unit_test(test_last_error_is_thread_local),
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_parse_arch),
      cmocka_unit_test(test_context_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
