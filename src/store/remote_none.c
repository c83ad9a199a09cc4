/* The remote cache tier in a build without libcurl (meson -Dremote=disabled): no remote at all. */
#include <stdlib.h>

#include "remote.h"
#include "status.h"
#include "url.h"

kvjit_status kvjit_remote_open(kvjit_remote **out, const kvjit_remote_config *config) {
  *out = NULL;
  if (config->urls == NULL || config->urls[0] == '\0') return KVJIT_OK;
  char shown[1024];
  kvjit_url_redact(shown, sizeof shown, config->urls);
  return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "remote cache: this kvjit was built without libcurl; %s is not used",
                    shown);
}

void kvjit_remote_close(kvjit_remote *remote) { (void)remote; }
int kvjit_remote_writable(const kvjit_remote *remote) {
  (void)remote;
  return 0;
}
int kvjit_remote_get(kvjit_remote *remote, const kvjit_key *key, uint8_t **data, size_t *len, size_t *from) {
  (void)remote, (void)key, (void)data, (void)len, (void)from;
  return 0;
}
void kvjit_remote_accept(kvjit_remote *remote, size_t from) { (void)remote, (void)from; }
void kvjit_remote_reject(kvjit_remote *remote, size_t from, const char *why) { (void)remote, (void)from, (void)why; }
int kvjit_remote_head(kvjit_remote *remote, const kvjit_key *key, size_t max_bytes, uint8_t **data, size_t *len,
                      uint64_t *total) {
  (void)remote, (void)key, (void)max_bytes, (void)data, (void)len, (void)total;
  return -1;
}
void kvjit_remote_put(kvjit_remote *remote, const kvjit_key *key, const uint8_t *data, size_t len) {
  (void)remote, (void)key, (void)data, (void)len;
}
const kvjit_remote_counters *kvjit_remote_get_counters(const kvjit_remote *remote) {
  static kvjit_remote_counters none;
  (void)remote;
  return &none;
}
const char *kvjit_remote_urls(const kvjit_remote *remote) {
  (void)remote;
  return "";
}
int kvjit_remote_get_hint(kvjit_remote *remote, const kvjit_key *id, kvjit_key *out) {
  (void)remote, (void)id, (void)out;
  return 0;
}
void kvjit_remote_put_indexed(kvjit_remote *remote, const kvjit_key *key, const uint8_t *data, size_t len,
                              const kvjit_key *hint_id) {
  (void)remote, (void)key, (void)data, (void)len, (void)hint_id;
}
