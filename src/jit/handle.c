/*
 * Prepared programs (kvjit_program_handle): the description copied and keyed once; a repeat get
 * is one driver call (which device is current) and one atomic load.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "context.h"
#include "driver.h"
#include "load.h"
#include "program.h"
#include "request.h"
#include "status.h"
#include "target.h"

/* Devices with a slot of their own; a process with more looks the others up the slow way. */
#define HANDLE_DEVICES 64

struct kvjit_program_handle {
  kvjit_context *ctx;
  kvjit_program_desc *desc; /* the deep copy the request points into */
  kvjit_request req;
  /* The loaded program per device ordinal, once it passed the device check there. */
  _Atomic(kvjit_program *) slots[HANDLE_DEVICES];
};

kvjit_status kvjit_program_handle_create(kvjit_context *ctx, kvjit_program_handle **out,
                                         const kvjit_program_desc *desc) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  *out = NULL;
  kvjit_status st = kvjit_request_check(desc);
  if (st != KVJIT_OK) return st;
  kvjit_program_handle *h = calloc(1, sizeof *h);
  if (h == NULL || (h->desc = kvjit_desc_copy(desc)) == NULL) {
    free(h);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program handle: out of memory");
  }
  h->ctx = ctx;
  if ((st = kvjit_request_init(&h->req, ctx->memo, h->desc)) != KVJIT_OK) {
    free(h->desc);
    free(h);
    return st;
  }
  for (int i = 0; i < HANDLE_DEVICES; i++) atomic_init(&h->slots[i], NULL);
  *out = h;
  kvjit_clear_error();
  return KVJIT_OK;
}

void kvjit_program_handle_destroy(kvjit_program_handle *h) {
  if (h == NULL) return;
  kvjit_request_free(&h->req);
  free(h->desc);
  free(h);
}

/* The full lookup for one device: its target, the key, the table (or a build), the load. */
static kvjit_status slow_get(kvjit_program_handle *h, const kvjit_driver *drv, CUdevice dev, kvjit_program **out,
                             kvjit_origin *origin) {
  int device_cc = 0;
  kvjit_status st = kvjit_driver_current_sm(drv, &device_cc, NULL);
  if (st != KVJIT_OK) return st;
  int code = h->desc->arch;
  if (kvjit_target_cc(code) == 0) code |= device_cc;
  if ((st = kvjit_target_check_device(code, device_cc)) != KVJIT_OK) return st;
  kvjit_key_target target;
  int ptx_fallback = 0;
  if ((st = kvjit_target_resolve(&target, code, &ptx_fallback)) != KVJIT_OK) return st;
  kvjit_key key;
  kvjit_request_key(&h->req, &target, &key);
  kvjit_program *p = NULL;
  st = kvjit_program_acquire(h->ctx, &h->req, &target, &key, ptx_fallback, NULL, &p, origin);
  *out = p;
  if (st == KVJIT_OK) st = kvjit_program_load(h->ctx, p, &h->req, NULL, drv);
  if (st == KVJIT_OK && dev >= 0 && dev < HANDLE_DEVICES) atomic_store_explicit(&h->slots[dev], p, memory_order_release);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_handle_get(kvjit_program_handle *h, kvjit_program **out, kvjit_origin *origin) {
  if (h == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "handle or out is NULL");
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) {
    *out = NULL;
    return st;
  }
  /* The same device the slow path would pick: the current context's, else device 0. */
  CUdevice dev = 0;
  if (drv->cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;
  kvjit_program *p = dev >= 0 && dev < HANDLE_DEVICES ? atomic_load_explicit(&h->slots[dev], memory_order_acquire)
                                                      : NULL;
  if (p != NULL) {
    atomic_fetch_add_explicit(&h->ctx->memory_hits, 1, memory_order_relaxed);
    if (origin) *origin = KVJIT_FROM_MEMORY;
    *out = p;
    return KVJIT_OK;
  }
  return slow_get(h, drv, dev, out, origin);
}
