/*
 * An op's variant space from its field table (kvjit_op_info.fields: every field with its kind,
 * range or words): the check harness's cases of the op's fields come from here, so a field an op
 * adds enters the space by itself. The space holds what cases use: a variant whose case (the op's
 * mapping to a case and back) uses another one is replaced by that one when its own case uses it
 * (a call cannot take 16-byte accesses on 8-byte rows, which a manifest line may still name: the
 * case of 8-byte rows uses 8). check_space_test.c (unit suite): every field with more
 * than one value takes at least two in the space, so a field the op's mapping does not carry
 * (its cases keep the default) fails it, naming the field.
 */
#ifndef KVJIT_TEST_CHECK_SPACE_H
#define KVJIT_TEST_CHECK_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit_tools.h"
#include "variant_util.h"

/** INT fields are sampled up to this value (rows of 64 KiB, splits, heads): larger values take
 *  the code paths of the largest sampled one; the rules beyond it are the op's CPU tests'. */
#define CHECK_SPACE_INT_CAP ((int64_t)1 << 16)

/** Every value the space gives field @p f, in order: WORD every word, POW2 every power of two in
 *  range, INT its minimum, the powers of two and their halfway points 3 * 2^k within the range up
 *  to CHECK_SPACE_INT_CAP, and its maximum when that is within the cap. @return the count
 *  (at most @p capacity are written). The arch field (fields[0]) has one value: 0, this device. */
size_t check_field_values(const kvjit_op_info *op, size_t field, int64_t *out, size_t capacity);

/** An op's mapping between its variants and its cases (check_op's from_variant, to_variant). */
typedef struct check_space_map {
  size_t case_size;
  void (*from_variant)(const kvjit_variant *v, size_t index, void *c);
  int (*to_variant)(const void *c, kvjit_variant *out);
  /** Fields the mapping does not carry yet, each named on purpose: they stay at the bases' values
   *  here (their cases are hand-written groups); check_space_test.c names them. Any other field
   *  is varied, and fails the test when the mapping drops it. */
  const char *const *fixed;
  size_t num_fixed;
} check_space_map;

/** 1 when field @p name is one of @p map's fixed fields. */
int check_space_fixed(const check_space_map *map, const char *name);

/**
 * The space of op @p name: from each base (a manifest line of the op, every field given), every
 * field in turn set to each of its values, the others as in the base; kept when
 * kvjit_variant_check() accepts it, as a case can use it (see above), in its canonical form, once.
 * Deterministic (the same list on every machine). @return the count; *@p out (owned by the space,
 * valid for the process) the variants; *@p dropped (may be NULL) how many checked variants no
 * case could use.
 */
size_t check_space_get(const char *name, const char *const *bases, size_t num_bases, const check_space_map *map,
                       const kvjit_variant **out, size_t *dropped);

/** The map op @p name's space was made with (NULL before check_space_get() made it). */
const check_space_map *check_space_map_of(const char *name);

/** 1 when @p a and @p b are the same variant in every field but the arch. */
int check_variant_same(const kvjit_variant *a, const kvjit_variant *b);

#endif
