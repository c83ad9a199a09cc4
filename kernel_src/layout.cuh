// kvjit cache layouts, device side: the address of a byte of a slot's row in a canonical view
// (src/op/layout.h says what a view is; kvjit_view_offset() there is the host side of the same
// arithmetic, and tests/test_layout.c checks this file's arithmetic against the layouts'
// definition, through tests/layout_cuh.cpp).
//
// The static part is template arguments, so every division is by a constant:
//   PageSize   slots per page; 0: flat slots
//   Atom       bytes of a contiguous run of the row (the whole row when there are no dims)
//   E0, E1, E2 extents of the strided row dims above the atom, outermost first; 0 past the last
// The strides come at run time (kvjit_view_strides, the host's kvjit_view_strides field for field).
//
// Usable from host C++ too (the CPU test): define KVJIT_LAYOUT_FN first, or get `inline`.

#ifndef KVJIT_LAYOUT_CUH
#define KVJIT_LAYOUT_CUH

#ifndef KVJIT_LAYOUT_FN
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KVJIT_LAYOUT_FN __device__ __forceinline__
#else
#define KVJIT_LAYOUT_FN inline
#endif
#endif

struct kvjit_view_strides {
  long long page_stride;
  long long slot_stride;
  long long strides[3];
};

// The arithmetic, on values: the kernels call it with template constants (inlined, so each
// division is by a constant), the CPU test with a view's values.
KVJIT_LAYOUT_FN long long kvjit_view_slot_offset(long long slot, long long page_size, const kvjit_view_strides &s) {
  if (page_size == 0) return slot * s.slot_stride;
  const unsigned long long u = (unsigned long long)slot;  // slot >= 0: unsigned division
  return (long long)(u / (unsigned long long)page_size) * s.page_stride +
         (long long)(u % (unsigned long long)page_size) * s.slot_stride;
}

// Byte @p byte of a row over atoms of @p atom bytes and @p dims strided dims of extents e1, e2
// (the second and third; the first is implied). Rows are < 2^31 bytes (both ops' limit): 32-bit
// divisions.
KVJIT_LAYOUT_FN long long kvjit_view_row_offset(long long byte, long long atom, int dims, long long e1, long long e2,
                                                const kvjit_view_strides &s) {
  if (dims == 0) return byte;
  const unsigned int b = (unsigned int)byte;
  unsigned int t = b / (unsigned int)atom;
  long long off = (long long)(b % (unsigned int)atom);
  if (dims == 1) return off + (long long)t * s.strides[0];
  if (dims == 3) {
    off += (long long)(t % (unsigned int)e2) * s.strides[2];
    t /= (unsigned int)e2;
  }
  return off + (long long)(t % (unsigned int)e1) * s.strides[1] + (long long)(t / (unsigned int)e1) * s.strides[0];
}

template <long long PageSize, long long Atom, long long E0, long long E1, long long E2>
struct kvjit_view {
  static constexpr int kDims = E0 == 0 ? 0 : E1 == 0 ? 1 : E2 == 0 ? 2 : 3;
  static_assert(PageSize == 0 || PageSize >= 2, "page size: 0 (flat) or >= 2");
  static_assert(Atom >= 1, "atom");
  static_assert(E0 >= 0 && E1 >= 0 && E2 >= 0 && (E1 == 0 || E0 > 0) && (E2 == 0 || E1 > 0), "extents");

  // Offset of slot @p slot's row from the cache's base.
  static KVJIT_LAYOUT_FN long long slot_offset(long long slot, const kvjit_view_strides &s) {
    return kvjit_view_slot_offset(slot, PageSize, s);
  }
  // Offset of byte @p byte (>= 0) of a row from the row's slot offset.
  static KVJIT_LAYOUT_FN long long row_offset(long long byte, const kvjit_view_strides &s) {
    return kvjit_view_row_offset(byte, Atom, kDims, E1, E2, s);
  }
  static KVJIT_LAYOUT_FN long long offset(long long slot, long long byte, const kvjit_view_strides &s) {
    return slot_offset(slot, s) + row_offset(byte, s);
  }
};

#endif
