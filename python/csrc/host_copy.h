/*
 * The ops on host memory, for the CPU path of the doors (tensors that are all on the CPU): the
 * same checked request the library gets, carried out by plain copy loops. Synchronous.
 */
#ifndef KVJIT_HOST_COPY_H
#define KVJIT_HOST_COPY_H

#include <stddef.h>

#include "kvjit.h"

/** k_cache[indices] = k (v likewise), copied or quantized as @p a says. */
int kvjit_host_store(const kvjit_store_kv_args *a);

/** dst[dst_indices] = src[src_indices] for one layer. 0, or -1 (out of memory) with a message. */
int kvjit_host_transfer(const kvjit_transfer_kv_args *a, char *msg, size_t msg_size);

#endif
