/*
 * The compute capability of the current context's device, as an op call needs it on every call
 * (its variant is keyed by the arch). Remembered per device ordinal, and for the whole process
 * when every visible device has the same capability: then every current context is a device of
 * that arch, and the call need not ask the driver which device is current (cuCtxGetDevice, a
 * driver call per op call otherwise; the host cost in bench_ops' host rows).
 */
#ifndef KVJIT_ARCH_H
#define KVJIT_ARCH_H

#include "driver.h"

#define KVJIT_ARCH_MAX_DEVICES 64

/** What a process remembers; zero-initialised is empty. One per process (kvjit_arch_current()). */
typedef struct kvjit_arch_memo {
  /* Capability per device ordinal, 0 until asked: it never changes, so relaxed loads suffice and
   * a race only repeats a query. */
  _Atomic int device_sm[KVJIT_ARCH_MAX_DEVICES];
  /* Every visible device's capability when they share one; 0 until decided, -1 when they differ
   * (or one could not be read: then every call asks, as it did before the rule). */
  _Atomic int uniform_sm;
} kvjit_arch_memo;

/**
 * The arch (e.g. 90) of the current context's device into @p sm, through @p memo.
 * Until @p memo knows that every visible device shares one arch -- decided on the first call that
 * finds a current context -- and always in a process whose devices differ, it asks cuCtxGetDevice
 * and fails with KVJIT_ERR_NO_DEVICE without a current context (the caller may adopt one and
 * retry). Once every device is known to share an arch, it answers that arch without a driver call
 * and without a context check: the launch that follows fails without a context
 * (CUDA_ERROR_INVALID_CONTEXT, also KVJIT_ERR_NO_DEVICE) or runs in its stream's context, whose
 * device has that arch.
 */
kvjit_status kvjit_arch_current_in(kvjit_arch_memo *memo, const kvjit_driver *drv, int *sm);

/** kvjit_arch_current_in() with the process's memo. */
kvjit_status kvjit_arch_current(const kvjit_driver *drv, int *sm);

#endif
