/* Program requests (request.h): checking a description, its options, its digest, NVRTC's input. */
#include "request.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "status.h"
#include "target.h"

/* Options that make NVRTC read or write files kvjit cannot key, or give something it cannot load. */
static const char *refused_reason(const char *o) {
  static const struct {
    const char *prefix;
    const char *why;
  } refused[] = {
      {"--gpu-architecture", "set the target with desc->arch (kvjit_parse_target)"},
      {"-arch", "set the target with desc->arch (kvjit_parse_target)"},
      {"--pch", "precompiled headers are read from files kvjit cannot key"},
      {"-pch", "precompiled headers are read from files kvjit cannot key"},
      {"--create-pch", "precompiled headers are read from files kvjit cannot key"},
      {"-create-pch", "precompiled headers are read from files kvjit cannot key"},
      {"--use-pch", "precompiled headers are read from files kvjit cannot key"},
      {"-use-pch", "precompiled headers are read from files kvjit cannot key"},
      {"--pch-dir", "precompiled headers are read from files kvjit cannot key"},
      {"-pch-dir", "precompiled headers are read from files kvjit cannot key"},
      {"--fdevice-syntax-only", "it produces no code to load"},
      {"-fdevice-syntax-only", "it produces no code to load"},
      {"--dlink-time-opt", "it produces LTO IR, which kvjit does not load"},
      {"-dlto", "it produces LTO IR, which kvjit does not load"},
      {"--gen-opt-lto", "it produces LTO IR, which kvjit does not load"},
      {"-gen-opt-lto", "it produces LTO IR, which kvjit does not load"},
      {"--optix-ir", "it produces OptiX IR, which kvjit does not load"},
      {"-optix-ir", "it produces OptiX IR, which kvjit does not load"},
      /* Options that write files (like -o): a compile must write nothing but its cache entry,
       * and a hit would not write them, so their output could not be relied on anyway. */
      {"--time", "it writes a file (a compile writes nothing but its cache entry)"},
      {"-time", "it writes a file (a compile writes nothing but its cache entry)"},
      {"--fdevice-time-trace", "it writes a file (a compile writes nothing but its cache entry)"},
      {"-fdevice-time-trace", "it writes a file (a compile writes nothing but its cache entry)"},
      {"--device-time-trace", "it writes a file (a compile writes nothing but its cache entry)"},
      {"--dependency-output", "it writes a file (a compile writes nothing but its cache entry)"},
      {"-MF", "it writes a file (a compile writes nothing but its cache entry)"},
      {"--generate-dependencies-with-compile", "it writes a file (a compile writes nothing but its cache entry)"},
      {"-MD", "it writes a file (a compile writes nothing but its cache entry)"},
      {"--generate-nonsystem-dependencies-with-compile",
       "it writes a file (a compile writes nothing but its cache entry)"},
      {"-MMD", "it writes a file (a compile writes nothing but its cache entry)"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    size_t l = strlen(refused[i].prefix);
    if (!strncmp(o, refused[i].prefix, l) && (o[l] == '\0' || o[l] == '=' || o[l] == ' ')) return refused[i].why;
  }
  return NULL;
}

/* ptxas options (given through --ptxas-options / -Xptxas, comma-separated) that name a file. */
static int ptxas_file_option(const char *value) {
  static const char *const files[] = {"-o", "--output-file", "-optf", "--options-file", "--dump-callgraph"};
  for (const char *p = value; *p;) {
    p += strspn(p, ", ");
    size_t len = strcspn(p, ", = ");
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
      if (strlen(files[i]) == len && strncmp(p, files[i], len) == 0) return 1;
    }
    /* "-o/path": the short form glued to its value. */
    if (len > 2 && p[0] == '-' && p[1] == 'o' && !isalpha((unsigned char)p[2]) && p[2] != '-') return 1;
    p += strcspn(p, ",");
  }
  return 0;
}

/*
 * An option with a value, in each of the forms NVRTC takes: "NAME=value", "NAMEvalue" (short
 * forms only), "NAME value", or "NAME" with the value as the next option. Returns the value (and
 * how many options it spans), or NULL when @p o is not this option.
 */
static const char *option_value(const char *const *opts, size_t count, size_t i, const char *name, int glued,
                                size_t *span) {
  const char *o = opts[i];
  size_t l = strlen(name);
  if (strncmp(o, name, l) != 0) return NULL;
  *span = 1;
  const char *v = o + l;
  if (*v == '\0') {
    if (i + 1 >= count) return "";
    *span = 2;
    return opts[i + 1];
  }
  if (*v == '=' || *v == ' ') return v + 1 + strspn(v + 1, " ");
  return glued ? v : NULL;
}

kvjit_status kvjit_request_check(const kvjit_program_desc *desc) {
  if (desc == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc is NULL");
  kvjit_status st = kvjit_check_version(desc->version, KVJIT_PROGRAM_DESC_VERSION, "desc", "KVJIT_PROGRAM_DESC_INIT");
  if (st != KVJIT_OK) return st;
  if (desc->name == NULL || desc->name[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->name: empty");
  if (desc->source == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->source: NULL");
  if (desc->num_options > 0 && desc->options == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options: NULL with num_options %zu", desc->num_options);
  }
  for (size_t i = 0; i < desc->num_options; i++) {
    if (desc->options[i] == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu]: NULL", i);
  }
  if (desc->num_headers > 0 && desc->headers == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->headers: NULL with num_headers %zu", desc->num_headers);
  }
  for (size_t i = 0; i < desc->num_headers; i++) {
    if (desc->headers[i].name == NULL || desc->headers[i].source == NULL || desc->headers[i].name[0] == '\0') {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->headers[%zu]: NULL or empty name, or NULL source", i);
    }
  }
  if (desc->num_kernels == 0 || desc->kernels == NULL) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->kernels: at least one kernel name is needed");
  }
  if (desc->num_kernels > 4096) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->num_kernels: %zu, at most 4096", desc->num_kernels);
  }
  for (size_t i = 0; i < desc->num_kernels; i++) {
    if (desc->kernels[i] == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->kernels[%zu]: NULL", i);
  }
  return kvjit_target_check(desc->arch, 1, "desc->arch");
}

static kvjit_status sort_options(kvjit_request *r, const kvjit_program_desc *desc) {
  size_t n = desc->num_options;
  r->options = calloc(n + 1, sizeof *r->options);
  r->owned_options = calloc(n + 1, sizeof *r->owned_options);
  r->dirs = calloc(n + 1, sizeof *r->dirs);
  r->pre = calloc(n + 1, sizeof *r->pre);
  r->pre_option = calloc(n + 1, sizeof *r->pre_option);
  if (!r->options || !r->owned_options || !r->dirs || !r->pre || !r->pre_option) {
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "request: out of memory");
  }
  const char *const *opts = desc->options;
  for (size_t i = 0; i < n;) {
    const char *o = opts[i];
    const char *why = refused_reason(o);
    if (why) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu] \"%s\": refused: %s", i, o, why);
    size_t span = 1;
    /* ptxas runs inside NVRTC: its own file options would read or write files the same way. */
    const char *v = option_value(opts, n, i, "--ptxas-options", 0, &span);
    if (v == NULL) v = option_value(opts, n, i, "-Xptxas", 0, &span);
    if (v != NULL && ptxas_file_option(v)) {
      return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu] \"%s\": refused: ptxas \"%s\" reads or writes a file",
                        i, o, v);
    }
    v = option_value(opts, n, i, "--include-path", 0, &span);
    if (v == NULL) v = option_value(opts, n, i, "-I", 1, &span);
    if (v != NULL) {
      /* kvjit searches include dirs itself; NVRTC gets the headers, never the dir. */
      if (v[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu] \"%s\": no dir", i, o);
      r->dirs[r->num_dirs++] = v;
      i += span;
      continue;
    }
    v = option_value(opts, n, i, "--pre-include", 0, &span);
    if (v == NULL) v = option_value(opts, n, i, "-include", 0, &span);
    if (v != NULL) {
      if (v[0] == '\0') return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->options[%zu] \"%s\": no header", i, o);
      r->pre_option[r->num_pre] = r->num_options;
      r->pre[r->num_pre++] = v;
      r->options[r->num_options++] = NULL; /* filled once the header is resolved */
      i += span;
      continue;
    }
    r->leaks_state |= kvjit_nvrtc_leaks_state(o);
    r->options[r->num_options++] = o;
    i++;
  }
  return KVJIT_OK;
}

void kvjit_request_digests(const kvjit_request *r, kvjit_entry_digests *out) {
  const kvjit_program_desc *desc = r->desc;
  kvjit_key_builder b;
  memset(out, 0, sizeof *out);
  kvjit_key_content_begin(&b, "kvjit-options");
  kvjit_key_put_u64(&b, r->num_options);
  for (size_t i = 0; i < r->num_options; i++) kvjit_key_put_str(&b, 'O', r->options[i]);
  kvjit_key_content_end(&b, &out->options);
  kvjit_key_content_begin(&b, "kvjit-sources");
  kvjit_key_put_str(&b, 'S', desc->source);
  kvjit_key_put_u64(&b, desc->num_headers);
  for (size_t i = 0; i < desc->num_headers; i++) {
    kvjit_key_put_str(&b, 'H', desc->headers[i].name);
    kvjit_key_put_str(&b, 'C', desc->headers[i].source);
  }
  if (kvjit_includes_matter(&r->inc)) kvjit_includes_hash_files(&r->inc, &b);
  kvjit_key_content_end(&b, &out->sources);
  if (r->inc.uses_toolkit) out->toolkit = r->inc.toolkit;
}

kvjit_status kvjit_request_init(kvjit_request *r, kvjit_include_memo *memo, const kvjit_program_desc *desc) {
  memset(r, 0, sizeof *r);
  kvjit_status st = kvjit_request_check(desc);
  if (st != KVJIT_OK) return st;
  r->desc = desc;
  if ((st = sort_options(r, desc)) != KVJIT_OK) goto fail;
  r->kernels = calloc(desc->num_kernels, sizeof *r->kernels);
  if (r->kernels == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "request: out of memory");
    goto fail;
  }
  for (size_t i = 0; i < desc->num_kernels; i++) {
    if ((r->kernels[i] = kvjit_name_canonical_dup(desc->kernels[i])) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "request: out of memory");
      goto fail;
    }
    if (r->kernels[i][0] == '\0') {
      st = kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "desc->kernels[%zu]: empty", i);
      goto fail;
    }
  }
  kvjit_include_input *in = &r->inc_in;
  in->name = desc->name;
  in->source = desc->source;
  in->num_headers = desc->num_headers;
  in->headers = desc->headers;
  in->num_dirs = r->num_dirs;
  in->dirs = r->dirs;
  in->num_pre = r->num_pre;
  in->pre = r->pre;
  if ((st = kvjit_includes_resolve(&r->inc, memo, in)) != KVJIT_OK) goto fail;
  for (size_t i = 0; i < r->num_pre; i++) {
    const char *name = kvjit_includes_pre_name(&r->inc, in, i);
    size_t l = strlen(name) + 16;
    char *o = malloc(l);
    if (o == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "request: out of memory");
      goto fail;
    }
    snprintf(o, l, "--pre-include=%s", name);
    r->owned_options[i] = o;
    r->options[r->pre_option[i]] = o;
  }
  /* The content digest: for a program that includes nothing it is kvjit_key_content()'s. */
  kvjit_key_builder b;
  kvjit_key_content_begin(&b, "kvjit-content");
  kvjit_key_content_program(&b, desc->name, desc->source, r->num_options, r->options, desc->num_headers,
                            desc->headers);
  if (kvjit_includes_matter(&r->inc)) kvjit_includes_hash(&r->inc, &b);
  kvjit_key_content_end(&b, &r->content);
  return KVJIT_OK;

fail:
  kvjit_request_free(r);
  return st;
}

void kvjit_request_free(kvjit_request *r) {
  if (r == NULL) return;
  if (r->kernels && r->desc) {
    for (size_t i = 0; i < r->desc->num_kernels; i++) free(r->kernels[i]);
  }
  free(r->kernels);
  if (r->owned_options) {
    for (size_t i = 0; i < r->num_pre; i++) free(r->owned_options[i]);
  }
  free(r->owned_options);
  free(r->options);
  free(r->dirs);
  free(r->pre);
  free(r->pre_option);
  kvjit_includes_free(&r->inc);
  memset(r, 0, sizeof *r);
}

void kvjit_request_key(const kvjit_request *r, const kvjit_key_target *target, kvjit_key *out) {
  kvjit_key_derive(out, target, r->desc->num_kernels, (const char *const *)r->kernels, &r->content);
}

kvjit_status kvjit_request_input_make(const kvjit_request *r, kvjit_request_input *out) {
  memset(out, 0, sizeof *out);
  const kvjit_includes *inc = &r->inc;
  size_t nfiles = inc->num_files;
  out->texts = calloc(nfiles + 1, sizeof *out->texts);
  out->names = calloc(nfiles + 1, sizeof *out->names);
  out->options = calloc(r->num_options + 3, sizeof *out->options);
  if (!out->texts || !out->names || !out->options) goto oom;
  out->num_texts = nfiles;
  for (size_t i = 0; i < nfiles; i++) {
    if ((out->texts[i] = kvjit_includes_rewrite(inc, i)) == NULL) goto oom;
    out->names[i] = inc->files[i].name;
  }
  size_t n = 0;
  for (size_t i = 0; i < r->num_options; i++) out->options[n++] = r->options[i];
  out->first_owned = n;
  if (inc->uses_toolkit) {
    /* Only the toolkit's own dirs: NVRTC then reads nothing the key does not cover. */
    for (int t = 0; t < 2; t++) {
      if (inc->toolkit_dirs[t][0] == '\0') continue;
      size_t l = strlen(inc->toolkit_dirs[t]) + 3;
      char *o = malloc(l);
      if (o == NULL) goto oom;
      snprintf(o, l, "-I%s", inc->toolkit_dirs[t]);
      out->options[n++] = o;
    }
  }
  kvjit_compile_input *in = &out->in;
  in->name = r->desc->name;
  in->source = out->texts[0];
  in->num_headers = nfiles - 1;
  in->header_names = out->names + 1;
  in->header_sources = (const char *const *)(out->texts + 1);
  in->num_options = n;
  in->options = out->options;
  in->num_kernels = r->desc->num_kernels;
  in->kernels = (const char *const *)r->kernels;
  in->kernels_given = r->desc->kernels;
  in->leaks_state = r->leaks_state;
  return KVJIT_OK;
oom:
  kvjit_request_input_free(out);
  return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "compile input: out of memory");
}

void kvjit_request_input_free(kvjit_request_input *in) {
  for (size_t i = 0; in->texts && i < in->num_texts; i++) free(in->texts[i]);
  /* The toolkit -I options, after the request's own, are the only ones this input made. */
  for (size_t i = in->first_owned; in->options && in->options[i]; i++) free((char *)(uintptr_t)in->options[i]);
  free(in->texts);
  free(in->names);
  free(in->options);
  memset(in, 0, sizeof *in);
}

/* ---- deep copies ----------------------------------------------------------------------------- */

typedef struct arena {
  char *base;
  size_t used, cap;
} arena;

static void *take(arena *a, size_t bytes, size_t align) {
  size_t at = (a->used + align - 1) & ~(align - 1);
  if (a->base == NULL) {
    a->used = at + bytes;
    return NULL;
  }
  a->used = at + bytes;
  return a->base + at;
}

static const char *copy_str(arena *a, const char *s) {
  size_t l = strlen(s) + 1;
  char *p = take(a, l, 1);
  if (p) memcpy(p, s, l);
  return p;
}

/* Two passes over the same layout: the first sizes the block, the second fills it. */
static kvjit_program_desc *lay_out(arena *a, const kvjit_program_desc *d) {
  kvjit_program_desc *c = take(a, sizeof *c, _Alignof(kvjit_program_desc));
  const char **options = take(a, (d->num_options + 1) * sizeof *options, _Alignof(const char *));
  kvjit_header *headers = take(a, (d->num_headers + 1) * sizeof *headers, _Alignof(kvjit_header));
  const char **kernels = take(a, (d->num_kernels + 1) * sizeof *kernels, _Alignof(const char *));
  const char *name = copy_str(a, d->name), *source = copy_str(a, d->source);
  for (size_t i = 0; i < d->num_options; i++) {
    const char *o = copy_str(a, d->options[i]);
    if (options) options[i] = o;
  }
  for (size_t i = 0; i < d->num_headers; i++) {
    const char *hn = copy_str(a, d->headers[i].name), *hs = copy_str(a, d->headers[i].source);
    if (headers) headers[i].name = hn, headers[i].source = hs;
  }
  for (size_t i = 0; i < d->num_kernels; i++) {
    const char *k = copy_str(a, d->kernels[i]);
    if (kernels) kernels[i] = k;
  }
  if (c == NULL) return NULL;
  *c = *d;
  c->name = name;
  c->source = source;
  c->options = options;
  c->headers = headers;
  c->kernels = kernels;
  return c;
}

kvjit_program_desc *kvjit_desc_copy(const kvjit_program_desc *desc) {
  arena a = {NULL, 0, 0};
  lay_out(&a, desc);
  a.cap = a.used;
  a.used = 0;
  if ((a.base = malloc(a.cap)) == NULL) return NULL;
  return lay_out(&a, desc);
}
