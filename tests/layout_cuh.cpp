// kernel_src/layout.cuh's arithmetic for the C tests (test_layout.c, test_store_layout.c): the
// same inline functions the kernels call with template constants, called here with a view's values.
#include "layout.cuh"

extern "C" long long kvjit_test_cuh_offset(long long slot, long long byte, long long page_size, long long atom,
                                           int dims, long long e1, long long e2, const long long strides[5]);

extern "C" long long kvjit_test_cuh_offset(long long slot, long long byte, long long page_size, long long atom,
                                           int dims, long long e1, long long e2, const long long strides[5]) {
  const kvjit_view_strides s = {strides[0], strides[1], {strides[2], strides[3], strides[4]}};
  return kvjit_view_slot_offset(slot, page_size, s) + kvjit_view_row_offset(byte, atom, dims, e1, e2, s);
}
