/* PLACEHOLDER until the store_kv_cache op lands (owned by the store helper). */
#include "kvjit.h"
#include "status.h"
kvjit_status kvjit_store_kv_cache(kvjit_context *ctx, const kvjit_store_kv_args *args) {
  (void)ctx; (void)args; return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "store_kv_cache: not built yet");
}
kvjit_status kvjit_store_kv_cache_prepare(kvjit_context *ctx, const kvjit_store_kv_args *args) {
  (void)ctx; (void)args; return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "store_kv_cache: not built yet");
}
kvjit_status kvjit_store_kv_cache_oob_count(kvjit_context *ctx, uint64_t *count, int reset) {
  (void)ctx; (void)count; (void)reset; return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "not built yet");
}
kvjit_status kvjit_store_kv_cache_prewarm(kvjit_context *ctx, const kvjit_store_kv_variant *variant, unsigned *compiled, unsigned *cached) {
  (void)ctx; (void)variant; (void)compiled; (void)cached; return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "not built yet");
}
kvjit_status kvjit_store_kv_variant_format(const kvjit_store_kv_variant *variant, char *out, size_t capacity) {
  (void)variant; (void)out; (void)capacity; return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "not built yet");
}
kvjit_status kvjit_store_kv_variant_parse(kvjit_store_kv_variant *out, const char *line) {
  (void)out; (void)line; return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "not built yet");
}
