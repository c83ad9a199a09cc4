/* NVRTC compile to cubin/PTX, with name expressions lowered and their errors mapped back. */
#include "compile.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvrtc_lib.h"
#include "status.h"
#include "target.h"

/* State-leaking compiles started in this process (process-wide, as NVRTC's own state is). */
static atomic_uint leaking_compiles;

int kvjit_nvrtc_leaks_state(const char *o) {
  const char *value = NULL;
  if (!strncmp(o, "--Ofast-compile", 15)) value = o + 15;
  else if (!strncmp(o, "-Ofast-compile", 14)) value = o + 14;
  else if (!strncmp(o, "-Ofc", 4)) value = o + 4;
  if (value == NULL) return 0;
  if (*value == '=') value++;
  return strcmp(value, "0") != 0;
}

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

/*
 * NVRTC reports an error in a name expression at "__nv_name_map(N)", a line of a file it made up,
 * followed by "#pragma nv_mangled_name <expression>". Point such lines at the caller's
 * kernels[i] "<what they wrote>" instead. Returns a new log, or NULL to keep the old one.
 */
static char *map_name_errors(const char *log, const kvjit_compile_input *in) {
  static const char marker[] = "__nv_name_map(";
  if (strstr(log, marker) == NULL) return NULL;
  /* Each marked line grows by at most the longest kernel name and the "kernels[i] \"\"" around it. */
  size_t longest = 0, marked = 0;
  for (size_t i = 0; i < in->num_kernels; i++) {
    size_t l = strlen(in->kernels_given[i]);
    if (l > longest) longest = l;
  }
  for (const char *p = strstr(log, marker); p; p = strstr(p + 1, marker)) marked++;
  size_t cap = strlen(log) + marked * (longest + 48) + 1;
  char *out = malloc(cap);
  if (out == NULL) return NULL;
  size_t used = 0;
  for (const char *line = log; *line;) {
    size_t len = strcspn(line, "\n");
    const char *next = line[len] ? line + len + 1 : line + len;
    const char *close = strchr(line, ')');
    long index = -1;
    if (!strncmp(line, marker, sizeof marker - 1) && close && close < line + len) {
      /* The expression is on the pragma line that follows. */
      const char *pragma = strstr(next, "nv_mangled_name ");
      size_t next_len = strcspn(next, "\n");
      if (pragma && pragma < next + next_len) {
        const char *expr = pragma + 16;
        size_t elen = (size_t)(next + next_len - expr);
        if (elen && expr[0] == '&') expr++, elen--;
        for (size_t i = 0; i < in->num_kernels && index < 0; i++) {
          if (strlen(in->kernels[i]) == elen && !memcmp(in->kernels[i], expr, elen)) index = (long)i;
        }
      }
    }
    if (index >= 0) {
      int n = snprintf(out + used, cap - used, "kernels[%ld] \"%s\"", index, in->kernels_given[index]);
      if (n < 0 || (size_t)n >= cap - used) break;
      used += (size_t)n;
      size_t rest = (size_t)(line + len - (close + 1));
      memcpy(out + used, close + 1, rest);
      used += rest;
    } else {
      memcpy(out + used, line, len);
      used += len;
    }
    if (line[len]) out[used++] = '\n';
    line = next;
  }
  out[used] = '\0';
  return out;
}

static kvjit_status copy_output(const kvjit_nvrtc *nv, nvrtcProgram prog, const kvjit_key_target *target,
                                kvjit_compiled *out) {
  nvrtcResult r;
  if (target->kind == KVJIT_PAYLOAD_CUBIN) {
    r = nv->GetCUBINSize(prog, &out->payload_len);
    if (r == NVRTC_SUCCESS && (out->payload = malloc(out->payload_len ? out->payload_len : 1)) == NULL) {
      return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    }
    if (r == NVRTC_SUCCESS) r = nv->GetCUBIN(prog, (char *)out->payload);
  } else {
    r = nv->GetPTXSize(prog, &out->payload_len);
    if (r == NVRTC_SUCCESS && (out->payload = malloc(out->payload_len ? out->payload_len : 1)) == NULL) {
      return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    }
    if (r == NVRTC_SUCCESS) r = nv->GetPTX(prog, (char *)out->payload);
  }
  if (r != NVRTC_SUCCESS) return nvrtc_fail(nv, r, target->kind == KVJIT_PAYLOAD_CUBIN ? "nvrtcGetCUBIN" : "nvrtcGetPTX");
  if (out->payload_len == 0) return kvjit_fail(KVJIT_ERR_NVRTC, "NVRTC produced no %s", target->kind == KVJIT_PAYLOAD_CUBIN ? "cubin" : "PTX");
  return KVJIT_OK;
}

kvjit_status kvjit_nvrtc_compile(kvjit_compiled *out, const kvjit_compile_input *in, const kvjit_key_target *target) {
  memset(out, 0, sizeof *out);
  const kvjit_nvrtc *nv;
  kvjit_status st = kvjit_nvrtc_get(&nv);
  if (st != KVJIT_OK) {
    out->log = strdup("");
    return st;
  }
  uint64_t t0 = now_ns();
  unsigned leaks_before = in->leaks_state ? atomic_fetch_add(&leaking_compiles, 1) : atomic_load(&leaking_compiles);
  const char **opts = NULL;
  char **exprs = NULL;
  nvrtcProgram prog = NULL;
  nvrtcResult r = nv->CreateProgram(&prog, in->source, in->name, (int)in->num_headers, in->header_sources,
                                    in->header_names);
  if (r != NVRTC_SUCCESS) {
    st = nvrtc_fail(nv, r, "nvrtcCreateProgram");
    goto done;
  }
  exprs = calloc(in->num_kernels + 1, sizeof *exprs);
  out->lowered = calloc(in->num_kernels + 1, sizeof *out->lowered);
  opts = calloc(in->num_options + 1, sizeof *opts);
  if (!exprs || !out->lowered || !opts) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto done;
  }
  out->num_kernels = in->num_kernels;
  for (size_t i = 0; i < in->num_kernels; i++) {
    /* Every kernel goes through a name expression: for extern "C" names the lowered name is the
     * name itself, for templates it is the mangled instance NVRTC emitted. */
    size_t n = strlen(in->kernels[i]);
    if ((exprs[i] = malloc(n + 2)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
    exprs[i][0] = '&';
    memcpy(exprs[i] + 1, in->kernels[i], n + 1);
    if ((r = nv->AddNameExpression(prog, exprs[i])) != NVRTC_SUCCESS) {
      st = nvrtc_fail(nv, r, "nvrtcAddNameExpression");
      goto done;
    }
  }
  char arch_opt[48];
  kvjit_target_option(target, arch_opt, sizeof arch_opt);
  for (size_t i = 0; i < in->num_options; i++) opts[i] = in->options[i];
  opts[in->num_options] = arch_opt;
  nvrtcResult compile_res = nv->CompileProgram(prog, (int)in->num_options + 1, opts);

  size_t log_len = 0;
  if (nv->GetProgramLogSize(prog, &log_len) != NVRTC_SUCCESS || log_len == 0) log_len = 1;
  if ((out->log = malloc(log_len)) == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
    goto done;
  }
  out->log[0] = '\0';
  if (log_len > 1) nv->GetProgramLog(prog, out->log);
  char *mapped = map_name_errors(out->log, in);
  if (mapped) {
    free(out->log);
    out->log = mapped;
  }
  if (compile_res != NVRTC_SUCCESS) {
    char line[256];
    first_error_line(out->log, line, sizeof line);
    if (strstr(out->log, "--nv_arch") != NULL) {
      st = kvjit_target_unknown(kvjit_target_code(target), "NVRTC refused it");
    } else {
      st = kvjit_fail(KVJIT_ERR_COMPILE, "%s: %s: %s", in->name, nv->GetErrorString(compile_res), line);
    }
    goto done;
  }
  for (size_t i = 0; i < in->num_kernels; i++) {
    const char *lowered = NULL;
    r = nv->GetLoweredName(prog, exprs[i], &lowered);
    if (r != NVRTC_SUCCESS || lowered == NULL) {
      st = kvjit_fail(KVJIT_ERR_COMPILE, "kernels[%zu] \"%s\": not a __global__ function of the program (%s)", i,
                      in->kernels_given[i], nv->GetErrorString(r));
      goto done;
    }
    if ((out->lowered[i] = strdup(lowered)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile: out of memory");
      goto done;
    }
  }
  st = copy_output(nv, prog, target, out);

done:
  if (out->log == NULL) out->log = strdup("");
  if (prog) nv->DestroyProgram(&prog);
  if (exprs) {
    for (size_t i = 0; i < in->num_kernels; i++) free(exprs[i]);
    free(exprs);
  }
  free(opts);
  out->ns = now_ns() - t0;
  /* Only a compile that no state-leaking compile preceded or overlapped matches a fresh process's. */
  out->publishable = leaks_before == 0 && atomic_load(&leaking_compiles) == (in->leaks_state ? 1u : 0u);
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
