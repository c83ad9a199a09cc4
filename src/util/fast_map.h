/*
 * Lock-free, growing tables of exact 256-bit keys (no hashing of a description) to immutable
 * values, for hot paths (the op layer keeps its loaded variants in one per context, op.h).
 *
 * Every key names its family in its top byte (the op registry numbers them, ops/registry.h), so keys of different families can
 * never be equal whatever the rest of the bits hold. A table grows: a bigger slot array is built
 * under the table's lock and published atomically, the old one kept until the table dies, so a
 * lookup never probes a full array. Only when no bigger array can be had does an entry go to a
 * locked overflow list (counted; the op layer logs the first one): a lookup then costs one locked
 * list walk, never a rebuild. Lookups are safe from any thread, allocate nothing and make no syscall.
 */
#ifndef KVJIT_FAST_MAP_H
#define KVJIT_FAST_MAP_H

#include <stdint.h>

#include "kvjit_tools.h"

/** 256-bit exact key (ops pack their request into it; the top byte of @c a is the family). @c c
 *  and @c d are 0 unless a request needs more than 120 bits (the static part of cache layouts). */
typedef struct kvjit_fast_key {
  uint64_t a, b, c, d;
} kvjit_fast_key;

/** Who a key belongs to: the top byte of word a. 0 is never a key's family. */
#define KVJIT_FAMILY_NONE 0u
#define KVJIT_FAMILY_SHIFT 56
/** Bits of word a below the family byte. */
#define KVJIT_FAMILY_PAYLOAD_MASK ((UINT64_C(1) << KVJIT_FAMILY_SHIFT) - 1)

/** The key of @p family with payload @p a (its top byte must be clear) and @p b. */
static inline kvjit_fast_key kvjit_fast_key_make(unsigned family, uint64_t a, uint64_t b) {
  kvjit_fast_key key = {(uint64_t)family << KVJIT_FAMILY_SHIFT | (a & KVJIT_FAMILY_PAYLOAD_MASK), b, 0, 0};
  return key;
}

/** kvjit_fast_key_make() with the two further words. */
static inline kvjit_fast_key kvjit_fast_key_make_wide(unsigned family, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  kvjit_fast_key key = kvjit_fast_key_make(family, a, b);
  key.c = c;
  key.d = d;
  return key;
}

static inline unsigned kvjit_fast_key_family(kvjit_fast_key key) { return (unsigned)(key.a >> KVJIT_FAMILY_SHIFT); }

static inline int kvjit_fast_key_equal(kvjit_fast_key x, kvjit_fast_key y) {
  return x.a == y.a && x.b == y.b && x.c == y.c && x.d == y.d;
}

/** One growing table: key -> value. */
typedef struct kvjit_fast_map kvjit_fast_map;

/** What a table has done since it was created (all cold-path events). */
typedef struct kvjit_fast_map_stats {
  uint64_t entries;   /* keys held */
  uint64_t grows;     /* bigger slot arrays published */
  uint64_t overflows; /* entries that went to the locked list (no bigger array could be had) */
  uint64_t capacity;  /* slots of the current array */
} kvjit_fast_map_stats;

/**
 * A table. @p name goes into its error messages; @p max_slots (a power of two, 0 for the default
 * of 2^20) bounds its growth.
 */
kvjit_status kvjit_fast_map_create(kvjit_fast_map **out, const char *name, uint64_t max_slots);
/** Free the table, its arrays and its entries (not the values). Accepts NULL. */
void kvjit_fast_map_destroy(kvjit_fast_map *map);

/** The value published under @p key, or NULL. Lock-free unless the table has overflowed. Keys go
 *  by address (here and to insert): one passed by value is copied through the stack on every call,
 *  and read back in halves the copy did not write (a stall: bench_prelaunch). */
void *kvjit_fast_map_lookup(kvjit_fast_map *map, const kvjit_fast_key *key);

/**
 * Publish key -> @p value unless the key is there already. @p winner (optional) receives the
 * value the table holds for the key afterwards: @p value, or the one an earlier insert put there;
 * @p inserted (optional) whether it is this call's.
 * @return KVJIT_ERR_OUT_OF_MEMORY when not even the list entry could be allocated.
 */
kvjit_status kvjit_fast_map_insert(kvjit_fast_map *map, const kvjit_fast_key *key, void *value, void **winner,
                                   int *inserted);

/** Visit every value (not on a hot path; the table's lock is held, so @p visit must not insert). */
void kvjit_fast_map_foreach(kvjit_fast_map *map, void (*visit)(void *value, void *user), void *user);

void kvjit_fast_map_get_stats(kvjit_fast_map *map, kvjit_fast_map_stats *out);

#endif
