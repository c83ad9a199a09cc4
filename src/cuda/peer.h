/*
 * Can a launch reach memory on another device: each device pointer's device, and, where it is not
 * the launching context's, the peer link and the access that context has (enabled on request).
 * Cold path only (a few driver queries per pointer): ops call it from an explicit check, never
 * from a launch.
 */
#ifndef KVJIT_PEER_H
#define KVJIT_PEER_H

#include "driver.h"

/** One pointer a launch will use: its argument name (for messages) and its address. */
typedef struct kvjit_peer_pointer {
  const char *name;
  const void *ptr;
} kvjit_peer_pointer;

/**
 * Check that a kernel launched on @p stream (its context; the current one for NULL or a default
 * stream) can reach each of @p pointers: a pointer on the launching device always can; one on
 * another device needs cuDeviceCanAccessPeer and access from the launching context (peer access
 * enabled, or a cuMemSetAccess grant). With @p enable, the launching context's peer access to
 * the owner's context is enabled first (cuCtxEnablePeerAccess; already enabled is fine).
 * @return KVJIT_ERR_INVALID_ARGUMENT naming the pointer and both devices when it cannot; the
 * driver's failure otherwise. Nothing is launched or dereferenced.
 */
kvjit_status kvjit_peer_check(const kvjit_driver *drv, struct CUstream_st *stream, const kvjit_peer_pointer *pointers,
                              size_t count, int enable);

#endif
