/*
 * Cache layouts (src/op/layout.c): the layouts serving runtimes use, each put in canonical form
 * with every byte's address checked against the layout's own definition; bad fields refused
 * naming the field and its value; views that would share a byte refused, K and V of one call
 * included; the static part's key word; kvjit_layout_init's versions. No GPU.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kvjit.h"
#include "layout.h"
#include "layout_cuh.h"
#include "test_layouts.h"

/* Every byte of every slot: the canonical view (host) and kernel_src/layout.cuh (the kernels'
 * arithmetic) against the layout's definition. */
static void check_offsets(const kvjit_layout *l, int64_t row, const kvjit_view *v, int64_t slots) {
  const long long strides[5] = {v->page_stride, v->slot_stride, v->strides[0], v->strides[1], v->strides[2]};
  for (int64_t s = 0; s < slots; s++) {
    for (int64_t b = 0; b < row; b++) {
      int64_t want = kvjit_test_layout_offset(l, row, s, b), got = kvjit_view_offset(v, s, b);
      int64_t cuh = kvjit_test_cuh_offset(s, b, v->page_size, v->atom, v->num_dims, v->extents[1], v->extents[2], strides);
      if (want != got || want != cuh) {
        fail_msg("slot %lld byte %lld: view %lld, layout.cuh %lld, layout %lld", (long long)s, (long long)b,
                 (long long)got, (long long)cuh, (long long)want);
      }
    }
  }
}

/* Every named layout: canonical form as expected, addresses as defined, no self-overlap, K and V apart. */
static void test_named_layouts(void **state) {
  (void)state;
  for (size_t i = 0; i < kvjit_test_num_layouts; i++) {
    kvjit_test_layout t;
    kvjit_test_layout_make(&t, &kvjit_test_layouts[i]);
    const int64_t slots = 4 * t.page_size; /* whole pages: separate caches then touch end to start */
    kvjit_view kv, vv;
    if (kvjit_view_resolve(&kv, "k_cache_layout", &t.k, t.k_row, t.element_bytes) != KVJIT_OK ||
        (t.v_row && kvjit_view_resolve(&vv, "v_cache_layout", &t.v, t.v_row, t.element_bytes) != KVJIT_OK)) {
      fail_msg("%s: %s", t.name, kvjit_last_error());
    }
    if (kvjit_view_is_flat(&kv) != t.k_flat) fail_msg("%s: K flat %d, expected %d", t.name, kvjit_view_is_flat(&kv), t.k_flat);
    if (kv.num_dims != t.k_dims || kv.atom != t.k_atom) {
      fail_msg("%s: K has %d dims over %lld-byte atoms, expected %d over %lld", t.name, kv.num_dims, (long long)kv.atom,
               t.k_dims, (long long)t.k_atom);
    }
    check_offsets(&t.k, t.k_row, &kv, slots);
    assert_int_equal(kvjit_view_check_slots(&kv, "k", slots), KVJIT_OK);
    if (t.v_row) {
      check_offsets(&t.v, t.v_row, &vv, slots);
      assert_int_equal(kvjit_view_check_slots(&vv, "v", slots), KVJIT_OK);
      /* Separate caches follow each other; views of one cache start v_base apart. */
      const int64_t pages = (slots + t.page_size - 1) / t.page_size;
      const uint64_t v_at = 4096 + (uint64_t)(t.one_cache ? t.v_base : pages * t.page_bytes);
      if (kvjit_view_check_disjoint(&kv, "k", 4096, &vv, "v", v_at, slots) != KVJIT_OK) {
        fail_msg("%s: %s", t.name, kvjit_last_error());
      }
      /* One element closer, V lands on K: refused. */
      if (kvjit_view_check_disjoint(&kv, "k", 4096, &vv, "v", v_at - t.element_bytes, slots) == KVJIT_OK) {
        fail_msg("%s: V one byte onto K not refused", t.name);
      }
    }
    /* The static part round-trips through the variant fields. */
    int64_t f[KVJIT_VIEW_F_COUNT];
    kvjit_view_static_values(&kv, f);
    kvjit_view back;
    assert_int_equal(kvjit_view_from_values(&back, f, t.k_row, "k_"), KVJIT_OK);
    assert_int_equal(back.page_size, kv.page_size);
    assert_int_equal(back.atom, kv.atom);
    assert_int_equal(back.num_dims, kv.num_dims);
    for (int d = 0; d < kv.num_dims; d++) assert_int_equal(back.extents[d], kv.extents[d]);
    assert_int_equal(kvjit_view_values_word(f) == 0, kvjit_view_is_flat(&kv));
  }
}

typedef struct bad_case {
  const char *what;
  void (*spoil)(kvjit_layout *l);
  kvjit_status status;
  const char *needle;
} bad_case;

static void v0(kvjit_layout *l) { l->version = 0; }
static void v2(kvjit_layout *l) { l->version = 2; }
static void elem3(kvjit_layout *l) { l->element_bytes = 3; }
static void elem32(kvjit_layout *l) { l->element_bytes = 32; }
static void dims0(kvjit_layout *l) { l->num_row_dims = 0; }
static void dims4(kvjit_layout *l) { l->num_row_dims = 4; }
static void ext0(kvjit_layout *l) { l->row_extents[1] = 0; }
static void ext_wrong(kvjit_layout *l) { l->row_extents[1] = 32; }
static void neg_stride(kvjit_layout *l) { l->row_strides[0] = -2; }
static void neg_page(kvjit_layout *l) { l->page_size = -1; }
static void neg_slot(kvjit_layout *l) { l->slot_stride = -128; }
static void huge_page(kvjit_layout *l) { l->page_size = 65536; l->page_stride = (int64_t)65536 * 4 * 128 * 4; }

/* HND bf16, 4 heads of 64, 16 slots per page: row 512 B. */
static void hnd(kvjit_layout *l) {
  kvjit_layout init = KVJIT_LAYOUT_INIT;
  *l = init;
  l->page_size = 16;
  l->page_stride = 4 * 16 * 128;
  l->slot_stride = 128;
  l->element_bytes = 2;
  l->num_row_dims = 2;
  l->row_extents[0] = 4;
  l->row_extents[1] = 64;
  l->row_strides[0] = 16 * 128;
  l->row_strides[1] = 2;
}

static void test_bad_fields(void **state) {
  (void)state;
  static const bad_case cases[] = {
      {"version 0", v0, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->version: must be 1..KVJIT_LAYOUT_VERSION (1), got 0"},
      {"version 2", v2, KVJIT_ERR_INVALID_ARGUMENT, "got 2"},
      {"element 3", elem3, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->element_bytes: must be 1, 2, 4, 8 or 16, got 3"},
      {"element 32", elem32, KVJIT_ERR_INVALID_ARGUMENT, "got 32"},
      {"no dims", dims0, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->num_row_dims: must be 1..3, got 0"},
      {"4 dims", dims4, KVJIT_ERR_INVALID_ARGUMENT, "got 4"},
      {"extent 0", ext0, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->row_extents[1]: must be >= 1, got 0"},
      {"extents", ext_wrong, KVJIT_ERR_INVALID_ARGUMENT, "4 x 32 elements of 2 bytes do not make the row's 512 bytes"},
      {"negative stride", neg_stride, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->row_strides[0]: must be >= 0"},
      {"negative page", neg_page, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->page_size: must be >= 0, got -1"},
      {"negative slot", neg_slot, KVJIT_ERR_INVALID_ARGUMENT, "k_cache_layout->slot_stride: must be >= 0, got -128"},
      {"page too big", huge_page, KVJIT_ERR_UNSUPPORTED, "k_cache_layout->page_size: at most 65535"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kvjit_layout l;
    hnd(&l);
    kvjit_view v;
    assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 2), KVJIT_OK);
    cases[i].spoil(&l);
    kvjit_status st = kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0);
    if (st != cases[i].status || strstr(kvjit_last_error(), cases[i].needle) == NULL) {
      fail_msg("%s: %s \"%s\", expected %s naming \"%s\"", cases[i].what, kvjit_status_name(st), kvjit_last_error(),
               kvjit_status_name(cases[i].status), cases[i].needle);
    }
  }
  /* The element the op needs (an fp8 cache: 1). */
  kvjit_layout l;
  hnd(&l);
  kvjit_view v;
  assert_int_equal(kvjit_view_resolve(&v, "v_cache_layout", &l, 512, 1), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "v_cache_layout->element_bytes: must be 1 (the cache's element), got 2"));
}

/* Strides that make two elements (or two slots) share a byte. */
static void test_self_overlap(void **state) {
  (void)state;
  kvjit_layout l;
  kvjit_view v;
  /* Heads 64 bytes apart, each 128 bytes wide. */
  hnd(&l);
  l.page_size = 0;
  l.slot_stride = 512;
  l.row_strides[0] = 64;
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", 10), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "two elements would share a byte"));
  /* Slots of a page overlapping the next head. */
  hnd(&l);
  l.row_strides[0] = 8 * 128;
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", 64), KVJIT_ERR_INVALID_ARGUMENT);
  /* ... fine while a page holds only 8 slots' worth (every slot id < 8: one page, 8 positions). */
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", 8), KVJIT_OK);
  /* Pages closer than a page's span. */
  hnd(&l);
  l.page_stride = 4 * 16 * 128 - 2;
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", 17), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", 16), KVJIT_OK);
  /* A stride of 0 over more than one element. */
  hnd(&l);
  l.page_size = 0;
  l.slot_stride = 0;
  l.row_strides[1] = 0;
  l.row_strides[0] = 0;
  l.row_extents[0] = 4;
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0), KVJIT_OK); /* 0: packed */
  assert_int_equal(v.num_dims, 0);
  assert_int_equal(v.slot_stride, 512);
  /* Offsets past 64 bits. */
  hnd(&l);
  l.page_stride = INT64_MAX / 4;
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", 16 * 8), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "past a 64-bit offset"));
  /* Every slot id an int64 holds: refused, without overflowing on the way. */
  hnd(&l);
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  assert_int_equal(kvjit_view_check_slots(&v, "k_cache_layout", INT64_MAX), KVJIT_ERR_INVALID_ARGUMENT);
  kvjit_view other = v;
  assert_int_equal(kvjit_view_check_disjoint(&v, "k", 0, &other, "v", 1ull << 40, INT64_MAX), KVJIT_ERR_INVALID_ARGUMENT);
}

/* K and V of one call: apart as intervals, interleaved per head (FlashAttention), or one on the other. */
static void test_pair_overlap(void **state) {
  (void)state;
  kvjit_layout l;
  kvjit_view k, v;
  hnd(&l);
  assert_int_equal(kvjit_view_resolve(&k, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  v = k;
  const int64_t span = 4 * 16 * 128 * 3; /* 3 pages */
  assert_int_equal(kvjit_view_check_disjoint(&k, "k_cache", 1 << 20, &v, "v_cache", (1 << 20) + span, 48), KVJIT_OK);
  assert_int_equal(kvjit_view_check_disjoint(&k, "k_cache", 1 << 20, &v, "v_cache", (1 << 20) - span, 48), KVJIT_OK);
  assert_int_equal(kvjit_view_check_disjoint(&k, "k_cache", 1 << 20, &v, "v_cache", (1 << 20) + span - 2, 48),
                   KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "k_cache, v_cache: the two views may share bytes"));
  assert_int_equal(kvjit_view_check_disjoint(&k, "k_cache", 1 << 20, &v, "v_cache", 1 << 20, 48),
                   KVJIT_ERR_INVALID_ARGUMENT);
  /* Two views of one cache, each head's slots holding a K then a V run (the packed layout). */
  hnd(&l);
  l.slot_stride = 256;
  l.page_stride = 4 * 16 * 256;
  l.row_strides[0] = 16 * 256;
  assert_int_equal(kvjit_view_resolve(&k, "k_cache_layout", &l, 512, 0), KVJIT_OK);
  v = k;
  for (int64_t d = -600; d <= 600; d += 2) {
    kvjit_status st = kvjit_view_check_disjoint(&k, "k_cache", 1 << 20, &v, "v_cache", (uint64_t)((1 << 20) + d), 40);
    /* Apart exactly when V's runs sit in the other half of each 256-byte slot. */
    const int64_t m = ((d % 256) + 256) % 256;
    kvjit_status want = m == 128 ? KVJIT_OK : KVJIT_ERR_INVALID_ARGUMENT;
    if (st != want) fail_msg("V at K%+lld: %s, expected %s", (long long)d, kvjit_status_name(st), kvjit_status_name(want));
  }
}

static void test_layout_init(void **state) {
  (void)state;
  kvjit_layout l;
  memset(&l, 0xab, sizeof l);
  assert_int_equal(kvjit_layout_init(&l, KVJIT_LAYOUT_VERSION), KVJIT_OK);
  const kvjit_layout want = KVJIT_LAYOUT_INIT;
  assert_int_equal(l.version, KVJIT_LAYOUT_VERSION);
  assert_int_equal(l.page_size, 0);
  assert_int_equal(l.page_stride, 0);
  assert_int_equal(l.slot_stride, 0);
  assert_int_equal(l.element_bytes, 1);
  assert_int_equal(l.num_row_dims, 1);
  for (int d = 0; d < KVJIT_LAYOUT_MAX_ROW_DIMS; d++) {
    assert_int_equal(l.row_extents[d], 0);
    assert_int_equal(l.row_strides[d], 0);
  }
  assert_int_equal(kvjit_layout_init(&l, 0), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_layout_init(&l, KVJIT_LAYOUT_VERSION + 1), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_layout_init(NULL, 1), KVJIT_ERR_INVALID_ARGUMENT);
  /* The default layout is the flat row. */
  kvjit_view v;
  assert_int_equal(kvjit_view_resolve(&v, "k_cache_layout", &want, 576, 0), KVJIT_OK);
  assert_true(kvjit_view_is_flat(&v));
  assert_int_equal(v.slot_stride, 576);
  assert_int_equal(v.atom, 576);
}

/* Manifest values that do not describe a view of the row. */
static void test_bad_values(void **state) {
  (void)state;
  kvjit_view v;
  const int64_t page1[4] = {1, 0, 0, 0}, atom_big[4] = {16, 512, 0, 0}, dim1_alone[4] = {16, 16, 0, 4},
                dims_off[4] = {0, 16, 3, 0}, fine[4] = {16, 16, 2, 4};
  assert_int_equal(kvjit_view_from_values(&v, page1, 512, "k_"), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "k_page: must be 0 (flat) or 2..65535, got 1"));
  assert_int_equal(kvjit_view_from_values(&v, atom_big, 512, "v_"), KVJIT_ERR_INVALID_ARGUMENT);
  assert_non_null(strstr(kvjit_last_error(), "v_atom: must divide the row's 512 bytes and be less, got 512"));
  assert_int_equal(kvjit_view_from_values(&v, dim1_alone, 512, "k_"), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_view_from_values(&v, dims_off, 512, "k_"), KVJIT_ERR_INVALID_ARGUMENT);
  assert_int_equal(kvjit_view_from_values(&v, fine, 512, "k_"), KVJIT_OK);
  assert_int_equal(v.num_dims, 3);
  assert_int_equal(v.extents[2], 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_named_layouts), cmocka_unit_test(test_bad_fields), cmocka_unit_test(test_self_overlap),
      cmocka_unit_test(test_pair_overlap),  cmocka_unit_test(test_layout_init), cmocka_unit_test(test_bad_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
