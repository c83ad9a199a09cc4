/* Status table and thread-local error detail. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[512];

const char *kvjit_status_name(kvjit_status status) {
  switch (status) {
#define KVJIT_STATUS_NAME_(name, value, msg)                                                     \
  case KVJIT_##name:                                                                             \
    return #name;
    KVJIT_STATUS_MAP(KVJIT_STATUS_NAME_)
#undef KVJIT_STATUS_NAME_
  }
  return "UNKNOWN";
}

const char *kvjit_status_string(kvjit_status status) {
  switch (status) {
#define KVJIT_STATUS_STRING_(name, value, msg)                                                   \
  case KVJIT_##name:                                                                             \
    return msg;
    KVJIT_STATUS_MAP(KVJIT_STATUS_STRING_)
#undef KVJIT_STATUS_STRING_
  }
  return "unknown status";
}

const char *kvjit_last_error(void) { return last_error; }

void kvjit_clear_error(void) { last_error[0] = '\0'; }

kvjit_status kvjit_fail(kvjit_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

kvjit_status kvjit_check_version(unsigned version, unsigned newest, const char *what, const char *init) {
  if (version >= 1 && version <= newest) return KVJIT_OK;
  if (newest == 1) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->version: %u, expected 1 (use %s)", what, version, init);
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s->version: %u, expected 1..%u (use %s)", what, version, newest, init);
}

kvjit_status kvjit_struct_init(void *out, unsigned version, const void *defaults, const size_t *ends, unsigned newest,
                               const char *what) {
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%s: NULL", what);
  if (version < 1 || version > newest) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "version: %u, expected 1..%u for %s", version, newest, what);
  }
  memcpy(out, defaults, ends[version]);
  memcpy(out, &version, sizeof version);
  return KVJIT_OK;
}

void kvjit_log_line(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One fprintf per line keeps lines from several threads whole. */
  fprintf(stderr, "kvjit: %s\n", line);
}

unsigned kvjit_version_number(void) { return KVJIT_VERSION_NUMBER; }

#define KVJIT_STR2_(x) #x
#define KVJIT_STR_(x) KVJIT_STR2_(x)
const char *kvjit_version_string(void) {
  return KVJIT_STR_(KVJIT_VERSION_MAJOR) "." KVJIT_STR_(KVJIT_VERSION_MINOR) "." KVJIT_STR_(KVJIT_VERSION_PATCH);
}
