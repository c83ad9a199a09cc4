/*
 * The loader's calls: descriptions to requests to keys to programs (loader.h).
 */
#include "loader.h"

#include <stdio.h>
#include <string.h>

#include "build.h"
#include "context.h"
#include "driver.h"
#include "load.h"
#include "publish.h"
#include "status.h"
#include "target.h"

/* desc->arch with the current device's compute capability filled in where it has none. */
static kvjit_status target_for_build(int code, int *out) {
  if (kvjit_target_cc(code) != 0) {
    *out = code;
    return KVJIT_OK;
  }
  int device_cc = 0;
  kvjit_status st = kvjit_current_sm(&device_cc);
  if (st != KVJIT_OK) {
    /* Copied first: the detail would otherwise be formatted into the buffer it is read from. */
    char why[256];
    snprintf(why, sizeof why, "%s", kvjit_last_error());
    return kvjit_fail(st, "desc->arch has no compute capability and there is no GPU to take it from (%s)", why);
  }
  *out = code | device_cc;
  return KVJIT_OK;
}

static kvjit_status keyed(const kvjit_request *req, int code, kvjit_key_target *target, kvjit_key *key,
                          int *ptx_fallback) {
  kvjit_status st = kvjit_target_resolve(target, code, ptx_fallback);
  if (st == KVJIT_OK) kvjit_request_key(req, target, key);
  return st;
}

/* The target and key of @p req for a build: its desc->arch, the current device's filled in. */
static kvjit_status build_keyed(const kvjit_request *req, kvjit_key_target *target, kvjit_key *key, int *ptx_fallback) {
  int code = 0; /* set on KVJIT_OK; -O3 cannot see that through target_for_build */
  kvjit_status st = target_for_build(req->desc->arch, &code);
  if (st == KVJIT_OK) st = keyed(req, code, target, key, ptx_fallback);
  return st;
}

kvjit_status kvjit_request_build_key(const kvjit_request *req, kvjit_key_target *target, kvjit_key *key) {
  int ptx_fallback = 0;
  return build_keyed(req, target, key, &ptx_fallback);
}

/* A description keyed for a build (kvjit_program_build(), _compile(), _find()). */
typedef struct build_request {
  kvjit_request req;
  kvjit_key_target target;
  kvjit_key key;
  int ptx_fallback;
} build_request;

/* @p desc's request and its build key; on KVJIT_OK the caller frees b->req (kvjit_request_free()). */
static kvjit_status build_request_open(kvjit_context *ctx, const kvjit_program_desc *desc, build_request *b) {
  kvjit_status st = kvjit_request_init(&b->req, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  b->ptx_fallback = 0;
  st = build_keyed(&b->req, &b->target, &b->key, &b->ptx_fallback);
  if (st != KVJIT_OK) kvjit_request_free(&b->req);
  return st;
}

kvjit_status kvjit_program_get(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                               const kvjit_program_desc *desc) {
  return kvjit_program_get_labeled(ctx, out, origin, desc, NULL);
}

kvjit_status kvjit_program_get_labeled(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                       const kvjit_program_desc *desc, const kvjit_entry_label *label) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  *out = NULL;
  kvjit_request req;
  kvjit_status st = kvjit_request_init(&req, ctx->memo, desc);
  if (st != KVJIT_OK) return st;
  const kvjit_driver *drv;
  int device_cc = 0, code;
  kvjit_key_target target;
  kvjit_key key;
  int ptx_fallback = 0;
  kvjit_program *p = NULL;
  if ((st = kvjit_driver_get(&drv)) != KVJIT_OK || (st = kvjit_driver_current_sm(drv, &device_cc, NULL)) != KVJIT_OK) {
    goto done;
  }
  code = kvjit_target_cc(desc->arch) == 0 ? desc->arch | device_cc : desc->arch;
  if ((st = kvjit_target_check_device(code, device_cc)) != KVJIT_OK) goto done;
  if ((st = keyed(&req, code, &target, &key, &ptx_fallback)) != KVJIT_OK) goto done;
  st = kvjit_program_acquire(ctx, &req, &target, &key, ptx_fallback, label, &p, origin);
  *out = p;
  if (st == KVJIT_OK) st = kvjit_program_load(ctx, p, &req, label, drv);
done:
  kvjit_request_free(&req);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_build(kvjit_context *ctx, kvjit_program **out, kvjit_origin *origin,
                                 const kvjit_program_desc *desc) {
  if (ctx == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx or out is NULL");
  *out = NULL;
  build_request b;
  kvjit_status st = build_request_open(ctx, desc, &b);
  if (st != KVJIT_OK) return st;
  st = kvjit_program_acquire(ctx, &b.req, &b.target, &b.key, b.ptx_fallback, NULL, out, origin);
  kvjit_request_free(&b.req);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_compile(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc) {
  return kvjit_program_compile_labeled(ctx, origin, desc, NULL);
}

kvjit_status kvjit_program_compile_labeled(kvjit_context *ctx, kvjit_origin *origin, const kvjit_program_desc *desc,
                                           const kvjit_entry_label *label) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  build_request b;
  kvjit_status st = build_request_open(ctx, desc, &b);
  if (st != KVJIT_OK) return st;
  st = kvjit_program_precompile(ctx, &b.req, &b.target, &b.key, label, origin);
  kvjit_request_free(&b.req);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_program_find(kvjit_context *ctx, const kvjit_program_desc *desc, const kvjit_entry_label *label,
                                kvjit_cached_at *where, kvjit_miss_info *why) {
  *where = KVJIT_CACHED_NOWHERE;
  if (why) memset(why, 0, sizeof *why);
  build_request b;
  kvjit_status st = build_request_open(ctx, desc, &b);
  if (st != KVJIT_OK) return st;
  *where = kvjit_program_cached_at(ctx, &b.key);
  if (why && *where != KVJIT_CACHED_LOCAL) kvjit_context_explain_key(ctx, &b.req, label, &b.target, &b.key, why);
  kvjit_request_free(&b.req);
  return KVJIT_OK;
}

kvjit_status kvjit_program_desc_init(kvjit_program_desc *out, unsigned version) {
  static const kvjit_program_desc defaults = KVJIT_PROGRAM_DESC_INIT;
  static const size_t ends[] = {0, sizeof defaults};
  return kvjit_struct_init(out, version, &defaults, ends, KVJIT_PROGRAM_DESC_VERSION, "kvjit_program_desc");
}
