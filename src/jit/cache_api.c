/* kvjit.h's cache maintenance (kvjit cache ls/verify/prune/clear/export/import) on a context's cache. */
#include "alias.h"
#include "cache_store.h"
#include "context.h"
#include "pack.h"
#include "status.h"

kvjit_status kvjit_cache_list(kvjit_context *ctx, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_alias_list(ctx->cache, include_read_dirs, verify, visit, user, bad);
}

kvjit_status kvjit_cache_prune(kvjit_context *ctx, uint64_t max_bytes, uint64_t *removed_entries,
                               uint64_t *removed_bytes) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_evict(ctx->cache, max_bytes, removed_entries, removed_bytes);
}

kvjit_status kvjit_cache_clear(kvjit_context *ctx, uint64_t *removed_entries) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  return kvjit_cache_remove_all(ctx->cache, removed_entries);
}

kvjit_status kvjit_cache_export(kvjit_context *ctx, const char *path, int include_read_dirs, uint64_t *entries) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (path == NULL || path[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path: empty");
  return kvjit_pack_export(ctx->cache, path, include_read_dirs, entries);
}

kvjit_status kvjit_cache_import(kvjit_context *ctx, const char *path, uint64_t *imported, uint64_t *present,
                                uint64_t *bad) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx is NULL");
  if (path == NULL || path[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path: empty");
  return kvjit_pack_import(ctx->cache, path, imported, present, bad);
}
