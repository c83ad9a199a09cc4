/* kvjit_*_init(ptr, version): every versioned struct filled with its _INIT defaults, a binding's
 * older version with exactly that version's bytes, bad calls refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "kvjit_tools.h"

/* The struct as _INIT makes it equals what its init call makes, byte for byte (padding zero on
 * both sides). */
#define SAME_AS_INIT(type, init_macro, init_fn, version_macro)                                   \
  do {                                                                                           \
    static const type want = init_macro; /* static: its padding is zero */                        \
    type got;                                                                                    \
    memset(&got, 0, sizeof got);                                                                 \
    assert_int_equal(init_fn(&got, version_macro), KVJIT_OK);                                    \
    assert_memory_equal(&got, &want, sizeof want);                                               \
    assert_int_equal(init_fn(NULL, version_macro), KVJIT_ERR_INVALID_ARGUMENT);                  \
    assert_int_equal(init_fn(&got, 0), KVJIT_ERR_INVALID_ARGUMENT);                              \
    assert_non_null(strstr(kvjit_last_error(), #type));                                          \
    assert_int_equal(init_fn(&got, (version_macro) + 1), KVJIT_ERR_INVALID_ARGUMENT);            \
  } while (0)

static void test_every_struct_matches_its_init_macro(void **state) {
  (void)state;
  SAME_AS_INIT(kvjit_context_options, KVJIT_CONTEXT_OPTIONS_INIT, kvjit_context_options_init,
               KVJIT_CONTEXT_OPTIONS_VERSION);
  SAME_AS_INIT(kvjit_program_desc, KVJIT_PROGRAM_DESC_INIT, kvjit_program_desc_init, KVJIT_PROGRAM_DESC_VERSION);
  SAME_AS_INIT(kvjit_launch_config, KVJIT_LAUNCH_CONFIG_INIT, kvjit_launch_config_init, KVJIT_LAUNCH_CONFIG_VERSION);
  SAME_AS_INIT(kvjit_store_kv_args, KVJIT_STORE_KV_ARGS_INIT, kvjit_store_kv_args_init, KVJIT_STORE_KV_ARGS_VERSION);
  SAME_AS_INIT(kvjit_transfer_kv_args, KVJIT_TRANSFER_KV_ARGS_INIT, kvjit_transfer_kv_args_init,
               KVJIT_TRANSFER_KV_ARGS_VERSION);
  SAME_AS_INIT(kvjit_stats, KVJIT_STATS_INIT, kvjit_stats_init, KVJIT_STATS_VERSION);
  SAME_AS_INIT(kvjit_op_stats, KVJIT_OP_STATS_INIT, kvjit_op_stats_init, KVJIT_OP_STATS_VERSION);
  SAME_AS_INIT(kvjit_layout, KVJIT_LAYOUT_INIT, kvjit_layout_init, KVJIT_LAYOUT_VERSION);
}

/* A caller of an older version has a smaller struct: not a byte past it is written. */
static void test_an_older_version_writes_only_its_fields(void **state) {
  (void)state;
  kvjit_context_options o;
  memset(&o, 0x5a, sizeof o);
  assert_int_equal(kvjit_context_options_init(&o, 1), KVJIT_OK);
  assert_int_equal(o.version, 1);
  assert_int_equal(o.allow_shared_dirs, KVJIT_FROM_ENV);
  const unsigned char *tail = (const unsigned char *)&o + offsetof(kvjit_context_options, read_only);
  for (size_t i = 0; i < sizeof o - offsetof(kvjit_context_options, read_only); i++) assert_int_equal(tail[i], 0x5a);
  kvjit_context *ctx = NULL;
  o.cache_dir = NULL;
  o.disable_cache = 1;
  assert_int_equal(kvjit_context_create(&ctx, &o), KVJIT_OK); /* a version 1 struct is accepted */
  kvjit_context_destroy(ctx);

  kvjit_stats s;
  memset(&s, 0x5a, sizeof s);
  assert_int_equal(kvjit_stats_init(&s, 1), KVJIT_OK);
  assert_int_equal(s.version, 1);
  assert_int_equal(s.unpublished_compiles, 0);
  assert_int_equal(((const unsigned char *)&s)[offsetof(kvjit_stats, not_cached)], 0x5a);

  kvjit_store_kv_args a;
  memset(&a, 0x5a, sizeof a);
  assert_int_equal(kvjit_store_kv_args_init(&a, 1), KVJIT_OK);
  assert_int_equal(a.version, 1);
  assert_int_equal(((const unsigned char *)&a)[offsetof(kvjit_store_kv_args, dtype)], 0x5a);
  memset(&a, 0x5a, sizeof a);
  assert_int_equal(kvjit_store_kv_args_init(&a, 2), KVJIT_OK);
  assert_int_equal(a.version, 2);
  assert_int_equal(a.num_heads, 0);
  assert_int_equal(((const unsigned char *)&a)[offsetof(kvjit_store_kv_args, k_cache_layout)], 0x5a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_struct_matches_its_init_macro),
      cmocka_unit_test(test_an_older_version_writes_only_its_fields),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
