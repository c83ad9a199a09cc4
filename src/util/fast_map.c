/* Lock-free, growing exact-key tables (fast_map.h). */
#include "fast_map.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "status.h"

#define INITIAL_SLOTS 64u
#define DEFAULT_MAX_SLOTS (UINT64_C(1) << 20)

/* Immutable once published: arrays only ever point at nodes, and nodes live as long as the map. */
typedef struct fast_node {
  kvjit_fast_key key;
  void *value;
  struct fast_node *next_overflow; /* the locked list */
} fast_node;

typedef struct fast_array {
  uint64_t mask;
  struct fast_array *older; /* arrays it replaced, freed with the map */
  _Atomic(fast_node *) slots[];
} fast_array;

struct kvjit_fast_map {
  _Atomic(fast_array *) current;
  atomic_uint_fast64_t overflow_count; /* nodes on the list; a lookup that misses checks it */
  pthread_mutex_t lock;                /* inserts, growth and the list */
  fast_node *overflow;
  uint64_t entries, grows, max_slots;
  const char *name;
};

static uint64_t slot_of(const kvjit_fast_key *key, uint64_t mask) {
  /* One multiply per word, side by side (no chain of two): the lookup is on every op call, most
   * of whose keys have no layout words (c and d 0). */
  uint64_t h = key->a * 0x9E3779B97F4A7C15ull ^ (key->b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
  if ((key->c | key->d) != 0)
    h ^= key->c * 0x165667B19E3779F9ull ^ (key->d + 0x9E3779B97F4A7C15ull) * 0x27D4EB2F165667C5ull;
  return (h >> 29) & mask;
}

static fast_array *array_new(uint64_t slots) {
  fast_array *a = calloc(1, sizeof *a + slots * sizeof a->slots[0]);
  if (a != NULL) a->mask = slots - 1;
  return a;
}

kvjit_status kvjit_fast_map_create(kvjit_fast_map **out, const char *name, uint64_t max_slots) {
  *out = NULL;
  kvjit_fast_map *m = calloc(1, sizeof *m);
  fast_array *a = array_new(INITIAL_SLOTS);
  if (m == NULL || a == NULL) {
    free(m);
    free(a);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "fast table: out of memory");
  }
  atomic_init(&m->current, a);
  atomic_init(&m->overflow_count, 0);
  pthread_mutex_init(&m->lock, NULL);
  m->max_slots = max_slots >= INITIAL_SLOTS ? max_slots : DEFAULT_MAX_SLOTS;
  m->name = name;
  *out = m;
  return KVJIT_OK;
}

void kvjit_fast_map_destroy(kvjit_fast_map *m) {
  if (m == NULL) return;
  fast_array *a = atomic_load(&m->current);
  /* The current array holds every node but the overflowed ones. */
  for (uint64_t i = 0; i <= a->mask; i++) free(atomic_load(&a->slots[i]));
  while (a != NULL) {
    fast_array *older = a->older;
    free(a);
    a = older;
  }
  for (fast_node *n = m->overflow; n != NULL;) {
    fast_node *next = n->next_overflow;
    free(n);
    n = next;
  }
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static inline fast_node *array_find(fast_array *a, const kvjit_fast_key *key) {
  for (uint64_t i = slot_of(key, a->mask);; i = (i + 1) & a->mask) {
    fast_node *n = atomic_load_explicit(&a->slots[i], memory_order_acquire);
    /* Arrays are at most half full: an empty slot always ends the probe. */
    if (n == NULL) return NULL;
    if (kvjit_fast_key_equal(n->key, *key)) return n;
  }
}

static fast_node *overflow_find(const kvjit_fast_map *m, const kvjit_fast_key *key) {
  for (fast_node *n = m->overflow; n != NULL; n = n->next_overflow)
    if (kvjit_fast_key_equal(n->key, *key)) return n;
  return NULL;
}

void *kvjit_fast_map_lookup(kvjit_fast_map *m, const kvjit_fast_key *key) {
  fast_node *n = array_find(atomic_load_explicit(&m->current, memory_order_acquire), key);
  if (n != NULL) return n->value;
  if (atomic_load_explicit(&m->overflow_count, memory_order_acquire) == 0) return NULL;
  pthread_mutex_lock(&m->lock);
  n = overflow_find(m, key);
  pthread_mutex_unlock(&m->lock);
  return n ? n->value : NULL;
}

static void array_put(fast_array *a, fast_node *node) {
  uint64_t i = slot_of(&node->key, a->mask);
  while (atomic_load_explicit(&a->slots[i], memory_order_relaxed) != NULL) i = (i + 1) & a->mask;
  atomic_store_explicit(&a->slots[i], node, memory_order_release);
}

/* A twice bigger copy of the current array, published; 0 when none could be had. Lock held. */
static int grow(kvjit_fast_map *m) {
  fast_array *old = atomic_load_explicit(&m->current, memory_order_relaxed);
  uint64_t slots = (old->mask + 1) * 2;
  if (slots > m->max_slots) return 0;
  fast_array *a = array_new(slots);
  if (a == NULL) return 0;
  for (uint64_t i = 0; i <= old->mask; i++) {
    fast_node *n = atomic_load_explicit(&old->slots[i], memory_order_relaxed);
    if (n != NULL) array_put(a, n);
  }
  /* Readers still probing the old array find what it held; it is freed with the map. */
  a->older = old;
  atomic_store_explicit(&m->current, a, memory_order_release);
  m->grows++;
  return 1;
}

kvjit_status kvjit_fast_map_insert(kvjit_fast_map *m, const kvjit_fast_key *key, void *value, void **winner,
                                   int *inserted) {
  if (inserted) *inserted = 0;
  pthread_mutex_lock(&m->lock);
  fast_array *a = atomic_load_explicit(&m->current, memory_order_relaxed);
  fast_node *found = array_find(a, key);
  if (found == NULL) found = overflow_find(m, key);
  if (found != NULL) {
    if (winner) *winner = found->value;
    pthread_mutex_unlock(&m->lock);
    return KVJIT_OK;
  }
  fast_node *n = malloc(sizeof *n);
  if (n == NULL) {
    pthread_mutex_unlock(&m->lock);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "fast table %s: out of memory", m->name);
  }
  n->key = *key;
  n->value = value;
  n->next_overflow = NULL;
  if ((m->entries + 1) * 2 > a->mask + 1 && !grow(m)) {
    /* No bigger array: the locked list. Slower lookups for this key, never a wrong one. */
    n->next_overflow = m->overflow;
    m->overflow = n;
    atomic_fetch_add_explicit(&m->overflow_count, 1, memory_order_release);
  } else {
    array_put(atomic_load_explicit(&m->current, memory_order_relaxed), n);
  }
  m->entries++;
  if (winner) *winner = value;
  if (inserted) *inserted = 1;
  pthread_mutex_unlock(&m->lock);
  return KVJIT_OK;
}

void kvjit_fast_map_foreach(kvjit_fast_map *m, void (*visit)(void *value, void *user), void *user) {
  pthread_mutex_lock(&m->lock);
  fast_array *a = atomic_load_explicit(&m->current, memory_order_relaxed);
  for (uint64_t i = 0; i <= a->mask; i++) {
    fast_node *n = atomic_load_explicit(&a->slots[i], memory_order_relaxed);
    if (n != NULL) visit(n->value, user);
  }
  for (fast_node *n = m->overflow; n != NULL; n = n->next_overflow) visit(n->value, user);
  pthread_mutex_unlock(&m->lock);
}

void kvjit_fast_map_get_stats(kvjit_fast_map *m, kvjit_fast_map_stats *out) {
  pthread_mutex_lock(&m->lock);
  out->entries = m->entries;
  out->grows = m->grows;
  out->overflows = atomic_load_explicit(&m->overflow_count, memory_order_relaxed);
  out->capacity = atomic_load_explicit(&m->current, memory_order_relaxed)->mask + 1;
  pthread_mutex_unlock(&m->lock);
}
