/*
 * What a built program tells its caller (kvjit.h's kvjit_program_* accessors): log, key, target,
 * status, binary, kernel names and kernels. A program is immutable once READY but for its load,
 * whose kernels pointer is read with acquire (program.h); and a program's making, freeing and the
 * copy of a cache entry it is filled from.
 */
#include "program.h"

#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "status.h"
#include "target.h"

const char *kvjit_program_log(const kvjit_program *program) {
  return program && program->log ? program->log : "";
}

const char *kvjit_program_key(const kvjit_program *program) { return program ? program->key_hex : ""; }

int kvjit_program_arch(const kvjit_program *program) { return program ? program->arch : 0; }

kvjit_status kvjit_program_status(const kvjit_program *program) {
  if (program == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program is NULL");
  if (program->state == PROGRAM_READY) return KVJIT_OK;
  return kvjit_fail(program->status, "%s", program->error ? program->error : "build failed");
}

kvjit_status kvjit_program_binary(const kvjit_program *program, const void **data, size_t *bytes) {
  if (program == NULL || data == NULL || bytes == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program, data or bytes is NULL");
  }
  *data = NULL;
  *bytes = 0;
  if (program->state != PROGRAM_READY) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program %s failed to build; it has no binary", program->name);
  }
  /* An alias's code is its bundle's binary, which holds its kernel among others. */
  const kvjit_program *own = program->bundle ? program->bundle : program;
  *data = own->payload;
  *bytes = own->payload_len;
  return KVJIT_OK;
}

size_t kvjit_program_num_kernels(const kvjit_program *program) {
  return program && program->state == PROGRAM_READY ? program->num_kernels : 0;
}

const char *kvjit_program_kernel_name(const kvjit_program *program, size_t index) {
  return program && program->state == PROGRAM_READY && index < program->num_kernels ? program->names[index] : NULL;
}

const char *kvjit_program_lowered_name(const kvjit_program *program, size_t index) {
  return program && program->state == PROGRAM_READY && index < program->num_kernels ? program->lowered[index] : NULL;
}

kvjit_status kvjit_program_kernel(const kvjit_program *program, kvjit_kernel **out, const char *name, size_t index) {
  if (program == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program or out is NULL");
  *out = NULL;
  if (program->state != PROGRAM_READY) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "program %s failed to build; it has no kernels", program->name);
  }
  kvjit_kernel *kernels = atomic_load_explicit(&program->kernels, memory_order_acquire);
  if (kernels == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "program %s is not loaded (kvjit_program_build does not load; kvjit_program_get does)",
                      program->name);
  }
  if (name == NULL) {
    if (index >= program->num_kernels) {
      return kvjit_fail(KVJIT_ERR_NOT_FOUND, "index %zu: program %s has %zu kernels", index, program->name,
                        program->num_kernels);
    }
    *out = &kernels[index];
    return KVJIT_OK;
  }
  char small[256];
  size_t len = strlen(name);
  char *canonical = len < sizeof small ? small : malloc(len + 1);
  if (canonical == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "kernel lookup: out of memory");
  kvjit_name_canonical(name, canonical);
  for (size_t i = 0; i < program->num_kernels && *out == NULL; i++) {
    if (strcmp(program->names[i], canonical) == 0 || strcmp(program->lowered[i], name) == 0) *out = &kernels[i];
  }
  if (canonical != small) free(canonical);
  if (*out != NULL) return KVJIT_OK;
  return kvjit_fail(KVJIT_ERR_NOT_FOUND, "kernel \"%s\": not among the kernels of program %s", name, program->name);
}


/* ---- making and freeing -------------------------------------------------------------------- */

kvjit_program *kvjit_program_new(const kvjit_request *req, const kvjit_key_target *target, const kvjit_key *key) {
  kvjit_program *p = calloc(1, sizeof *p);
  if (p == NULL || (p->name = strdup(req->desc->name)) == NULL) {
    free(p);
    return NULL;
  }
  p->key = *key;
  kvjit_key_hex(key, p->key_hex);
  p->content = req->content;
  kvjit_request_digests(req, &p->digests);
  p->target = *target;
  p->arch = kvjit_target_code(target);
  p->state = PROGRAM_BUILDING;
  p->publishable = 1;
  return p;
}

void kvjit_program_free(kvjit_program *p, const kvjit_driver *drv) {
  /* An alias's library and kernels are its bundle's. */
  if (p->library && drv && p->bundle == NULL) drv->cuLibraryUnload(p->library);
  for (size_t i = 0; i < p->num_kernels; i++) {
    if (p->names) free(p->names[i]);
    if (p->lowered) free(p->lowered[i]);
  }
  free(p->names);
  free(p->lowered);
  if (p->bundle == NULL) free(atomic_load(&p->kernels));
  free(p->payload);
  free(p->retired);
  if (p->retired_lowered) {
    for (size_t i = 0; i < p->num_kernels; i++) free(p->retired_lowered[i]);
    free(p->retired_lowered);
  }
  free(p->name);
  free(p->error);
  free(p->log);
  free(p);
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

kvjit_status kvjit_program_copy_entry(const kvjit_entry_view *view, size_t n, char **names, char **lowered,
                                      uint8_t **payload, size_t *payload_len) {
  for (size_t i = 0; i < n; i++) {
    const char *name, *low;
    size_t name_len, low_len;
    kvjit_entry_kernel(view, (uint32_t)i, &name, &name_len, &low, &low_len);
    if (names != NULL && (names[i] = dup_n(name, name_len)) == NULL) goto oom;
    if ((lowered[i] = dup_n(low, low_len)) == NULL) goto oom;
  }
  if (payload != NULL) {
    /* Kept in memory: kvjit_program_binary() hands it out and a load needs it. */
    if ((*payload = (uint8_t *)dup_n((const char *)view->payload, view->payload_len)) == NULL) goto oom;
    *payload_len = view->payload_len;
  }
  return KVJIT_OK;
oom:
  return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "program: out of memory");
}
