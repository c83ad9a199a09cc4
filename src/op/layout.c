/* Cache layouts: checks, canonical form, overlap, addresses (layout.h). */
#include "layout.h"

#include <stdio.h>
#include <string.h>

#include "status.h"

kvjit_status kvjit_layout_init(kvjit_layout *out, unsigned version) {
  static const kvjit_layout defaults = KVJIT_LAYOUT_INIT;
  static const size_t ends[KVJIT_LAYOUT_VERSION + 1] = {0, sizeof(kvjit_layout)};
  return kvjit_struct_init(out, version, &defaults, ends, KVJIT_LAYOUT_VERSION, "kvjit_layout");
}

void kvjit_view_flat(kvjit_view *out, int64_t row_bytes, int64_t slot_stride) {
  memset(out, 0, sizeof *out);
  out->atom = row_bytes;
  out->slot_stride = slot_stride;
}

static int is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* The caller's dims with packed strides filled in (innermost first), checked. */
static kvjit_status raw_dims(const char *name, const kvjit_layout *l, int64_t row_bytes, int64_t *ext, int64_t *str) {
  const int n = l->num_row_dims;
  const int64_t elem = l->element_bytes;
  if (n == 1 && l->row_extents[0] == 0) {
    if (row_bytes % elem != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->element_bytes: %lld does not divide the row's %lld bytes", name,
                        (long long)elem, (long long)row_bytes);
    }
    ext[0] = row_bytes / elem;
  } else {
    int64_t elems = 1;
    for (int d = 0; d < n; d++) {
      ext[d] = l->row_extents[d];
      if (ext[d] < 1) {
        return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->row_extents[%d]: must be >= 1, got %lld", name, d,
                          (long long)ext[d]);
      }
      if (__builtin_mul_overflow(elems, ext[d], &elems)) elems = INT64_MAX;
    }
    int64_t bytes;
    if (__builtin_mul_overflow(elems, elem, &bytes) || bytes != row_bytes) {
      char dims[96];
      int used = 0;
      for (int d = 0; d < n; d++) {
        used += snprintf(dims + used, sizeof dims - (size_t)used, "%s%lld", d ? " x " : "", (long long)ext[d]);
      }
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                        "%s->row_extents: %s elements of %lld bytes do not make the row's %lld bytes", name, dims,
                        (long long)elem, (long long)row_bytes);
    }
  }
  int64_t packed = elem;
  for (int d = n - 1; d >= 0; d--) {
    str[d] = l->row_strides[d];
    if (str[d] < 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->row_strides[%d]: must be >= 0 (0: packed), got %lld", name,
                        d, (long long)str[d]);
    }
    if (str[d] == 0) str[d] = packed;
    if (__builtin_mul_overflow(str[d], ext[d], &packed)) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->row_strides[%d]: %lld x %lld elements overflows 64 bits", name,
                        d, (long long)str[d], (long long)ext[d]);
    }
  }
  return KVJIT_OK;
}

/* The span of a row: its last byte + 1 (strides and extents checked, no overflow). */
static int64_t dims_span(int64_t atom, const int64_t *ext, const int64_t *str, int n) {
  int64_t span = atom;
  for (int d = 0; d < n; d++) span += (ext[d] - 1) * str[d];
  return span;
}

kvjit_status kvjit_view_resolve(kvjit_view *out, const char *name, const kvjit_layout *l, int64_t row_bytes,
                                int64_t element_bytes) {
  if (l->version < 1 || l->version > KVJIT_LAYOUT_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->version: must be 1..KVJIT_LAYOUT_VERSION (%d), got %u", name,
                      KVJIT_LAYOUT_VERSION, l->version);
  }
  if (!is_pow2(l->element_bytes) || l->element_bytes > 16) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->element_bytes: must be 1, 2, 4, 8 or 16, got %lld", name,
                      (long long)l->element_bytes);
  }
  if (element_bytes != 0 && l->element_bytes != element_bytes) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->element_bytes: must be %lld (the cache's element), got %lld",
                      name, (long long)element_bytes, (long long)l->element_bytes);
  }
  if (l->num_row_dims < 1 || l->num_row_dims > KVJIT_LAYOUT_MAX_ROW_DIMS) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->num_row_dims: must be 1..%d, got %d", name,
                      KVJIT_LAYOUT_MAX_ROW_DIMS, l->num_row_dims);
  }
  if (l->page_size < 0 || l->page_stride < 0 || l->slot_stride < 0) {
    const char *field = l->page_size < 0 ? "page_size" : l->page_stride < 0 ? "page_stride" : "slot_stride";
    int64_t value = l->page_size < 0 ? l->page_size : l->page_stride < 0 ? l->page_stride : l->slot_stride;
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->%s: must be >= 0, got %lld", name, field, (long long)value);
  }
  int64_t ext[KVJIT_VIEW_MAX_DIMS], str[KVJIT_VIEW_MAX_DIMS];
  kvjit_status st = raw_dims(name, l, row_bytes, ext, str);
  if (st != KVJIT_OK) return st;
  /* Canonical dims: drop extent-1 dims, merge a dim into the one inside it when contiguous with it. */
  int n = 0;
  for (int d = 0; d < l->num_row_dims; d++) {
    if (ext[d] == 1) continue;
    if (n > 0 && str[n - 1] == ext[d] * str[d]) {
      ext[n - 1] *= ext[d];
      str[n - 1] = str[d];
      continue;
    }
    ext[n] = ext[d];
    str[n] = str[d];
    n++;
  }
  /* The atom: the element, grown by each innermost dim that is contiguous with it. */
  int64_t atom = l->element_bytes;
  while (n > 0 && str[n - 1] == atom) {
    atom *= ext[n - 1];
    n--;
  }
  memset(out, 0, sizeof *out);
  out->atom = atom;
  out->num_dims = n;
  for (int d = 0; d < n; d++) {
    out->extents[d] = ext[d];
    out->strides[d] = str[d];
  }
  const int64_t span = dims_span(atom, ext, str, n);
  out->slot_stride = l->slot_stride ? l->slot_stride : span;
  if (l->page_size > 1) {
    out->page_size = l->page_size;
    if (__builtin_mul_overflow(l->page_size, out->slot_stride, &out->page_stride)) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->page_size: %lld slots of %lld bytes overflow 64 bits", name,
                        (long long)l->page_size, (long long)out->slot_stride);
    }
    /* Pages that follow each other as one run of slots are flat slots. */
    if (l->page_stride != 0 && l->page_stride != out->page_stride) {
      out->page_stride = l->page_stride;
    } else {
      out->page_size = 0;
      out->page_stride = 0;
    }
  }
  if (out->page_size > KVJIT_VIEW_MAX_PAGE) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "%s->page_size: at most %d slots per page, got %lld", name,
                      KVJIT_VIEW_MAX_PAGE, (long long)out->page_size);
  }
  if (n > 0 && atom > KVJIT_VIEW_MAX_ATOM) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "%s: a contiguous run of %lld bytes inside strided row dims (at most %d)",
                      name, (long long)atom, KVJIT_VIEW_MAX_ATOM);
  }
  for (int d = 0; d + 1 < n; d++) {
    if (ext[d] > KVJIT_VIEW_MAX_EXTENT) {
      return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "%s->row_extents: a strided dim of %lld (at most %d)", name,
                        (long long)ext[d], KVJIT_VIEW_MAX_EXTENT);
    }
  }
  return KVJIT_OK;
}

/* ---- overlap ------------------------------------------------------------------------------------ */

/* A view's bytes as dims (slots and row) over an atom: offsets sum(i_d * stride_d) + [0, atom). */
typedef struct dimset {
  int n;
  int64_t ext[KVJIT_VIEW_MAX_DIMS + 2], str[KVJIT_VIEW_MAX_DIMS + 2];
  int64_t atom;
} dimset;

static void add_dim(dimset *s, int64_t ext, int64_t stride) {
  if (ext <= 1) return;
  s->ext[s->n] = ext;
  s->str[s->n] = stride;
  s->n++;
}

static void view_dims(const kvjit_view *v, int64_t num_slots, dimset *s) {
  s->n = 0;
  s->atom = v->atom;
  if (v->page_size > 1) {
    add_dim(s, (num_slots - 1) / v->page_size + 1, v->page_stride); /* num_slots >= 1: no overflow */
    add_dim(s, num_slots < v->page_size ? num_slots : v->page_size, v->slot_stride);
  } else {
    add_dim(s, num_slots, v->slot_stride);
  }
  for (int d = 0; d < v->num_dims; d++) add_dim(s, v->extents[d], v->strides[d]);
}

/* The span (last byte + 1) of a dimset, or -1 past 64 bits. */
static int64_t set_span(const dimset *s) {
  int64_t span = s->atom, t;
  for (int d = 0; d < s->n; d++) {
    if (__builtin_mul_overflow(s->ext[d] - 1, s->str[d], &t) || __builtin_add_overflow(span, t, &span)) return -1;
  }
  return span;
}

kvjit_status kvjit_view_check_slots(const kvjit_view *v, const char *name, int64_t num_slots) {
  dimset s;
  view_dims(v, num_slots, &s);
  if (set_span(&s) < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: %lld slots reach past a 64-bit offset", name,
                      (long long)num_slots);
  }
  /* Innermost first (by stride): each dim must step past everything inside it. */
  int order[KVJIT_VIEW_MAX_DIMS + 2];
  for (int d = 0; d < s.n; d++) {
    int k = d;
    while (k > 0 && s.str[order[k - 1]] > s.str[d]) {
      order[k] = order[k - 1];
      k--;
    }
    order[k] = d;
  }
  int64_t inside = s.atom;
  for (int k = 0; k < s.n; k++) {
    const int d = order[k];
    if (s.str[d] < inside) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                        "%s: a stride of %lld bytes (over %lld) lands inside the %lld bytes of the dims within it: "
                        "two elements would share a byte",
                        name, (long long)s.str[d], (long long)s.ext[d], (long long)inside);
    }
    inside += (s.ext[d] - 1) * s.str[d];
  }
  return KVJIT_OK;
}

static void drop_dim(dimset *s, int d) {
  for (int k = d + 1; k < s->n; k++) {
    s->ext[k - 1] = s->ext[k];
    s->str[k - 1] = s->str[k];
  }
  s->n--;
}

/*
 * 1 when no offset of @p a equals an offset of @p b + @p delta, 0 when they might meet. Two sets
 * whose spans do not meet are apart. Otherwise peel their largest common stride S (when
 * everything inside it spans at most S in both): a = i S + ra, b = delta + j S + rb with
 * ra, rb in [0, S) meet only where (i - j) S = delta + rb - ra, i.e. i - j = q + k with
 * delta = q S + m and k in {0, 1}, ra = rb + m - k S: two smaller problems, each only when
 * such i, j exist. At most two branches per level of at most five: 32 leaves.
 */
static int sets_apart(const dimset *a, const dimset *b, int64_t delta) {
  const int64_t span_a = set_span(a), span_b = set_span(b);
  if (span_a < 0 || span_b < 0) return 0;
  if (delta >= span_a || (delta < 0 && -delta >= span_b)) return 1;
  int da = -1, db = -1;
  for (int x = 0; x < a->n; x++) {
    for (int y = 0; y < b->n; y++) {
      if (a->str[x] == b->str[y] && (da < 0 || a->str[x] > a->str[da])) {
        da = x;
        db = y;
      }
    }
  }
  if (da < 0) return 0;
  const int64_t stride = a->str[da], na = a->ext[da], nb = b->ext[db];
  dimset ra = *a, rb = *b;
  drop_dim(&ra, da);
  drop_dim(&rb, db);
  const int64_t rspan_a = set_span(&ra), rspan_b = set_span(&rb);
  if (stride <= 0 || rspan_a > stride || rspan_b > stride) return 0;
  int64_t q = delta / stride, m = delta % stride;
  if (m < 0) {
    m += stride;
    q--;
  }
  for (int k = 0; k <= 1; k++) {
    const int64_t t = q + k; /* i - j */
    if (t > na - 1 || t < -(nb - 1)) continue;
    if (!sets_apart(&ra, &rb, m - k * stride)) return 0;
  }
  return 1;
}

kvjit_status kvjit_view_check_disjoint(const kvjit_view *a, const char *name_a, uint64_t base_a, const kvjit_view *b,
                                       const char *name_b, uint64_t base_b, int64_t num_slots) {
  dimset sa, sb;
  view_dims(a, num_slots, &sa);
  view_dims(b, num_slots, &sb);
  /* Bases of one address space: their difference as a signed offset (user addresses are < 2^63). */
  const int64_t delta = (int64_t)(base_b - base_a);
  if (!sets_apart(&sa, &sb, delta)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "%s, %s: the two views may share bytes (%s at %#llx, %s at %#llx, %lld slots): a store to one "
                      "would overwrite the other",
                      name_a, name_b, name_a, (unsigned long long)base_a, name_b, (unsigned long long)base_b,
                      (long long)num_slots);
  }
  return KVJIT_OK;
}

/* ---- addresses and the static part --------------------------------------------------------------- */

int64_t kvjit_view_offset(const kvjit_view *v, int64_t slot, int64_t byte) {
  int64_t off = v->page_size > 1 ? slot / v->page_size * v->page_stride + slot % v->page_size * v->slot_stride
                                 : slot * v->slot_stride;
  int64_t t = byte / v->atom;
  off += byte % v->atom;
  for (int d = v->num_dims - 1; d >= 0; d--) {
    off += t % v->extents[d] * v->strides[d];
    t /= v->extents[d];
  }
  return off;
}

void kvjit_view_static_values(const kvjit_view *v, int64_t out[KVJIT_VIEW_F_COUNT]) {
  out[KVJIT_VIEW_F_PAGE] = v->page_size;
  out[KVJIT_VIEW_F_ATOM] = v->num_dims > 0 ? v->atom : 0;
  out[KVJIT_VIEW_F_DIM0] = v->num_dims >= 2 ? v->extents[0] : 0;
  out[KVJIT_VIEW_F_DIM1] = v->num_dims >= 3 ? v->extents[1] : 0;
}

kvjit_status kvjit_view_from_values(kvjit_view *out, const int64_t values[KVJIT_VIEW_F_COUNT], int64_t row_bytes,
                                    const char *prefix) {
  const int64_t page = values[KVJIT_VIEW_F_PAGE], atom = values[KVJIT_VIEW_F_ATOM];
  const int64_t dim0 = values[KVJIT_VIEW_F_DIM0], dim1 = values[KVJIT_VIEW_F_DIM1];
  memset(out, 0, sizeof *out);
  if (page == 1 || page < 0 || page > KVJIT_VIEW_MAX_PAGE) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%spage: must be 0 (flat) or 2..%d, got %lld", prefix,
                      KVJIT_VIEW_MAX_PAGE, (long long)page);
  }
  out->page_size = page;
  out->atom = row_bytes;
  if (atom == 0) {
    if (dim0 != 0 || dim1 != 0) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%sdim0, %sdim1: need %satom", prefix, prefix, prefix);
    }
    return KVJIT_OK;
  }
  if (atom < 0 || atom > KVJIT_VIEW_MAX_ATOM || atom >= row_bytes || row_bytes % atom != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%satom: must divide the row's %lld bytes and be less, got %lld",
                      prefix, (long long)row_bytes, (long long)atom);
  }
  if (dim0 == 0 && dim1 != 0) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%sdim1: needs %sdim0", prefix, prefix);
  const int64_t atoms = row_bytes / atom;
  const int64_t given = (dim0 ? dim0 : 1) * (dim1 ? dim1 : 1);
  if (dim0 < 0 || dim1 < 0 || dim0 == 1 || dim1 == 1 || atoms % given != 0 || atoms / given < 2) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "%sdim0, %sdim1: %lld, %lld must be 0 or >= 2 and leave a last dim >= 2 of the row's %lld atoms",
                      prefix, prefix, (long long)dim0, (long long)dim1, (long long)atoms);
  }
  out->atom = atom;
  out->num_dims = dim1 ? 3 : dim0 ? 2 : 1;
  if (dim0) out->extents[0] = dim0;
  if (dim1) out->extents[1] = dim1;
  out->extents[out->num_dims - 1] = atoms / given;
  return KVJIT_OK;
}

uint64_t kvjit_view_address_bits(const kvjit_view *v) {
  uint64_t bits = (uint64_t)v->page_stride | (uint64_t)v->slot_stride | (uint64_t)(v->num_dims ? v->atom : 0);
  for (int d = 0; d < v->num_dims; d++) bits |= (uint64_t)v->strides[d];
  return bits;
}

void kvjit_view_strides_of(const kvjit_view *v, kvjit_view_strides *out) {
  out->page_stride = v->page_stride;
  out->slot_stride = v->slot_stride;
  for (int d = 0; d < KVJIT_VIEW_MAX_DIMS; d++) out->strides[d] = d < v->num_dims ? v->strides[d] : 0;
}
