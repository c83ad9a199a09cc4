/*
 * Loading programs into the driver (load.h).
 */
#include "cache.h"
#include "load.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "publish.h"
#include "status.h"

/*
 * The driver cannot use an entry read from disk, though it passed every check (issue 15: it rejects
 * the image, or finds no kernel of a lowered name in it): move it aside, or remember it when it lies
 * in a read-only layer, and count it (kvjit_cache_reject()); then look again once: the writable dir
 * may hold a good copy that a layer's bad entry shadowed, else this builds from source and publishes
 * over it. Readers may hold the old payload or names (kvjit_program_binary(), _lowered_name()):
 * those stay until the context goes.
 */
static kvjit_status rebuild_rejected(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                     const kvjit_entry_label *label, const char *why) {
  kvjit_cache_reject(ctx->cache, &p->key, why);
  uint8_t *file = NULL;
  kvjit_entry_view view;
  kvjit_compiled compiled;
  kvjit_origin origin;
  kvjit_status published;
  kvjit_status st =
      kvjit_program_obtain(ctx, req, label, &p->target, &p->key, &file, &view, &compiled, &origin, &published, NULL);
  if (st == KVJIT_OK && origin == KVJIT_FROM_DISK && view.target.kind == KVJIT_PAYLOAD_ALIAS) {
    /* An alias in another dir: this program needs a binary of its own, so build it. */
    free(file);
    file = NULL;
    st = kvjit_context_compile(ctx, req, label, &p->target, &p->key, 0, &compiled, &published);
    origin = KVJIT_FROM_COMPILE;
  }
  char **lowered = NULL;
  uint8_t *payload = NULL;
  size_t payload_len = 0;
  if (st == KVJIT_OK && origin == KVJIT_FROM_DISK && view.num_kernels != p->num_kernels) {
    st = kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry %s lists %u kernels, %zu asked for", p->key_hex, view.num_kernels,
                    p->num_kernels);
  }
  if (st == KVJIT_OK && (lowered = calloc(p->num_kernels, sizeof *lowered)) == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  if (st == KVJIT_OK && origin == KVJIT_FROM_DISK) {
    st = kvjit_program_copy_entry(&view, p->num_kernels, NULL, lowered, &payload, &payload_len);
  }
  for (size_t i = 0; st == KVJIT_OK && origin != KVJIT_FROM_DISK && i < p->num_kernels; i++) {
    if ((lowered[i] = strdup(compiled.lowered[i])) == NULL) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  if (st == KVJIT_OK && origin != KVJIT_FROM_DISK) {
    payload = compiled.payload;
    payload_len = compiled.payload_len;
    compiled.payload = NULL;
  }
  if (st == KVJIT_OK) {
    free(p->retired);
    p->retired = p->payload;
    p->payload = payload;
    p->payload_len = payload_len;
    p->from_disk = origin == KVJIT_FROM_DISK;
    char **old = p->lowered;
    p->lowered = lowered;
    lowered = p->retired_lowered;
    p->retired_lowered = old;
  }
  if (lowered != NULL) {
    for (size_t i = 0; i < p->num_kernels; i++) free(lowered[i]);
    free(lowered);
  }
  free(file);
  kvjit_compiled_free(&compiled);
  return st;
}

/* The driver refused an alias's bundle: compile the alias's one kernel alone, write its own entry
 * over the alias, and make the program an ordinary one. */
static kvjit_status own_build(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                              const kvjit_entry_label *label) {
  kvjit_compiled compiled;
  kvjit_status published; /* not on disk: this lookup carries on memory-only, as any miss does */
  kvjit_status st = kvjit_context_compile(ctx, req, label, &p->target, &p->key, 1, &compiled, &published);
  if (st == KVJIT_OK) {
    p->payload = compiled.payload;
    p->payload_len = compiled.payload_len;
    p->publishable = compiled.publishable;
    p->from_disk = 0;
    p->bundle = NULL;
    compiled.payload = NULL;
  }
  kvjit_compiled_free(&compiled);
  return st;
}

static kvjit_status load_library(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                 const kvjit_entry_label *label, const kvjit_driver *drv, CUlibrary *library,
                                 kvjit_kernel **kernels) {
  int rebuilt = 0;
again:;
  CUresult res = drv->cuLibraryLoadData(library, p->payload, NULL, NULL, 0, NULL, NULL, 0);
  if (res != CUDA_SUCCESS && p->from_disk && req != NULL && !rebuilt &&
      (res == CUDA_ERROR_INVALID_IMAGE || res == CUDA_ERROR_INVALID_PTX || res == CUDA_ERROR_NO_BINARY_FOR_GPU)) {
    /* A well-formed entry the driver rejects (e.g. a cubin built by a buggy toolchain). */
    kvjit_status st = rebuild_rejected(ctx, p, req, label, "the driver rejects its image");
    if (st != KVJIT_OK) return st;
    rebuilt = 1;
    goto again;
  }
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLibraryLoadData");
  atomic_fetch_add(&ctx->loads, 1);
  *kernels = calloc(p->num_kernels, sizeof **kernels);
  if (*kernels == NULL) {
    drv->cuLibraryUnload(*library);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
  }
  for (size_t i = 0; i < p->num_kernels; i++) {
    kvjit_kernel *k = &(*kernels)[i];
    k->program = p;
    k->name = p->names[i];
    k->lowered = p->lowered[i];
    atomic_init(&k->num_params, KVJIT_KERNEL_PARAMS_UNKNOWN);
    res = drv->cuLibraryGetKernel(&k->handle, *library, p->lowered[i]);
    if (res != CUDA_SUCCESS) {
      char what[300];
      snprintf(what, sizeof what, "cuLibraryGetKernel(\"%.200s\")", p->lowered[i]);
      kvjit_status st = kvjit_cuda_fail(drv, res, what);
      free(*kernels);
      *kernels = NULL;
      drv->cuLibraryUnload(*library);
      if (p->from_disk && req != NULL && !rebuilt) {
        /* A lowered name of the entry that its payload does not define as a kernel after all. */
        if ((st = rebuild_rejected(ctx, p, req, label, "the driver finds no kernel of a lowered name in it")) != KVJIT_OK)
          return st;
        rebuilt = 1;
        goto again;
      }
      return st;
    }
  }
  return KVJIT_OK;
}

kvjit_status kvjit_program_load(kvjit_context *ctx, kvjit_program *p, const kvjit_request *req,
                                const kvjit_entry_label *label, const kvjit_driver *drv) {
  pthread_mutex_lock(&ctx->lock);
  while (p->loading) pthread_cond_wait(&ctx->built, &ctx->lock);
  if (p->library != NULL) {
    pthread_mutex_unlock(&ctx->lock);
    return KVJIT_OK;
  }
  p->loading = 1;
  pthread_mutex_unlock(&ctx->lock);
  CUlibrary library = NULL;
  kvjit_kernel *kernels = NULL;
  kvjit_status st;
  if (p->bundle != NULL) {
    /* An alias: load its bundle (once per context) and take its kernel. */
    kvjit_program *bundle = p->bundle;
    st = kvjit_program_load(ctx, bundle, NULL, NULL, drv);
    if (st == KVJIT_OK) {
      library = bundle->library;
      kernels = atomic_load_explicit(&bundle->kernels, memory_order_acquire) + p->bundle_index;
    } else if (req != NULL && (st = own_build(ctx, p, req, label)) == KVJIT_OK) {
      st = load_library(ctx, p, req, label, drv, &library, &kernels);
    }
  } else {
    /* Not remembered when it fails: a later call tries again (the driver's state may change). */
    st = load_library(ctx, p, req, label, drv, &library, &kernels);
  }
  pthread_mutex_lock(&ctx->lock);
  if (st == KVJIT_OK) {
    atomic_store_explicit(&p->kernels, kernels, memory_order_release);
    p->library = library;
  }
  p->loading = 0;
  pthread_cond_broadcast(&ctx->built);
  pthread_mutex_unlock(&ctx->lock);
  return st;
}
