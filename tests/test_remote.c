/*
 * The remote tier on its own (src/remote.c): a real nginx with WebDAV PUT for the plain path, and
 * tests/remote/fault_server.py for every way a remote can fail. Each fault must cost at most one
 * timeout, be counted, and make the remote back off; refused writes must not stop reads.
 * usage: test_remote FAULT_SERVER.py NGINX_DAV.sh   (exit 77 without nginx or python3)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "cache_remote.h"
#include "entry.h"
#include "kvjit.h"
#include "remote.h"
#include "remote_servers.h"
#include "test_util.h"

static const char *fault_script, *nginx_script;
static remote_servers servers;
static char *nginx_url = servers.nginx_url, *fault_base = servers.fault_base;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A real, well-formed entry for key tests: what the cache would PUT. */
static void make_entry(uint8_t **buf, size_t *len, kvjit_key *key, uint8_t seed) {
  static const char *names[] = {"k"};
  uint8_t payload[3000];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7 + seed);
  kvjit_entry_meta m = {.content = {seed, 0x1234},
                        .target = {90, KVJIT_PAYLOAD_CUBIN, 0, 13, 0},
                        .created = 1700000000,
                        .program = "p.cu",
                        .num_kernels = 1,
                        .kernels = names,
                        .lowered = names};
  kvjit_key_derive(&m.key, &m.target, 1, names, &m.content);
  *key = m.key;
  assert_int_equal(kvjit_entry_encode(buf, len, &m, payload, sizeof payload), KVJIT_OK);
}

static kvjit_remote *open_remote(const char *urls, int rw, unsigned timeout_ms, unsigned backoff_ms) {
  kvjit_remote_config c = {urls, rw, 200, timeout_ms, backoff_ms, "Authorization: Bearer secret-token", 0};
  kvjit_remote *r = NULL;
  assert_int_equal(kvjit_remote_open(&r, &c), KVJIT_OK);
  assert_non_null(r);
  return r;
}

/* kvjit_remote_head() as a yes / no / cannot say (the bytes are not looked at here). */
static int remote_has(kvjit_remote *r, const kvjit_key *key) {
  uint8_t *head = NULL;
  size_t len = 0;
  uint64_t total = 0;
  int got = kvjit_remote_head(r, key, 4096, &head, &len, &total);
  free(head);
  return got;
}

static int setup(void **state) {
  (void)state;
  return remote_servers_start(&servers, fault_script, nginx_script, "remote");
}

static int teardown(void **state) {
  (void)state;
  remote_servers_stop(&servers, nginx_script);
  return 0;
}

static void test_nginx_put_has_get(void **state) {
  (void)state;
  kvjit_remote *r = open_remote(nginx_url, 1, 2000, 1000);
  assert_true(kvjit_remote_writable(r));
  uint8_t *entry;
  size_t len;
  kvjit_key key;
  make_entry(&entry, &len, &key, 1);
  assert_int_equal(remote_has(r, &key), 0);
  uint8_t *got = NULL;
  size_t got_len = 0, from = 9;
  assert_int_equal(kvjit_remote_get(r, &key, &got, &got_len, &from), 0);
  kvjit_remote_put(r, &key, entry, len);
  assert_int_equal(remote_has(r, &key), 1);
  assert_int_equal(kvjit_remote_get(r, &key, &got, &got_len, &from), 1);
  assert_int_equal(from, 0);
  assert_int_equal(got_len, len);
  assert_memory_equal(got, entry, len);
  kvjit_remote_accept(r, from);
  const kvjit_remote_counters *c = kvjit_remote_get_counters(r);
  assert_int_equal(c->writes, 1);
  assert_int_equal(c->hits, 1);
  assert_int_equal(c->misses, 1);
  assert_int_equal(c->errors + c->timeouts + c->skipped, 0);
  assert_int_equal(c->bytes_in, len);
  assert_int_equal(c->bytes_out, len);
  /* The auth header never shows up in what kvjit reports about the remote. */
  assert_null(strstr(kvjit_remote_urls(r), "secret"));
  free(got);
  free(entry);
  kvjit_remote_close(r);
}

/* One request against a failing remote: bounded time, counted, then skipped while backing off. */
static void expect_fault(const char *mode, int timeout, unsigned timeout_ms) {
  char url[256];
  snprintf(url, sizeof url, "%s/%s", fault_base, mode);
  kvjit_remote *r = open_remote(url, 1, timeout_ms, 60000);
  kvjit_key key = {1, 2};
  uint8_t *got = NULL;
  size_t len = 0, from = 0;
  double t0 = now_ms();
  assert_int_equal(kvjit_remote_get(r, &key, &got, &len, &from), 0);
  double took = now_ms() - t0;
  const kvjit_remote_counters *c = kvjit_remote_get_counters(r);
  printf("# %-9s first request %.0f ms (timeout %u ms)\n", mode, took, timeout_ms);
  assert_true(took < timeout_ms + 500);
  assert_int_equal(timeout ? c->timeouts : c->errors, 1);
  /* Backing off: the next requests do not touch the network. */
  t0 = now_ms();
  assert_int_equal(kvjit_remote_get(r, &key, &got, &len, &from), 0);
  assert_int_equal(remote_has(r, &key), -1);
  assert_true(now_ms() - t0 < 50);
  assert_int_equal(c->skipped, 2);
  kvjit_remote_close(r);
}

static void test_faults_cost_one_timeout_then_back_off(void **state) {
  (void)state;
  expect_fault("sleep", 1, 300);
  expect_fault("500", 0, 2000);
  expect_fault("429", 0, 2000);
  expect_fault("huge", 0, 5000);
  /* Down: nothing listens on the port. */
  char down[128];
  snprintf(down, sizeof down, "http://127.0.0.1:1");
  kvjit_remote *r = open_remote(down, 0, 2000, 60000);
  kvjit_key key = {3, 4};
  uint8_t *got;
  size_t len, from;
  double t0 = now_ms();
  assert_int_equal(kvjit_remote_get(r, &key, &got, &len, &from), 0);
  printf("# down      first request %.0f ms\n", now_ms() - t0);
  assert_int_equal(kvjit_remote_get_counters(r)->errors, 1);
  kvjit_remote_close(r);
}

static void test_refused_writes_keep_reads(void **state) {
  (void)state;
  uint8_t *entry;
  size_t len;
  kvjit_key key;
  make_entry(&entry, &len, &key, 2);
  char store[256], refuse[256];
  snprintf(store, sizeof store, "%s/store", fault_base);
  snprintf(refuse, sizeof refuse, "%s/403put", fault_base);
  kvjit_remote *w = open_remote(store, 1, 2000, 60000);
  kvjit_remote_put(w, &key, entry, len);
  assert_int_equal(kvjit_remote_get_counters(w)->writes, 1);
  kvjit_remote_close(w);

  kvjit_remote *r = open_remote(refuse, 1, 2000, 60000);
  kvjit_remote_put(r, &key, entry, len); /* 403 */
  const kvjit_remote_counters *c = kvjit_remote_get_counters(r);
  assert_int_equal(c->writes, 0);
  assert_int_equal(c->errors, 1);
  kvjit_remote_put(r, &key, entry, len); /* skipped: writes back off */
  assert_int_equal(c->skipped, 1);
  uint8_t *got = NULL;
  size_t got_len = 0, from = 0;
  assert_int_equal(kvjit_remote_get(r, &key, &got, &got_len, &from), 1); /* reads go on */
  assert_memory_equal(got, entry, len);
  free(got);
  free(entry);
  kvjit_remote_close(r);
}

/* Lies the remote module cannot see (it returns bytes); the entry checks catch every one. */
static void test_lies_are_caught_by_the_entry_checks(void **state) {
  (void)state;
  uint8_t *a, *b;
  size_t a_len, b_len;
  kvjit_key ka, kb;
  make_entry(&a, &a_len, &ka, 3);
  make_entry(&b, &b_len, &kb, 4);
  char store[256];
  snprintf(store, sizeof store, "%s/store", fault_base);
  kvjit_remote *w = open_remote(store, 1, 2000, 60000);
  kvjit_remote_put(w, &ka, a, a_len);
  kvjit_remote_put(w, &kb, b, b_len);
  kvjit_remote_close(w);
  static const char *const modes[] = {"truncate", "corrupt", "otherkey"};
  for (size_t m = 0; m < 3; m++) {
    char url[256];
    snprintf(url, sizeof url, "%s/%s", fault_base, modes[m]);
    kvjit_remote *r = open_remote(url, 0, 2000, 60000);
    uint8_t *got = NULL;
    size_t len = 0, from = 0;
    /* otherkey serves ka's bytes for kb. */
    int have = kvjit_remote_get(r, &kb, &got, &len, &from);
    if (have) {
      kvjit_entry_view v;
      assert_int_equal(kvjit_entry_parse(&v, got, len, &kb, 1), KVJIT_ERR_CORRUPT);
      kvjit_remote_reject(r, from, kvjit_last_error());
      free(got);
    }
    printf("# %-9s %s\n", modes[m], have ? "bytes returned, rejected by the entry checks" : "transfer failed");
    assert_int_equal(kvjit_remote_get_counters(r)->errors, 1);
    assert_int_equal(kvjit_remote_get_counters(r)->hits, 0);
    kvjit_remote_close(r);
  }
  free(a);
  free(b);
}

static void test_back_off_ends(void **state) {
  (void)state;
  char url[256];
  snprintf(url, sizeof url, "%s/500", fault_base);
  kvjit_remote *r = open_remote(url, 0, 2000, 150);
  kvjit_key key = {5, 6};
  uint8_t *got;
  size_t len, from;
  assert_int_equal(kvjit_remote_get(r, &key, &got, &len, &from), 0);
  assert_int_equal(kvjit_remote_get(r, &key, &got, &len, &from), 0);
  assert_int_equal(kvjit_remote_get_counters(r)->skipped, 1);
  usleep(250000);
  assert_int_equal(kvjit_remote_get(r, &key, &got, &len, &from), 0);
  assert_int_equal(kvjit_remote_get_counters(r)->errors, 2); /* tried again */
  kvjit_remote_close(r);
}

/* issue 24: a server that answers HEAD but not GET holds nothing a load could get; a check asks
 * with the request a load makes (a ranged GET of the head) and says so. */
static void test_head_without_get_is_absent(void **state) {
  (void)state;
  char url[256];
  snprintf(url, sizeof url, "%s/headonly", fault_base);
  kvjit_remote *r = open_remote(url, 0, 2000, 1000);
  kvjit_key key = {7, 8};
  assert_int_equal(remote_has(r, &key), 0);
  kvjit_remote_close(r);
  /* Through the cache: kvjit_cache_find (cache check's question) says "nowhere". */
  char dir[256];
  assert_int_equal(test_dir_make(dir, sizeof dir, "remote-headonly"), 0);
  kvjit_cache_config cc = {.write_dir = dir, .read_dirs = "", .max_bytes = 1 << 20, .lock_timeout_ms = 1000, .log = 0};
  cc.remote = (kvjit_remote_config){url, 0, 500, 2000, 1000, NULL, 0};
  kvjit_cache *c = NULL;
  assert_int_equal(kvjit_cache_open(&c, &cc), KVJIT_OK);
  assert_int_equal(kvjit_cache_find(c, &key), 0);
  kvjit_cache_close(c);
  /* And a real entry on nginx is found (2: on the remote), its head checked against its key. */
  uint8_t *entry;
  size_t len;
  make_entry(&entry, &len, &key, 9);
  kvjit_remote *w = open_remote(nginx_url, 1, 2000, 1000);
  kvjit_remote_put(w, &key, entry, len);
  kvjit_remote_close(w);
  cc.remote.urls = nginx_url;
  assert_int_equal(kvjit_cache_open(&c, &cc), KVJIT_OK);
  assert_int_equal(kvjit_cache_find(c, &key), 2);
  kvjit_key other = key;
  other.low ^= 1;
  assert_int_equal(kvjit_cache_find(c, &other), 0);
  kvjit_cache_close(c);
  free(entry);
  test_dir_remove(dir);
}

/* A context on @p dir (the remote from the environment) probing its remote: the ms it took. */
static double probe_ms(const char *dir, int *reachable) {
  kvjit_context_options o = KVJIT_CONTEXT_OPTIONS_INIT;
  o.cache_dir = dir;
  o.log = 0;
  kvjit_context *ctx = NULL;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK);
  double t0 = now_ms();
  assert_int_equal(kvjit_context_remote(ctx, NULL, NULL, 1, reachable), KVJIT_OK);
  double took = now_ms() - t0;
  kvjit_context_destroy(ctx);
  return took;
}

/* issue 24: every remote duration with 0, negative, huge and garbage values, against a server
 * that accepts and never answers: each is refused for its default, never "no timeout". */
static void test_durations_are_bounded(void **state) {
  (void)state;
  static const char *const values[] = {"0", "-1", "600001", "99999999999999999999", "abc", "1e3", " 5"};
  static const char *const vars[] = {"KVJIT_REMOTE_TIMEOUT_MS", "KVJIT_REMOTE_CONNECT_TIMEOUT_MS",
                                     "KVJIT_REMOTE_BACKOFF_MS"};
  char url[256];
  snprintf(url, sizeof url, "%s/silent", fault_base);
  setenv("KVJIT_REMOTE_CACHE", url, 1);
  char dir[256];
  assert_int_equal(test_dir_make(dir, sizeof dir, "remote-durations"), 0);
  for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
    for (size_t n = 0; n < sizeof vars / sizeof vars[0]; n++) setenv(vars[n], values[v], 1);
    int reachable = 1;
    double took = probe_ms(dir, &reachable);
    printf("# %-22s probe of a silent server: %.0f ms\n", values[v], took);
    assert_int_equal(reachable, 0);
    assert_true(took < 2000 + 1500); /* the default timeout, 2000 ms */
  }
  /* The smallest allowed value is honoured. */
  setenv("KVJIT_REMOTE_TIMEOUT_MS", "1", 1);
  int reachable = 1;
  assert_true(probe_ms(dir, &reachable) < 1000);
  assert_int_equal(reachable, 0);
  for (size_t n = 0; n < sizeof vars / sizeof vars[0]; n++) unsetenv(vars[n]);
  unsetenv("KVJIT_REMOTE_CACHE");
  test_dir_remove(dir);
}

static void test_config(void **state) {
  (void)state;
  kvjit_remote *r = NULL;
  kvjit_remote_config none = {"", 1, 100, 100, 100, NULL, 0};
  assert_int_equal(kvjit_remote_open(&r, &none), KVJIT_OK);
  assert_null(r);
  kvjit_remote_config bad = {"ftp://x file:///etc http://a|zz", 1, 100, 100, 100, NULL, 0};
  assert_int_equal(kvjit_remote_open(&r, &bad), KVJIT_OK);
  assert_null(r); /* nothing usable */
  kvjit_remote_config mixed = {"http://a/x|ro, https://b/y/ http://c|rw", 0, 100, 100, 100, NULL, 0};
  assert_int_equal(kvjit_remote_open(&r, &mixed), KVJIT_OK);
  assert_non_null(r);
  assert_true(kvjit_remote_writable(r)); /* c */
  kvjit_remote_close(r);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_remote FAULT_SERVER.py NGINX_DAV.sh\n");
    return 1;
  }
  fault_script = argv[1];
  nginx_script = argv[2];
  if (!remote_servers_available()) {
    fprintf(stderr, "test_remote: no python3 or nginx: skipped\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config),
      cmocka_unit_test(test_nginx_put_has_get),
      cmocka_unit_test(test_faults_cost_one_timeout_then_back_off),
      cmocka_unit_test(test_refused_writes_keep_reads),
      cmocka_unit_test(test_lies_are_caught_by_the_entry_checks),
      cmocka_unit_test(test_back_off_ends),
      cmocka_unit_test(test_head_without_get_is_absent),
      cmocka_unit_test(test_durations_are_bounded),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
