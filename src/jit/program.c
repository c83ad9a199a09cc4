/*
 * What a built program tells its caller (kvjit.h's kvjit_program_* accessors): log, key, target,
 * status, binary, kernel names and kernels. A program is immutable once READY but for its load,
 * whose kernels pointer is read with acquire (program.h).
 */
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "program.h"
#include "status.h"

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

