/*
 * nvrtc suite: real NVRTC compiles of transfer_kv for sm_80, sm_90 and sm_100, through the op's
 * manifest lines, covering every switch of its template: K and V or K only, one layer or tables,
 * int32 and int64 slot ids, PDL on and off, one and two items per group, the in-register and the
 * round-by-round paths, a masked tail, every access width, and each side on device or host.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "kvjit_tools.h"
#include "test_util.h"

/* Each after "transfer_kv arch=N ". */
static const char *const lines[] = {
    /* the hierarchical cache's two copies, 2 KiB rows, per layer and all layers */
    "k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto "
    "split=0 vec=16",
    "k_row_bytes=2048 v_row_bytes=2048 index=int64 src=host dst=device layers=table pdl=auto "
    "split=0 vec=16",
    /* device to device, narrow rows: two items per group at large batches */
    "k_row_bytes=128 v_row_bytes=128 index=int32 src=device dst=device layers=one pdl=off split=0 "
    "vec=16",
    /* K only (MLA), host to host, 8-byte accesses */
    "k_row_bytes=1152 v_row_bytes=0 index=int32 src=host dst=host layers=table pdl=off split=0 "
    "vec=8",
    /* asymmetric rows with a masked tail (196 B at 4 B: 49 vectors) */
    "k_row_bytes=196 v_row_bytes=392 index=int64 src=device dst=host layers=one pdl=off split=0 "
    "vec=16",
    /* wide slices: the round-by-round path */
    "k_row_bytes=16384 v_row_bytes=16384 index=int64 src=device dst=device layers=one pdl=off "
    "split=1 vec=16",
    /* byte and 2-byte accesses */
    "k_row_bytes=99 v_row_bytes=99 index=int64 src=device dst=device layers=one pdl=off split=0 "
    "vec=1",
    "k_row_bytes=258 v_row_bytes=0 index=int32 src=host dst=device layers=one pdl=off split=0 "
    "vec=2",
    /* issue 29: the all-SM plan over the link, few CTAs on the device, conversions on the way
     * (fp8 -> bf16/f32/f16 on a load, f16/bf16/f32 -> fp8 on an offload, per head and per tensor,
     * the round-by-round path converting) */
    "k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto split=0 vec=16 "
    "ctas=all",
    "k_row_bytes=512 v_row_bytes=512 index=int64 src=device dst=device layers=one pdl=off split=0 vec=16 "
    "ctas=few",
    "k_row_bytes=1024 v_row_bytes=1024 index=int64 src=host dst=device layers=table pdl=auto split=0 vec=16 "
    "src_dtype=fp8_e4m3 dst_dtype=bf16 scale_kind=head num_heads=8",
    "k_row_bytes=576 v_row_bytes=0 index=int32 src=host dst=device layers=one pdl=off split=0 vec=16 "
    "src_dtype=fp8_e5m2 dst_dtype=f32 scale_kind=tensor",
    "k_row_bytes=256 v_row_bytes=256 index=int64 src=device dst=device layers=one pdl=off split=0 vec=16 "
    "src_dtype=fp8_e4m3 dst_dtype=f16",
    "k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto split=0 vec=16 "
    "src_dtype=f16 dst_dtype=fp8_e4m3 scale_kind=head num_heads=8",
    "k_row_bytes=4096 v_row_bytes=4096 index=int64 src=device dst=host layers=table pdl=off split=0 vec=16 "
    "src_dtype=f32 dst_dtype=fp8_e5m2 scale_kind=tensor",
    "k_row_bytes=16384 v_row_bytes=16384 index=int64 src=device dst=device layers=one pdl=off split=1 vec=16 "
    "src_dtype=bf16 dst_dtype=fp8_e4m3 scale_kind=tensor",
    /* SGLang's host layouts: page_head (pages of 16, runs of one 256 B head) and page_first_direct
     * (pages of 64 contiguous rows) on either side, one layer and tables, converting too */
    "k_row_bytes=2048 v_row_bytes=2048 index=int64 src=host dst=device layers=table pdl=auto split=0 vec=16 "
    "src_page=16 src_atom=256",
    "k_row_bytes=2048 v_row_bytes=2048 index=int64 src=device dst=host layers=one pdl=auto split=0 vec=16 "
    "dst_page=16 dst_atom=256",
    "k_row_bytes=4096 v_row_bytes=4096 index=int64 src=device dst=host layers=table pdl=auto split=0 vec=16 "
    "dst_page=64",
    "k_row_bytes=2048 v_row_bytes=2048 index=int32 src=device dst=host layers=one pdl=off split=0 vec=16 "
    "src_dtype=bf16 dst_dtype=fp8_e4m3 scale_kind=head num_heads=8 dst_page=16 dst_atom=128",
};
/* The same, with PDL forced on (sm_90 and newer only). */
static const char *const pdl_line =
    "k_row_bytes=512 v_row_bytes=512 index=int64 src=device dst=device layers=table pdl=on "
    "split=0 vec=16";

typedef struct entry_count {
  unsigned transfer, bundles, other;
} entry_count;

/* Kernel entries (their own binary, or an alias into a bundle) and bundles (several kernels). */
static int count_entry(const kvjit_cache_entry_info *e, void *user) {
  entry_count *c = user;
  unsigned kernels = 0;
  for (const char *p = strstr(e->kernels, "kvjit_transfer_kv<"); p; p = strstr(p + 1, "kvjit_transfer_kv<")) kernels++;
  if (strcmp(e->program, "kvjit_transfer_kv.cu") != 0 || kernels == 0) c->other++;
  else if (kernels == 1) c->transfer++;
  else c->bundles++;
  return 0;
}

static void test_every_switch_compiles(void **state) {
  (void)state;
  char dir[256];
  assert_int_equal(test_dir_make(dir, sizeof dir, "transfer"), 0);
  kvjit_context_options opt = KVJIT_CONTEXT_OPTIONS_INIT;
  opt.cache_dir = dir;
  opt.disable_cache = 0;
  opt.log = 0;
  kvjit_context *ctx;
  assert_int_equal(kvjit_context_create(&ctx, &opt), KVJIT_OK);
  static const int archs[] = {80, 90, 100};
  unsigned total = 0;
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    for (size_t i = 0; i <= sizeof lines / sizeof lines[0]; i++) {
      const char *rest = i < sizeof lines / sizeof lines[0] ? lines[i] : pdl_line;
      if (rest == pdl_line && archs[a] < 90) continue;
      char line[512];
      snprintf(line, sizeof line, "transfer_kv arch=%d %s", archs[a], rest);
      unsigned compiled = 0, cached = 0;
      kvjit_status st = kvjit_prewarm_line(ctx, line, &compiled, &cached);
      if (st != KVJIT_OK) fail_msg("%s: %s: %s", line, kvjit_status_name(st), kvjit_last_error());
      assert_true(compiled >= 1);
      total += compiled;
      /* Again: all from the cache. */
      unsigned again = 0, hit = 0;
      assert_int_equal(kvjit_prewarm_line(ctx, line, &again, &hit), KVJIT_OK);
      assert_int_equal(again, 0);
      assert_int_equal(hit, compiled);
    }
  }
  /* PDL forced on before sm_90 is refused before any compile. */
  char line[512];
  snprintf(line, sizeof line, "transfer_kv arch=80 %s", pdl_line);
  assert_int_equal(kvjit_prewarm_line(ctx, line, NULL, NULL), KVJIT_ERR_UNSUPPORTED);
  entry_count c = {0, 0, 0};
  assert_int_equal(kvjit_cache_list(ctx, 0, 0, count_entry, &c, NULL), KVJIT_OK);
  assert_int_equal(c.transfer, total);
  assert_int_equal(c.other, 0);
  /* A variant of several kernels built them as one program. */
  assert_true(c.bundles >= 1);
  printf("transfer_kv: %u kernels compiled for sm_80, sm_90, sm_100, in %u bundles and alone\n", total, c.bundles);
  kvjit_cache_clear(ctx, NULL);
  kvjit_context_destroy(ctx);
  assert_int_equal(test_dir_remove(dir), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_switch_compiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
