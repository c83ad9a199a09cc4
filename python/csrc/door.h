/*
 * What the native module's doors share (requests.c for Python, op.cpp / op_transfer.cpp for the
 * torch op): libkvjit's entry points and the few libcuda ones a door needs, resolved once from
 * the copies the process already loaded; a device guard; the pinned-memory check.
 */
#ifndef KVJIT_DOOR_H
#define KVJIT_DOOR_H

#include <stddef.h>
#include <stdint.h>

#include "kvjit.h"
#include "store_args.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvjit_door_lib {
  kvjit_status (*store)(kvjit_context *, const kvjit_store_kv_args *);
  kvjit_status (*store_prepare)(kvjit_context *, const kvjit_store_kv_args *);
  kvjit_status (*transfer)(kvjit_context *, const kvjit_transfer_kv_args *);
  kvjit_status (*transfer_prepare)(kvjit_context *, const kvjit_transfer_kv_args *);
  const char *(*last_error)(void);
  const char *(*status_name)(kvjit_status);
  kvjit_context *ctx; /**< the package's default context */
  /* libcuda (NULL without a driver). */
  int (*ctx_get_device)(int *);
  int (*device_get)(int *, int);
  int (*device_get_count)(int *);
  int (*primary_ctx_retain)(void **, int);
  int (*ctx_push)(void *);
  int (*ctx_pop)(void **);
  int (*pointer_attribute)(void *, int, uintptr_t);
  int device_count; /**< the driver's device count once it has answered (door.c), else 0 */
} kvjit_door_lib;

/** Set once by kvjit_door_resolve() (under the GIL), read-only afterwards. */
extern kvjit_door_lib kvjit_door;

/** Resolve libkvjit from @p libkvjit_path (already loaded) and libcuda; 0, or -1 with why in @p msg. */
int kvjit_door_resolve(const char *libkvjit_path, kvjit_context *ctx, char *msg, size_t msg_size);

/**
 * How many devices the driver sees, or 0 until it can answer (before cuInit; no driver). Fixed for
 * the process once known: with one, any current context or current runtime device is on it.
 */
int kvjit_door_device_count(void);

/** A device switch made for one call, undone by kvjit_door_leave(). */
typedef struct kvjit_door_guard {
  int pushed;
} kvjit_door_guard;

/**
 * Run the next call on @p device (-1: wherever the thread is): when another device's context is
 * current, push @p device's primary context. A thread with no context is left as it is (the
 * library makes the stream's context current itself) unless @p without_context asks for the push
 * too (a check that asks the driver before the library is called). 0, or -1 with a message.
 */
int kvjit_door_enter(int device, int without_context, kvjit_door_guard *guard, char *msg, size_t msg_size);
void kvjit_door_leave(kvjit_door_guard *guard);

/**
 * Call @p fn(@p arg) holding the GIL, taken once (requests.c). The torch op's kernels run with the
 * GIL released and release their tensor handles here: releasing one drops its hold on the
 * tensor's Python object, for which torch takes and drops the GIL itself, once per tensor unless
 * this thread holds it already. With no interpreter left (exit handlers), a plain call, as torch's
 * own release then leaks the Python object.
 */
void kvjit_door_with_gil(void (*fn)(void *), void *arg);

/**
 * Host memory the GPU reaches must be pinned: @p t's first and last bytes are asked of the
 * driver (one allocation is pinned whole or not at all). 0, or -1 with a message naming @p name.
 */
int kvjit_door_check_pinned(const char *name, const kvjit_tensor_view *t, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif

#endif
