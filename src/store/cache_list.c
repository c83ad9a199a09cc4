/*
 * Listing (`kvjit cache ls`, `kvjit info`) and verifying (`kvjit cache verify`) a cache's entries.
 * A listing reads each entry's header only, never a payload: a 1 GiB file named like an entry
 * costs one lstat. Verifying applies every check the loader applies (trust, checksums, the key,
 * the payload's kernels) and quarantines what fails in the writable dir.
 */
#include "cache.h"
#include "cache_list.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_internal.h"
#include "payload.h"
#include "quarantine.h"
#include "safe_fs.h"
#include "status.h"
#include "target.h"

/* The texts an info points to, for one entry. */
typedef struct entry_text {
  char program[256], kernels[1024], op[64], variant[640], compiler[64], why[400], bundle[33];
} entry_text;

/* Header text as printable: control bytes (a hostile entry's) become '?'. */
static void printable(char *dst, size_t cap, const char *src, size_t len) {
  if (len >= cap) len = cap - 1;
  for (size_t i = 0; i < len; i++) dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
  dst[len] = '\0';
}

/* The header's program, kernel names, op, variant line and compiler into the info's buffers. */
static void describe(const kvjit_entry_view *view, kvjit_cache_entry_info *info, entry_text *t) {
  char *kernels = t->kernels;
  const size_t kernels_cap = sizeof t->kernels;
  info->arch = kvjit_target_code(&view->target);
  printable(t->program, sizeof t->program, view->program, view->program_len);
  printable(t->op, sizeof t->op, view->op, view->op_len);
  printable(t->variant, sizeof t->variant, view->variant, view->variant_len);
  printable(t->compiler, sizeof t->compiler, view->compiler, view->compiler_len);
  size_t used = 0;
  for (uint32_t i = 0; i < view->num_kernels && used + 2 < kernels_cap; i++) {
    const char *n, *l;
    size_t nl, ll;
    kvjit_entry_kernel(view, i, &n, &nl, &l, &ll);
    int w = snprintf(kernels + used, kernels_cap - used, "%s%.*s", i ? "," : "", (int)(nl < 1000 ? nl : 1000), n);
    if (w < 0) break;
    used += (size_t)w;
  }
}

/* One entry file: its info, judged by the header (listing) or by every check (verifying). */
static kvjit_status judge(kvjit_cache *c, const char *path, const kvjit_key *key, int verify, kvjit_cache_entry_info *info,
                          entry_text *t, struct stat *st, int *have_st) {
  char *why = t->why;
  const size_t why_cap = sizeof t->why;
  uint8_t *buf = NULL;
  size_t len = 0;
  int r = cache_read_entry_file(path, verify, &buf, &len, st, have_st, why, why_cap);
  if (*have_st) {
    info->bytes = (uint64_t)st->st_size;
    info->mtime = (int64_t)st->st_mtime;
  }
  if (r == 0) return KVJIT_ERR_NOT_FOUND; /* evicted meanwhile */
  if (r == -2) {
    snprintf(why, why_cap, "cannot be read: %s", strerror(errno));
    return KVJIT_ERR_IO;
  }
  if (r == -1) return KVJIT_ERR_CORRUPT;
  kvjit_entry_view view;
  kvjit_status st_ = verify ? kvjit_entry_parse(&view, buf, len, key, 1)
                            : kvjit_entry_parse_header(&view, buf, len, (uint64_t)st->st_size, key);
  if (st_ == KVJIT_OK) describe(&view, info, t);
  if (st_ == KVJIT_OK && view.target.kind == KVJIT_PAYLOAD_ALIAS) {
    /* An alias's 24-byte payload names its bundle: a listing reads that much of it too. */
    if (view.payload == NULL) {
      free(buf);
      buf = NULL;
      int r2 = cache_read_entry_file(path, 1, &buf, &len, st, have_st, why, why_cap);
      if (r2 != 1) return r2 == 0 ? KVJIT_ERR_NOT_FOUND : r2 == -2 ? KVJIT_ERR_IO : KVJIT_ERR_CORRUPT;
      st_ = kvjit_entry_parse(&view, buf, len, key, 0);
    }
    if (st_ == KVJIT_OK) {
      kvjit_entry_alias alias;
      kvjit_entry_alias_get(&view, &alias);
      kvjit_key_hex(&alias.bundle, t->bundle);
      info->bundle = t->bundle;
    }
  }
  if (st_ == KVJIT_OK && verify) st_ = kvjit_entry_check_payload(&view);
  if (st_ != KVJIT_OK) snprintf(why, why_cap, "%s", kvjit_last_error());
  free(buf);
  const char *untrusted = verify && st_ == KVJIT_OK ? cache_untrusted_reason(c, st) : NULL;
  if (untrusted) {
    snprintf(why, why_cap, "%s (the loader refuses it)", untrusted);
    st_ = KVJIT_ERR_CORRUPT;
  }
  return st_ == KVJIT_OK ? KVJIT_OK : st_ == KVJIT_ERR_OUT_OF_MEMORY ? st_ : KVJIT_ERR_CORRUPT;
}

static kvjit_status visit_dir(kvjit_cache *c, const char *dir, int writable, int verify, kvjit_cache_visit_fn visit,
                              void *user, uint64_t *bad, int *stop) {
  DIR *d = kvjit_open_dir(dir);
  if (!d) return KVJIT_OK;
  struct dirent *e;
  while (!*stop && (e = readdir(d)) != NULL) {
    if (!cache_is_entry_name(e->d_name)) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    kvjit_key key;
    kvjit_key_parse_hex(&key, e->d_name);
    char hex[33];
    kvjit_key_hex(&key, hex);
    entry_text t;
    t.program[0] = t.kernels[0] = t.op[0] = t.variant[0] = t.compiler[0] = t.why[0] = t.bundle[0] = '\0';
    kvjit_cache_entry_info info;
    memset(&info, 0, sizeof info);
    info.path = path;
    info.key = hex;
    info.program = t.program;
    info.kernels = t.kernels;
    info.op = t.op;
    info.variant = t.variant;
    info.compiler = t.compiler;
    struct stat st;
    int have_st = 0;
    info.status = judge(c, path, &key, verify, &info, &t, &st, &have_st);
    if (info.status == KVJIT_ERR_NOT_FOUND) continue;
    info.reason = t.why;
    if (info.status != KVJIT_OK) {
      if (bad) (*bad)++;
      if (verify) {
        atomic_fetch_add(&c->counters.bad_entries, 1);
        if (writable && info.status == KVJIT_ERR_CORRUPT) cache_quarantine(c, dir, e->d_name, have_st ? &st : NULL);
      }
    }
    if (visit && visit(&info, user)) *stop = 1;
  }
  closedir(d);
  return KVJIT_OK;
}

kvjit_status kvjit_cache_visit(kvjit_cache *c, int include_read_dirs, int verify, kvjit_cache_visit_fn visit,
                               void *user, uint64_t *bad) {
  int stop = 0;
  if (bad) *bad = 0;
  if (include_read_dirs) {
    for (size_t i = 0; i < c->num_read && !stop; i++) visit_dir(c, c->read_dirs[i], 0, verify, visit, user, bad, &stop);
  }
  if (c->write_dir && !stop) visit_dir(c, c->write_dir, kvjit_cache_writable(c), verify, visit, user, bad, &stop);
  return KVJIT_OK;
}
