/*
 * `kvjit prewarm --op transfer_kv --layout PRESET` builds the kernels a SGLang hicache server
 * launches: for each of SGLang's host layouts (layer_first, page_first, page_first_direct,
 * page_head), each direction across the host link, one layer or every layer, several page sizes,
 * model shapes and layer counts, the line the CLI prints keys exactly as the call does. The call's
 * side is its own validation (kvjit_transfer_kv_validate(), what kvjit_transfer_kv() runs) over
 * arguments a server passes: one layer's view of the host pool as tests/host_layouts.c writes it
 * from SGLang's shapes (not the CLI's code), that layer's address, the device pool's flat rows.
 *
 * usage: test_transfer_presets KVJIT_BINARY
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "host_layouts.h"
#include "kvjit.h"
#include "kvjit_tools.h"
#include "registry.h"
#include "test_util.h"
#include "transfer_kv_op.h"

static const char *kvjit_binary;
static char cache_dir[256];

typedef struct shape {
  int heads, head_dim, v_head_dim, element_bytes; /* one rank's */
  const char *dtype;                              /* --dtype */
} shape;

/* The line `kvjit prewarm -n` prints for one preset and direction (exactly one expected). */
static void cli_line(const shape *s, const char *preset, int page, int src_host, int dst_host, int table,
                     char *out, size_t capacity) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' prewarm -n --arch sm_90 --op transfer_kv --kv-heads %d --head-dim %d --v-head-dim %d --dtype %s "
           "--tp 1 --index int64 --split auto --layout %s --block-size %d --src %s --dst %s --layers %s "
           "--cache-dir '%s' 2>&1",
           kvjit_binary, s->heads, s->head_dim, s->v_head_dim, s->dtype, preset, page, src_host ? "host" : "device",
           dst_host ? "host" : "device", table ? "table" : "one", cache_dir);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[1024];
  int lines = 0;
  out[0] = '\0';
  while (fgets(line, sizeof line, p) != NULL) {
    if (line[0] == '#') continue;
    char *note = strstr(line, "  #");
    if (note != NULL) *note = '\0';
    line[strcspn(line, "\n")] = '\0';
    snprintf(out, capacity, "%s", line);
    lines++;
  }
  int rc = pclose(p);
  if (rc != 0 || lines != 1) fail_msg("%s\n-> exit %d, %d lines (last: %s)", cmd, rc, lines, out);
}

/* The request the call validates for the same copy with a @p layers-layer host pool. */
static kvjit_status runtime_values(const shape *s, kvjit_host_layout_kind kind, int page, int64_t layers,
                                   int src_host, int dst_host, int table, int64_t *values) {
  const int64_t k_row = (int64_t)s->heads * s->head_dim * s->element_bytes;
  const int64_t v_row = (int64_t)s->heads * s->v_head_dim * s->element_bytes;
  kvjit_host_layout hk = {kind, s->heads, (int64_t)s->head_dim * s->element_bytes, page, layers, 4 * (int64_t)page};
  kvjit_host_layout hv = hk;
  if (v_row != 0) hv.head_bytes = (int64_t)s->v_head_dim * s->element_bytes; /* K only: V is never used */
  kvjit_layout k_view, v_view;
  kvjit_host_layout_view(&hk, &k_view);
  kvjit_host_layout_view(&hv, &v_view);
  /* Addresses as a server has them: the host pool's K and V tensors (SGLang's [0] and [1]), the
   * copy of layer 1 (one layer) or tables of every layer's address; the device pool's rows. */
  const uint64_t host_k = UINT64_C(1) << 40, host_v = host_k + (uint64_t)kvjit_host_layout_bytes(&hk);
  const uint64_t dev_k = UINT64_C(1) << 41, dev_v = dev_k + (UINT64_C(1) << 32), table_at = UINT64_C(1) << 42;
  const uint64_t k_at = host_k + (uint64_t)kvjit_host_layout_offset(&hk, 1, 0, 0);
  const uint64_t v_at = host_v + (uint64_t)kvjit_host_layout_offset(&hv, 1, 0, 0);
  kvjit_transfer_kv_args a = KVJIT_TRANSFER_KV_ARGS_INIT;
  a.src = src_host ? KVJIT_LOCATION_HOST : KVJIT_LOCATION_DEVICE;
  a.dst = dst_host ? KVJIT_LOCATION_HOST : KVJIT_LOCATION_DEVICE;
  a.src_k = (const void *)(uintptr_t)(table ? table_at : src_host ? k_at : dev_k);
  a.src_v = v_row ? (const void *)(uintptr_t)(table ? table_at + 4096 : src_host ? v_at : dev_v) : NULL;
  a.dst_k = (void *)(uintptr_t)(table ? table_at + 8192 : dst_host ? k_at : dev_k);
  a.dst_v = v_row ? (void *)(uintptr_t)(table ? table_at + 12288 : dst_host ? v_at : dev_v) : NULL;
  a.num_layers = table ? layers : 0;
  a.src_indices = a.dst_indices = (const void *)(uintptr_t)(UINT64_C(1) << 43);
  a.index_type = KVJIT_INDEX_INT64;
  a.batch = 64;
  a.k_row_bytes = k_row;
  a.v_row_bytes = v_row;
  a.src_num_slots = a.dst_num_slots = hk.slots;
  a.src_k_layout = src_host ? &k_view : NULL;
  a.src_v_layout = src_host && v_row ? &v_view : NULL;
  a.dst_k_layout = dst_host ? &k_view : NULL;
  a.dst_v_layout = dst_host && v_row ? &v_view : NULL;
  kvjit_transfer_kv_request r;
  kvjit_status st = kvjit_transfer_kv_validate(&a, &r);
  if (st != KVJIT_OK) return st;
  r.values[TRANSFER_F_ARCH] = 90;
  memcpy(values, r.values, sizeof r.values);
  return KVJIT_OK;
}

static void test_presets_key_as_the_call(void **state) {
  (void)state;
  static const shape shapes[] = {
      {8, 128, 128, 2, "bf16"}, /* llama-3.1-8b, tp 1 */
      {1, 128, 128, 2, "bf16"}, /* tp 8: one head per rank */
      {4, 64, 64, 1, "fp8"},    /* an fp8 host pool */
      {1, 576, 0, 2, "bf16"},   /* MLA: one latent head, K only */
  };
  static const struct {
    const char *name;
    kvjit_host_layout_kind kind;
  } presets[] = {{"layer_first", KVJIT_HOST_LAYER_FIRST},
                 {"page_first", KVJIT_HOST_PAGE_FIRST},
                 {"page_first_direct", KVJIT_HOST_PAGE_FIRST_DIRECT},
                 {"page_head", KVJIT_HOST_PAGE_HEAD}};
  static const int pages[] = {16, 64};
  static const int64_t layer_counts[] = {2, 3, 32, 61, 126};
  const kvjit_op *op = kvjit_op_of(kvjit_op_find("transfer_kv"));
  assert_non_null(op);
  size_t compared = 0;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++)
      for (size_t g = 0; g < sizeof pages / sizeof pages[0]; g++)
        for (int dir = 0; dir < 2; dir++)
          for (int table = 0; table < 2; table++) {
            char line[1024];
            cli_line(&shapes[s], presets[p].name, pages[g], dir == 1, dir == 0, table, line, sizeof line);
            kvjit_variant v;
            if (kvjit_variant_parse(&v, line) != KVJIT_OK) fail_msg("\"%s\": %s", line, kvjit_last_error());
            for (size_t l = 0; l < sizeof layer_counts / sizeof layer_counts[0]; l++) {
              int64_t want[KVJIT_VARIANT_MAX_FIELDS] = {0};
              kvjit_status st = runtime_values(&shapes[s], presets[p].kind, pages[g], layer_counts[l], dir == 1,
                                               dir == 0, table, want);
              if (st != KVJIT_OK) fail_msg("%s, %lld layers: the call refuses: %s", line,
                                           (long long)layer_counts[l], kvjit_last_error());
              for (int cls = 0; cls < op->info.num_classes; cls++) {
                kvjit_fast_key a = op->key(want, cls), b = op->key(v.values, cls);
                if (memcmp(&a, &b, sizeof a) != 0) {
                  kvjit_variant w = v;
                  memcpy(w.values, want, sizeof w.values);
                  char call_line[1024];
                  kvjit_variant_format(&w, call_line, sizeof call_line);
                  fail_msg("%s %s page %d, %lld layers, class %d:\n  prewarm: %s\n  the call: %s", shapes[s].dtype,
                           presets[p].name, pages[g], (long long)layer_counts[l], cls, line, call_line);
                }
                compared++;
              }
            }
          }
  printf("# %zu keys of the presets compared with the call's\n", compared);
}

/* The presets are transfer_kv's; the store's are refused for it and its presets for the store. */
static void test_presets_belong_to_their_op(void **state) {
  (void)state;
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' prewarm -n --arch sm_90 --op transfer_kv --model llama-3.1-8b --layout vllm-hnd --cache-dir '%s' "
           ">/dev/null 2>&1",
           kvjit_binary, cache_dir);
  assert_int_equal(WEXITSTATUS(system(cmd)), 2);
  snprintf(cmd, sizeof cmd,
           "'%s' prewarm -n --arch sm_90 --model llama-3.1-8b --layout page_head --cache-dir '%s' >/dev/null 2>&1",
           kvjit_binary, cache_dir);
  assert_int_equal(WEXITSTATUS(system(cmd)), 2);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s KVJIT_BINARY\n", argv[0]);
    return 2;
  }
  kvjit_binary = argv[1];
  if (test_dir_make(cache_dir, sizeof cache_dir, "presets") != 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_presets_key_as_the_call),
      cmocka_unit_test(test_presets_belong_to_their_op),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  test_dir_remove(cache_dir);
  return failed;
}
