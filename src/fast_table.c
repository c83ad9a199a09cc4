/* The context's lock-free fast table: exact 128-bit keys -> loaded kernels, for op hot paths. */
#include "fast_table.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "status.h"

#define FAST_SLOTS 4096u /* power of two */

typedef struct fast_entry {
  kvjit_fast_key key;
  const kvjit_kernel *kernel;
} fast_entry;

struct kvjit_fast_table {
  _Atomic(fast_entry *) slots[FAST_SLOTS];
};

kvjit_status kvjit_fast_table_create(kvjit_fast_table **out) {
  *out = calloc(1, sizeof **out);
  return *out ? KVJIT_OK : kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "fast table: out of memory");
}

void kvjit_fast_table_destroy(kvjit_fast_table *t) {
  if (t == NULL) return;
  for (size_t i = 0; i < FAST_SLOTS; i++) free(atomic_load(&t->slots[i]));
  free(t);
}

static size_t fast_slot(kvjit_fast_key key) {
  uint64_t h = key.a * 0x9E3779B97F4A7C15ull ^ (key.b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
  return (size_t)(h >> 32) & (FAST_SLOTS - 1);
}

const kvjit_kernel *kvjit_fast_table_lookup(const kvjit_fast_table *t, kvjit_fast_key key) {
  size_t i = fast_slot(key);
  for (size_t n = 0; n < FAST_SLOTS; n++, i = (i + 1) & (FAST_SLOTS - 1)) {
    const fast_entry *e = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (e == NULL) return NULL;
    if (e->key.a == key.a && e->key.b == key.b) return e->kernel;
  }
  return NULL;
}

kvjit_status kvjit_fast_table_insert(kvjit_fast_table *t, kvjit_fast_key key, const kvjit_kernel *kernel) {
  fast_entry *fresh = malloc(sizeof *fresh);
  if (fresh == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "fast table: out of memory");
  fresh->key = key;
  fresh->kernel = kernel;
  size_t i = fast_slot(key);
  for (size_t n = 0; n < FAST_SLOTS; n++, i = (i + 1) & (FAST_SLOTS - 1)) {
    fast_entry *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&t->slots[i], &expected, fresh, memory_order_release,
                                                memory_order_acquire)) {
      return KVJIT_OK;
    }
    if (expected->key.a == key.a && expected->key.b == key.b) {
      free(fresh);
      return KVJIT_OK;
    }
  }
  free(fresh);
  return kvjit_fail(KVJIT_ERR_BUSY, "fast table full (%u variants)", FAST_SLOTS);
}

void kvjit_fast_table_foreach(const kvjit_fast_table *t, void (*visit)(const kvjit_kernel *kernel, void *user),
                              void *user) {
  for (size_t i = 0; i < FAST_SLOTS; i++) {
    const fast_entry *e = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (e) visit(e->kernel, user);
  }
}

