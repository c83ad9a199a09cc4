/*
 * The kernel headers the ops' templates share (kernel_src/: the fp8 conversions, ...), embedded
 * in the library: every op's program gets all of them as its desc.headers, keyed by content.
 */
#ifndef KVJIT_KERNEL_HEADERS_H
#define KVJIT_KERNEL_HEADERS_H

#include <stddef.h>

#include "kvjit.h"

/** The shared headers, by the name a template includes them with ("kvjit_fp8.cuh"). */
extern const kvjit_header kvjit_kernel_headers[];
/** How many there are. */
extern const size_t kvjit_num_kernel_headers;

#endif
