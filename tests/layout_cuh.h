/* kernel_src/layout.cuh's arithmetic, callable from C (tests/layout_cuh.cpp). */
#ifndef KVJIT_TEST_LAYOUT_CUH_H
#define KVJIT_TEST_LAYOUT_CUH_H

/** Offset of byte @p byte of slot @p slot's row in a view of @p page_size (0: flat), @p atom,
 *  @p dims strided dims of extents (implied, e1, e2); strides {page, slot, dim 0, 1, 2}. */
long long kvjit_test_cuh_offset(long long slot, long long byte, long long page_size, long long atom, int dims,
                                long long e1, long long e2, const long long strides[5]);

#endif
