/* NVRTC compile to cubin/PTX, with name expressions lowered. */
#include "compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvrtc_lib.h"
#include "status.h"
#include "target.h"

static kvjit_status nvrtc_fail(const kvjit_nvrtc *nv, nvrtcResult r, const char *what) {
  return kvjit_fail(r == NVRTC_ERROR_OUT_OF_MEMORY ? KVJIT_ERR_OUT_OF_MEMORY : KVJIT_ERR_NVRTC, "%s: %s", what,
                    nv->GetErrorString(r));
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* First line of the log that says "error", for the one-line last-error message. */
static void first_error_line(const char *log, char *buf, size_t cap) {
  const char *hit = strstr(log, "error");
  const char *start = hit ? hit : log;
  while (hit && start > log && start[-1] != '\n') start--;
  size_t n = strcspn(start, "\n");
  if (n >= cap) n = cap - 1;
  memcpy(buf, start, n);
  buf[n] = '\0';
}

kvjit_status kvjit_nvrtc_compile(kvjit_compiled *out, const kvjit_program_desc *desc, const kvjit_key_target *target) {
  memset(out, 0, sizeof *out);
  const kvjit_nvrtc *nv;
  kvjit_status st = kvjit_nvrtc_get(&nv);
  if (st != KVJIT_OK) {
    out->log = strdup("");
    return st;
  }
  uint64_t t0 = now_ns();
  const char **hdr_src = NULL, **hdr_names = NULL;
  const char **opts = NULL;
  char **exprs = NULL;
  nvrtcProgram prog = NULL;
  nvrtcResult r;

  if (desc->num_headers > 0) {
    hdr_src = calloc(desc->num_headers, sizeof *hdr_src);
    hdr_names = calloc(desc->num_headers, sizeof *hdr_names);
    if (!hdr_src || !hdr_names) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
    for (size_t i = 0; i < desc->num_headers; i++) {
      hdr_src[i] = desc->headers[i].source;
      hdr_names[i] = desc->headers[i].name;
    }
  }
  r = nv->CreateProgram(&prog, desc->source, desc->name, (int)desc->num_headers, hdr_src, hdr_names);
  if (r != NVRTC_SUCCESS) {
    st = nvrtc_fail(nv, r, "nvrtcCreateProgram");
    goto done;
  }
  exprs = calloc(desc->num_kernels + 1, sizeof *exprs);
  out->lowered = calloc(desc->num_kernels + 1, sizeof *out->lowered);
  opts = calloc(desc->num_options + 1, sizeof *opts);
  if (!exprs || !out->lowered || !opts) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto done;
  }
  out->num_kernels = desc->num_kernels;
  for (size_t i = 0; i < desc->num_kernels; i++) {
    /* Every kernel goes through a name expression: for extern "C" names the lowered name is the
     * name itself, for templates it is the mangled instance NVRTC emitted. */
    const char *k = desc->kernels[i];
    size_t n = strlen(k);
    exprs[i] = malloc(n + 2);
    if (!exprs[i]) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
    exprs[i][0] = '&';
    memcpy(exprs[i] + (k[0] == '&' ? 0 : 1), k, n + 1);
    r = nv->AddNameExpression(prog, exprs[i]);
    if (r != NVRTC_SUCCESS) {
      st = nvrtc_fail(nv, r, "nvrtcAddNameExpression");
      goto done;
    }
  }
  char arch_opt[48];
  kvjit_target_option(target, arch_opt, sizeof arch_opt);
  for (size_t i = 0; i < desc->num_options; i++) opts[i] = desc->options[i];
  opts[desc->num_options] = arch_opt;
  nvrtcResult compile_res = nv->CompileProgram(prog, (int)desc->num_options + 1, opts);

  size_t log_len = 0;
  if (nv->GetProgramLogSize(prog, &log_len) != NVRTC_SUCCESS || log_len == 0) log_len = 1;
  out->log = malloc(log_len);
  if (!out->log) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto done;
  }
  out->log[0] = '\0';
  if (log_len > 1) nv->GetProgramLog(prog, out->log);
  if (compile_res != NVRTC_SUCCESS) {
    char line[256];
    first_error_line(out->log, line, sizeof line);
    st = kvjit_fail(KVJIT_ERR_COMPILE, "%s: %s: %s", desc->name, nv->GetErrorString(compile_res), line);
    goto done;
  }
  for (size_t i = 0; i < desc->num_kernels; i++) {
    const char *lowered = NULL;
    r = nv->GetLoweredName(prog, exprs[i], &lowered);
    if (r != NVRTC_SUCCESS || lowered == NULL) {
      st = kvjit_fail(KVJIT_ERR_COMPILE, "kernels[%zu] \"%s\": not a __global__ function of the program (%s)", i,
                      desc->kernels[i], nv->GetErrorString(r));
      goto done;
    }
    out->lowered[i] = strdup(lowered);
    if (!out->lowered[i]) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
  }
  if (target->kind == KVJIT_PAYLOAD_CUBIN) {
    r = nv->GetCUBINSize(prog, &out->payload_len);
    if (r == NVRTC_SUCCESS && (out->payload = malloc(out->payload_len ? out->payload_len : 1)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
    if (r == NVRTC_SUCCESS) r = nv->GetCUBIN(prog, (char *)out->payload);
  } else {
    r = nv->GetPTXSize(prog, &out->payload_len);
    if (r == NVRTC_SUCCESS && (out->payload = malloc(out->payload_len ? out->payload_len : 1)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
    if (r == NVRTC_SUCCESS) r = nv->GetPTX(prog, (char *)out->payload);
  }
  if (r != NVRTC_SUCCESS) st = nvrtc_fail(nv, r, "nvrtcGetCUBIN/PTX");

done:
  if (out->log == NULL) out->log = strdup("");
  if (prog) nv->DestroyProgram(&prog);
  if (exprs) {
    for (size_t i = 0; i < desc->num_kernels; i++) free(exprs[i]);
    free(exprs);
  }
  free(opts);
  free(hdr_src);
  free(hdr_names);
  out->ns = now_ns() - t0;
  if (st != KVJIT_OK) {
    free(out->payload);
    out->payload = NULL;
    out->payload_len = 0;
  }
  return st;
}

void kvjit_compiled_free(kvjit_compiled *c) {
  if (c == NULL) return;
  free(c->payload);
  if (c->lowered) {
    for (size_t i = 0; i < c->num_kernels; i++) free(c->lowered[i]);
    free(c->lowered);
  }
  free(c->log);
  memset(c, 0, sizeof *c);
}
