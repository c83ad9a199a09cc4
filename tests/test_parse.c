/*
 * The strict parser (src/parse.c) and the environment read through it (issue 15: numbers that
 * wrapped or silently became the default). A table of hostile values for each grammar, then every
 * variable kvjit_context_create() reads: a bad value gives exactly one warning line naming the
 * variable and the value, and the documented default; KVJIT_LOG=0 silences it.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kvjit.h"
#include "parse.h"
#include "test_util.h"

static char tmpdir[256];

static int setup(void **state) {
  (void)state;
  return test_dir_make(tmpdir, sizeof tmpdir, "parse");
}

static int teardown(void **state) {
  (void)state;
  return test_dir_remove(tmpdir);
}

static void test_sizes(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int ok;
    uint64_t want;
  } cases[] = {
      {"0", 1, 0},
      {"1048576", 1, 1048576},
      {"500M", 1, 500ull << 20},
      {"2G", 1, 2ull << 30},
      {"64K", 1, 65536},
      {"64KiB", 1, 65536},
      {"64KB", 1, 65536},
      {"64kib", 1, 65536},
      {"10KIB", 1, 10240},
      {"64k", 1, 65536},
      {"1T", 1, 1ull << 40},
      {"3P", 1, 3ull << 50},
      {"15E", 1, 15ull << 60},
      {"512B", 1, 512},
      {"512b", 1, 512},
      {"007", 1, 7},
      {"18446744073709551615", 1, UINT64_MAX}, /* the largest */
      {"18446744073709551616", 0, 0},
      {"18014398509481985K", 0, 0}, /* wrapped to 1 KiB before */
      {"16E", 0, 0},
      {"16384P", 0, 0},
      {"99999999999999999999999", 0, 0},
      {"-1", 0, 0},
      {"+5", 0, 0},
      {"1.5G", 0, 0},
      {"0x10", 0, 0},
      {"", 0, 0},
      {" 1G", 0, 0},
      {"1G ", 0, 0},
      {"1 G", 0, 0},
      {"5Q", 0, 0},
      {"G", 0, 0},
      {"1GG", 0, 0},
      {"1GiBB", 0, 0},
      {"1iB", 0, 0},
      {"1KiBx", 0, 0},
      {"1e3", 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    uint64_t out = 12345;
    kvjit_status st = kvjit_parse_size(cases[i].text, &out);
    if (!cases[i].ok) {
      if (st != KVJIT_ERR_INVALID_ARGUMENT || out != 12345) fail_msg("size \"%s\" accepted as %llu", cases[i].text, (unsigned long long)out);
      if (cases[i].text[0] && strstr(kvjit_last_error(), cases[i].text) == NULL) {
        fail_msg("size \"%s\": message does not name it: %s", cases[i].text, kvjit_last_error());
      }
    } else if (st != KVJIT_OK || out != cases[i].want) {
      fail_msg("size \"%s\": %s, %llu", cases[i].text, kvjit_status_name(st), (unsigned long long)out);
    }
  }
  assert_int_equal(kvjit_parse_size(NULL, NULL), KVJIT_ERR_INVALID_ARGUMENT);
  /* A megabyte of digits is refused with a message of bounded length. */
  static char huge[1 << 20];
  memset(huge, '9', sizeof huge - 1);
  uint64_t out = 0;
  assert_int_equal(kvjit_parse_size(huge, &out), KVJIT_ERR_INVALID_ARGUMENT);
  assert_true(strlen(kvjit_last_error()) < 300);
}

static void test_bools_counts_durations(void **state) {
  (void)state;
  static const char *const yes[] = {"1", "true", "TRUE", "True", "yes", "YES", "on", "On"};
  static const char *const no[] = {"0", "false", "FALSE", "no", "No", "off", "OFF"};
  static const char *const neither[] = {"2", "maybe", "", " 1", "1 ", "tru", "yess", "-1", "01", "y", "n", "enable"};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
    int v = 7;
    assert_int_equal(kvjit_parse_bool(yes[i], &v), KVJIT_OK);
    assert_int_equal(v, 1);
  }
  for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
    int v = 7;
    assert_int_equal(kvjit_parse_bool(no[i], &v), KVJIT_OK);
    assert_int_equal(v, 0);
  }
  for (size_t i = 0; i < sizeof neither / sizeof *neither; i++) {
    int v = 7;
    if (kvjit_parse_bool(neither[i], &v) != KVJIT_ERR_INVALID_ARGUMENT || v != 7) fail_msg("bool \"%s\" accepted", neither[i]);
  }

  static const struct {
    const char *text;
    uint64_t min, max;
    int ok;
    uint64_t want;
  } counts[] = {
      {"1", 1, 1024, 1, 1},          {"1024", 1, 1024, 1, 1024},   {"0", 1, 1024, 0, 0},
      {"1025", 1, 1024, 0, 0},       {"-1", 0, 10, 0, 0},          {"+1", 0, 10, 0, 0},
      {"0x1", 0, 10, 0, 0},          {"1.0", 0, 10, 0, 0},         {"", 0, 10, 0, 0},
      {" 1", 0, 10, 0, 0},           {"1k", 0, 10000, 0, 0},       {"4294967297", 0, UINT32_MAX, 0, 0},
      {"18446744073709551615", 0, UINT64_MAX, 1, UINT64_MAX},      {"18446744073709551616", 0, UINT64_MAX, 0, 0},
  };
  for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
    uint64_t out = 77;
    kvjit_status st = kvjit_parse_uint(counts[i].text, counts[i].min, counts[i].max, &out);
    if (!counts[i].ok ? (st != KVJIT_ERR_INVALID_ARGUMENT || out != 77) : (st != KVJIT_OK || out != counts[i].want)) {
      fail_msg("count \"%s\" in [%llu, %llu]: %s, %llu", counts[i].text, (unsigned long long)counts[i].min,
               (unsigned long long)counts[i].max, kvjit_status_name(st), (unsigned long long)out);
    }
  }

  static const struct {
    const char *text;
    int ok;
    uint64_t want;
  } durations[] = {{"0", 1, 0},           {"60000", 1, 60000}, {"86400000", 1, 86400000}, {"86400001", 0, 0},
                   {"4294967297", 0, 0},  {"-1", 0, 0},        {"1.5", 0, 0},             {"0x10", 0, 0},
                   {"10s", 0, 0},         {"", 0, 0}};
  for (size_t i = 0; i < sizeof durations / sizeof *durations; i++) {
    uint64_t out = 77;
    kvjit_status st = kvjit_parse_duration_ms(durations[i].text, &out);
    if (!durations[i].ok ? (st != KVJIT_ERR_INVALID_ARGUMENT || out != 77) : (st != KVJIT_OK || out != durations[i].want)) {
      fail_msg("duration \"%s\": %s, %llu", durations[i].text, kvjit_status_name(st), (unsigned long long)out);
    }
  }
}

/* ---- the environment ------------------------------------------------------------------------- */

/* Lines of @p path (containing @p needle when not NULL). */
static int lines_in(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[4096];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += needle == NULL || strstr(line, needle) != NULL;
  fclose(f);
  return n;
}

typedef struct env_case {
  const char *name, *value;
  int bad;            /* expect one warning naming both */
  const char *expect; /* what the context must show: "max=N", "disabled", "enabled", "shared" */
} env_case;

/* In a child: the environment of one case, a read-only context on a private dir; stderr to @p err. */
static int env_child(const env_case *c, const char *dir, const char *err, int log_off) {
  int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, 2) < 0) return 90;
  close(fd);
  unsetenv("KVJIT_LOG");
  unsetenv("KVJIT_CACHE_DISABLE");
  unsetenv("KVJIT_CACHE_MAX_SIZE");
  unsetenv("KVJIT_LOCK_TIMEOUT_MS");
  unsetenv("KVJIT_CACHE_ALLOW_SHARED");
  unsetenv("KVJIT_CACHE_PATH");
  setenv("KVJIT_CACHE_DIR", dir, 1);
  setenv(c->name, c->value, 1);
  if (log_off) setenv("KVJIT_LOG", "0", 1);
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.read_only = 1;
  kvjit_context *ctx = NULL;
  if (kvjit_context_create(&ctx, &o) != KVJIT_OK) return 91;
  kvjit_cache_info info;
  kvjit_context_cache_info(ctx, &info);
  int ok = 1;
  if (strncmp(c->expect, "max=", 4) == 0) ok = info.max_bytes == strtoull(c->expect + 4, NULL, 10);
  else if (strcmp(c->expect, "disabled") == 0) ok = info.degraded_reason && strstr(info.degraded_reason, "disabled");
  else if (strcmp(c->expect, "enabled") == 0) ok = info.degraded_reason == NULL;
  kvjit_context_destroy(ctx);
  fflush(stderr);
  return ok ? 0 : 92;
}

static void test_hostile_environment(void **state) {
  (void)state;
  static const env_case cases[] = {
      {"KVJIT_CACHE_MAX_SIZE", "18014398509481985K", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", "-1", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", "1.5G", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", "0x10", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", "0", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", "5Q", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", " 1G", 1, "max=2147483648"},
      {"KVJIT_CACHE_MAX_SIZE", "10KIB", 0, "max=10240"},
      {"KVJIT_CACHE_MAX_SIZE", "300K", 0, "max=307200"},
      {"KVJIT_CACHE_MAX_SIZE", "", 0, "max=2147483648"},
      {"KVJIT_LOCK_TIMEOUT_MS", "4294967297", 1, "enabled"},
      {"KVJIT_LOCK_TIMEOUT_MS", "-1", 1, "enabled"},
      {"KVJIT_LOCK_TIMEOUT_MS", "1.5", 1, "enabled"},
      {"KVJIT_LOCK_TIMEOUT_MS", "86400001", 1, "enabled"},
      {"KVJIT_LOCK_TIMEOUT_MS", "5000", 0, "enabled"},
      {"KVJIT_LOCK_TIMEOUT_MS", "0", 0, "enabled"},
      {"KVJIT_CACHE_DISABLE", "2", 1, "enabled"},
      {"KVJIT_CACHE_DISABLE", "maybe", 1, "enabled"},
      {"KVJIT_CACHE_DISABLE", "true", 0, "disabled"},
      {"KVJIT_CACHE_DISABLE", "YES", 0, "disabled"},
      {"KVJIT_CACHE_DISABLE", "off", 0, "enabled"},
      {"KVJIT_CACHE_DISABLE", "", 0, "enabled"},
      {"KVJIT_CACHE_ALLOW_SHARED", "sure", 1, "enabled"},
      {"KVJIT_CACHE_ALLOW_SHARED", "on", 0, "enabled"},
      {"KVJIT_LOG", "2", 1, "enabled"},
      {"KVJIT_LOG", "verbose", 1, "enabled"},
  };
  char dir[512], err[600];
  snprintf(dir, sizeof dir, "%s/env-cache", tmpdir);
  snprintf(err, sizeof err, "%s/env.err", tmpdir);
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    for (int log_off = 0; log_off < 2; log_off++) {
      if (log_off && strcmp(cases[i].name, "KVJIT_LOG") == 0) continue;
      pid_t pid = fork();
      assert_true(pid >= 0);
      if (pid == 0) _exit(env_child(&cases[i], dir, err, log_off));
      int status = 0;
      assert_int_equal(waitpid(pid, &status, 0), pid);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail_msg("%s=\"%s\": child status %d", cases[i].name, cases[i].value, status);
      }
      int want = cases[i].bad && !log_off ? 1 : 0;
      char needle[256];
      snprintf(needle, sizeof needle, "%s=\"%s\"", cases[i].name, cases[i].value);
      if (lines_in(err, NULL) != want || lines_in(err, needle) != want || (want && lines_in(err, "default") != 1)) {
        fail_msg("%s=\"%s\" (KVJIT_LOG %s): %d stderr lines, expected %d naming it and the default", cases[i].name,
                 cases[i].value, log_off ? "0" : "unset", lines_in(err, NULL), want);
      }
    }
  }
  /* Nothing was created by any of these read-only contexts. */
  assert_int_not_equal(access(dir, F_OK), 0);
}

static void test_env_helpers(void **state) {
  (void)state;
  setenv("KVJIT_TEST_SIZE", "64KiB", 1);
  assert_int_equal(kvjit_env_size("KVJIT_TEST_SIZE", 1, UINT64_MAX, 7, 0), 65536);
  setenv("KVJIT_TEST_SIZE", "64KiB", 1);
  assert_int_equal(kvjit_env_size("KVJIT_TEST_SIZE", 1, 1000, 7, 0), 7); /* out of range */
  setenv("KVJIT_TEST_SIZE", "", 1);
  assert_null(kvjit_env_text("KVJIT_TEST_SIZE"));
  assert_int_equal(kvjit_env_size("KVJIT_TEST_SIZE", 1, UINT64_MAX, 7, 0), 7);
  unsetenv("KVJIT_TEST_SIZE");
  assert_int_equal(kvjit_env_duration_ms("KVJIT_TEST_SIZE", 0, KVJIT_MAX_DURATION_MS, 60000, 0), 60000);
  setenv("KVJIT_TEST_SIZE", "4294967297", 1);
  assert_int_equal(kvjit_env_duration_ms("KVJIT_TEST_SIZE", 0, KVJIT_MAX_DURATION_MS, 60000, 0), 60000);
  setenv("KVJIT_TEST_SIZE", "250", 1);
  assert_int_equal(kvjit_env_duration_ms("KVJIT_TEST_SIZE", 0, KVJIT_MAX_DURATION_MS, 60000, 0), 250);
  /* issue 24: a range of its own; 0 below a minimum of 1 is refused, never "forever" */
  assert_int_equal(kvjit_env_duration_ms("KVJIT_TEST_SIZE", 1, 200, 60000, 0), 60000);
  setenv("KVJIT_TEST_SIZE", "0", 1);
  assert_int_equal(kvjit_env_duration_ms("KVJIT_TEST_SIZE", 1, 600000, 2000, 0), 2000);
  assert_int_equal(kvjit_env_duration_ms("KVJIT_TEST_SIZE", 0, 600000, 2000, 0), 0);
  setenv("KVJIT_TEST_SIZE", "on", 1);
  assert_int_equal(kvjit_env_bool("KVJIT_TEST_SIZE", 0, 0), 1);
  setenv("KVJIT_TEST_SIZE", "2", 1);
  assert_int_equal(kvjit_env_bool("KVJIT_TEST_SIZE", 0, 0), 0);
  unsetenv("KVJIT_TEST_SIZE");
}

static void test_context_options(void **state) {
  (void)state;
  kvjit_context *ctx = NULL;
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.read_only = 1;
  o.log = 2;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "options->log: 2"));
  o.log = 0;
  o.read_only = 5;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_ERR_INVALID_ARGUMENT);
  o.read_only = 1;
  o.version = KVJIT_CONTEXT_OPTIONS_VERSION + 1;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_ERR_INVALID_ARGUMENT);
  o.version = KVJIT_CONTEXT_OPTIONS_VERSION;
  o.compile_mode = (kvjit_compile_mode)7;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "options->compile_mode: 7"));
  o.compile_mode = KVJIT_COMPILE_NEVER;
  o.remote_read_write = 3;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "options->remote_read_write: 3"));
  o.remote_read_write = KVJIT_FROM_ENV;
  /* A version 1 struct (no read_only field) is still accepted: it gets a normal context. */
  o.version = 1;
  o.disable_cache = 1;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  kvjit_context_destroy(ctx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_bools_counts_durations),
      cmocka_unit_test(test_env_helpers),
      cmocka_unit_test(test_hostile_environment),
      cmocka_unit_test(test_context_options),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
