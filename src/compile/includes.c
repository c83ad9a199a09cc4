/* Header resolution and keying (includes.h): the include graph over the directives of each file. */
#include "includes.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "include_scan.h"
#include "nvrtc_lib.h"
#include "status.h"
#include "toolkit_digest.h"

#define MAX_FILES 4096u

/* ---- building the graph --------------------------------------------------------------------- */

typedef struct node {
  char *name;                  /* registered name */
  const char *text;
  size_t len;
  int on_disk;
  dev_t dev;
  ino_t ino;
  kvjit_key digest;
  size_t num_scan;
  const kvjit_scan_directive *scan; /* memo-owned, or owned_scan */
  kvjit_scan_directive *owned_scan;
  const char *path;            /* disk files: where it was found (memo-owned) */
} node;

typedef struct graph {
  node *nodes;
  size_t num, cap;
  kvjit_include_directive *dirs;
  size_t num_dirs, cap_dirs;
  int uses_toolkit;
} graph;

static kvjit_status grow(void **items, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return KVJIT_OK;
  size_t n = *cap ? *cap * 2 : 16;
  while (n < need) n *= 2;
  void *p = realloc(*items, n * size);
  if (p == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
  *items = p;
  *cap = n;
  return KVJIT_OK;
}

/* "a/b/../c.h" -> "a/c.h", "./x" -> "x"; leading ".." kept. In place. */
static void normalize(char *path) {
  char *parts[256];
  size_t n = 0, leading_up = 0;
  int absolute = path[0] == '/';
  char *save = NULL;
  char copy[PATH_MAX];
  snprintf(copy, sizeof copy, "%s", path);
  for (char *t = strtok_r(copy, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (strcmp(t, ".") == 0) continue;
    if (strcmp(t, "..") == 0) {
      if (n > leading_up) {
        n--;
        continue;
      }
      if (absolute) continue;
      leading_up++;
    }
    if (n < 256) parts[n++] = t;
  }
  size_t used = 0;
  if (absolute) path[used++] = '/';
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(parts[i]);
    if (i) path[used++] = '/';
    memcpy(path + used, parts[i], l);
    used += l;
  }
  path[used] = '\0';
}

/* dirname(@p of) + "/" + @p name, normalized, into @p out ("" dir: just the name). */
static int relative_to(char *out, size_t capacity, const char *of, const char *name, size_t name_len) {
  const char *slash = strrchr(of, '/');
  size_t dir_len = slash ? (size_t)(slash - of) + 1 : 0;
  if (dir_len + name_len + 1 > capacity) return 0;
  memcpy(out, of, dir_len);
  memcpy(out + dir_len, name, name_len);
  out[dir_len + name_len] = '\0';
  normalize(out);
  return 1;
}

static int name_taken(const graph *g, const char *name) {
  for (size_t i = 0; i < g->num; i++) {
    if (strcmp(g->nodes[i].name, name) == 0) return 1;
  }
  return 0;
}

static kvjit_status add_node(graph *g, const char *name, size_t *index) {
  kvjit_status st = grow((void **)&g->nodes, &g->cap, g->num + 1, sizeof *g->nodes);
  if (st != KVJIT_OK) return st;
  if (g->num >= MAX_FILES) return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "includes: more than %u headers", MAX_FILES);
  node *n = &g->nodes[g->num];
  memset(n, 0, sizeof *n);
  /* Two different files never share a name: NVRTC matches in-memory headers by name. */
  size_t len = strlen(name);
  n->name = malloc(len + 16);
  if (n->name == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
  memcpy(n->name, name, len + 1);
  for (unsigned k = 2; name_taken(g, n->name); k++) snprintf(n->name + len, 16, "#%u", k);
  *index = g->num++;
  return KVJIT_OK;
}

static int find_in_memory(const graph *g, size_t num_memory, const char *name, size_t len) {
  for (size_t i = 1; i < num_memory; i++) {
    if (strlen(g->nodes[i].name) == len && memcmp(g->nodes[i].name, name, len) == 0) return (int)i;
  }
  return -1;
}

/* A disk file at @p path (known to be a regular file with stat @p st): its node, added if new. */
static kvjit_status disk_node(graph *g, kvjit_include_memo *memo, const char *path, const struct stat *st,
                              const char *registered, size_t *index) {
  for (size_t i = 0; i < g->num; i++) {
    if (g->nodes[i].on_disk && g->nodes[i].dev == st->st_dev && g->nodes[i].ino == st->st_ino) {
      *index = i;
      return KVJIT_OK;
    }
  }
  const kvjit_memo_file *f = NULL;
  kvjit_status status = kvjit_include_memo_get(memo, path, st, &f);
  if (status != KVJIT_OK) return status;
  if ((status = add_node(g, registered, index)) != KVJIT_OK) return status;
  node *n = &g->nodes[*index];
  n->text = f->text;
  n->len = f->len;
  n->on_disk = 1;
  n->dev = st->st_dev;
  n->ino = st->st_ino;
  n->digest = f->digest;
  n->scan = f->directives;
  n->num_scan = f->num_directives;
  n->path = f->path;
  return KVJIT_OK;
}

/* What a candidate path of an include is: a regular file NVRTC may read (1), nothing there or a
 * dir (0: the search goes on, as the preprocessor's does), or something else (-1: a FIFO, a device
 * or a socket, which NVRTC's own fopen would block on or read without end: refused, never passed
 * on as absent). stat follows links, as NVRTC's open would. */
static int probe_file(const char *path, struct stat *st) {
  if (stat(path, st) != 0) return 0;
  if (S_ISREG(st->st_mode)) return 1;
  return S_ISDIR(st->st_mode) ? 0 : -1;
}

static kvjit_status special_include(const char *path) {
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                    "header %s: not a regular file (a FIFO, device or socket); an include must name a regular file",
                    path);
}

/* probe_file() as 1 (use it) or 0 (go on); -1 sets *refused to the refusal. */
static int regular_file(const char *path, struct stat *st, kvjit_status *refused) {
  int kind = probe_file(path, st);
  if (kind < 0) *refused = special_include(path);
  return kind;
}

static int join3(char *out, size_t capacity, const char *dir, size_t dir_len, const char *name, size_t name_len) {
  if (dir_len + 1 + name_len + 1 > capacity) return 0;
  memcpy(out, dir, dir_len);
  out[dir_len] = '/';
  memcpy(out + dir_len + 1, name, name_len);
  out[dir_len + 1 + name_len] = '\0';
  return 1;
}

typedef struct resolver {
  graph *g;
  kvjit_include_memo *memo;
  const kvjit_include_input *in;
  size_t num_memory; /* nodes 0..num_memory-1: the source and the in-memory headers */
  const char *toolkit[2];
} resolver;

/* Resolve one name written in file @p from (SIZE_MAX: a --pre-include option). */
static kvjit_status resolve_one(resolver *r, size_t from, const char *name, size_t len, int angled,
                                kvjit_include_directive *out) {
  graph *g = r->g;
  char path[PATH_MAX], registered[PATH_MAX];
  struct stat st;
  kvjit_status refused = KVJIT_OK;
  out->angled = angled;
  if (len == 0 || len >= PATH_MAX / 2) {
    out->kind = KVJIT_INCLUDE_ABSENT;
    return KVJIT_OK;
  }
  int m = find_in_memory(g, r->num_memory, name, len);
  if (m >= 0) {
    out->kind = KVJIT_INCLUDE_FILE;
    out->file = (size_t)m;
    return KVJIT_OK;
  }
  if (!angled && from != SIZE_MAX && name[0] != '/') {
    const node *inc = &g->nodes[from];
    if (relative_to(registered, sizeof registered, inc->name, name, len)) {
      m = find_in_memory(g, r->num_memory, registered, strlen(registered));
      if (m >= 0) {
        out->kind = KVJIT_INCLUDE_FILE;
        out->file = (size_t)m;
        return KVJIT_OK;
      }
      if (inc->on_disk) {
        const char *slash = strrchr(inc->path, '/');
        int kind = slash && join3(path, sizeof path, inc->path, (size_t)(slash - inc->path), name, len)
                       ? regular_file(path, &st, &refused)
                       : 0;
        if (kind < 0) return refused;
        if (kind > 0) {
          out->kind = KVJIT_INCLUDE_FILE;
          return disk_node(g, r->memo, path, &st, registered, &out->file);
        }
      }
    }
  }
  if (name[0] == '/') {
    /* An absolute include names the file itself: keyed by content under its base name. */
    memcpy(path, name, len);
    path[len] = '\0';
    int kind = regular_file(path, &st, &refused);
    if (kind < 0) return refused;
    if (kind > 0) {
      const char *base = strrchr(path, '/') + 1;
      out->kind = KVJIT_INCLUDE_FILE;
      return disk_node(g, r->memo, path, &st, base, &out->file);
    }
  }
  for (size_t d = 0; d < r->in->num_dirs && name[0] != '/'; d++) {
    const char *dir = r->in->dirs[d];
    if (!join3(path, sizeof path, dir, strlen(dir), name, len)) continue;
    int kind = regular_file(path, &st, &refused);
    if (kind < 0) return refused;
    if (kind == 0) continue;
    memcpy(registered, name, len);
    registered[len] = '\0';
    normalize(registered);
    out->kind = KVJIT_INCLUDE_FILE;
    return disk_node(g, r->memo, path, &st, registered, &out->file);
  }
  for (int t = 0; t < 2 && name[0] != '/'; t++) {
    if (r->toolkit[t][0] == '\0') continue;
    int kind = join3(path, sizeof path, r->toolkit[t], strlen(r->toolkit[t]), name, len)
                   ? regular_file(path, &st, &refused)
                   : 0;
    if (kind < 0) return refused;
    if (kind > 0) {
      out->kind = KVJIT_INCLUDE_TOOLKIT;
      g->uses_toolkit = 1;
      return KVJIT_OK;
    }
  }
  out->kind = KVJIT_INCLUDE_ABSENT;
  return KVJIT_OK;
}

static unsigned line_of(const char *text, size_t offset) {
  unsigned line = 1;
  for (size_t i = 0; i < offset; i++) line += text[i] == '\n';
  return line;
}

static kvjit_status resolve_file(resolver *r, size_t index) {
  graph *g = r->g;
  /* g->nodes may move while this file's includes are added: copy what is needed first. */
  const kvjit_scan_directive *scan = g->nodes[index].scan;
  size_t num_scan = g->nodes[index].num_scan;
  const char *text = g->nodes[index].text;
  for (size_t i = 0; i < num_scan; i++) {
    const kvjit_scan_directive *s = &scan[i];
    if (s->computed) {
      const node *n = &g->nodes[index];
      int next = !s->has_include && strncmp(text + s->start, "#include_next", 13) == 0;
      return kvjit_fail(KVJIT_ERR_UNSUPPORTED,
                        "%s:%u: %s: kvjit cannot key the header it reads; include it by name (\"x.h\" or <x.h>), "
                        "or give it in desc->headers and include that name",
                        n->on_disk ? n->path : n->name, line_of(text, s->start),
                        next ? "#include_next (its search is not reproduced)"
                             : s->has_include ? "__has_include of a computed name" : "#include of a computed name");
    }
    kvjit_status st = grow((void **)&g->dirs, &g->cap_dirs, g->num_dirs + 1, sizeof *g->dirs);
    if (st != KVJIT_OK) return st;
    kvjit_include_directive d;
    memset(&d, 0, sizeof d);
    d.start = s->start;
    d.end = s->end;
    st = resolve_one(r, index, text + s->start + 1, s->end - s->start - 2, s->angled, &d);
    if (st != KVJIT_OK) return st;
    g->dirs[g->num_dirs++] = d;
  }
  return KVJIT_OK;
}

kvjit_status kvjit_includes_resolve(kvjit_includes *out, kvjit_include_memo *memo, const kvjit_include_input *in) {
  memset(out, 0, sizeof *out);
  graph g;
  memset(&g, 0, sizeof g);
  resolver r = {&g, memo, in, 0, {"", ""}};
  const kvjit_nvrtc *nv;
  if (kvjit_nvrtc_get(&nv) == KVJIT_OK) {
    r.toolkit[0] = nv->include_dir;
    r.toolkit[1] = nv->cccl_dir;
  }
  kvjit_clear_error();
  kvjit_status st;
  size_t index;
  /* The source, then every in-memory header, under their own names (in-memory headers first
   * because an include matches them before any file). */
  if ((st = add_node(&g, in->name, &index)) != KVJIT_OK) goto fail;
  g.nodes[0].text = in->source;
  g.nodes[0].len = strlen(in->source);
  for (size_t i = 0; i < in->num_headers; i++) {
    if ((st = grow((void **)&g.nodes, &g.cap, g.num + 1, sizeof *g.nodes)) != KVJIT_OK) goto fail;
    node *n = &g.nodes[g.num];
    memset(n, 0, sizeof *n);
    if ((n->name = strdup(in->headers[i].name)) == NULL) {
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
      goto fail;
    }
    n->text = in->headers[i].source;
    n->len = strlen(n->text);
    g.num++;
  }
  r.num_memory = g.num;
  for (size_t i = 0; i < r.num_memory; i++) {
    node *n = &g.nodes[i];
    if ((st = kvjit_scan(n->text, n->len, &n->owned_scan, &n->num_scan)) != KVJIT_OK) goto fail;
    n->scan = n->owned_scan;
  }
  /* Breadth first: each file's directives are resolved once, in file order. */
  size_t *first = NULL;
  for (size_t i = 0; i < g.num; i++) {
    size_t *f = realloc(first, (i + 1) * sizeof *first);
    if (f == NULL) {
      free(first);
      st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
      goto fail;
    }
    first = f;
    first[i] = g.num_dirs;
    if ((st = resolve_file(&r, i)) != KVJIT_OK) {
      free(first);
      goto fail;
    }
  }
  out->pre = in->num_pre ? calloc(in->num_pre, sizeof *out->pre) : NULL;
  if (in->num_pre && out->pre == NULL) {
    free(first);
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
    goto fail;
  }
  out->num_pre = in->num_pre;
  for (size_t i = 0; i < in->num_pre; i++) {
    size_t before = g.num;
    st = resolve_one(&r, SIZE_MAX, in->pre[i], strlen(in->pre[i]), 1, &out->pre[i]);
    for (size_t j = before; st == KVJIT_OK && j < g.num; j++) {
      size_t *f = realloc(first, (j + 1) * sizeof *first);
      if (f == NULL) {
        st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
        break;
      }
      first = f;
      first[j] = g.num_dirs;
      st = resolve_file(&r, j);
    }
    if (st != KVJIT_OK) {
      free(first);
      goto fail;
    }
  }
  /* Hand the nodes over as files; their names go into one block. */
  size_t names_len = 0;
  for (size_t i = 0; i < g.num; i++) names_len += strlen(g.nodes[i].name) + 1;
  out->files = calloc(g.num ? g.num : 1, sizeof *out->files);
  out->names = malloc(names_len ? names_len : 1);
  if (out->files == NULL || out->names == NULL) {
    free(first);
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "includes: out of memory");
    goto fail;
  }
  size_t used = 0;
  for (size_t i = 0; i < g.num; i++) {
    node *n = &g.nodes[i];
    kvjit_include_file *f = &out->files[i];
    size_t l = strlen(n->name) + 1;
    memcpy(out->names + used, n->name, l);
    f->name = out->names + used;
    used += l;
    f->text = n->text;
    f->len = n->len;
    f->on_disk = n->on_disk;
    f->digest = n->digest;
    f->first = first[i];
    f->count = (i + 1 < g.num ? first[i + 1] : g.num_dirs) - first[i];
  }
  free(first);
  out->num_files = g.num;
  out->directives = g.dirs;
  out->num_directives = g.num_dirs;
  g.dirs = NULL;
  out->uses_toolkit = g.uses_toolkit;
  if (out->uses_toolkit) {
    out->toolkit_dirs[0] = r.toolkit[0];
    out->toolkit_dirs[1] = r.toolkit[1];
    if ((st = kvjit_toolkit_digest(r.toolkit, &out->toolkit)) != KVJIT_OK) goto fail;
  } else {
    out->toolkit_dirs[0] = out->toolkit_dirs[1] = "";
  }
  for (size_t i = 0; i < g.num; i++) {
    free(g.nodes[i].name);
    free(g.nodes[i].owned_scan);
  }
  free(g.nodes);
  return KVJIT_OK;

fail:
  for (size_t i = 0; i < g.num; i++) {
    free(g.nodes[i].name);
    free(g.nodes[i].owned_scan);
  }
  free(g.nodes);
  free(g.dirs);
  kvjit_includes_free(out);
  return st;
}

void kvjit_includes_free(kvjit_includes *inc) {
  if (inc == NULL) return;
  free(inc->files);
  free(inc->directives);
  free(inc->pre);
  free(inc->names);
  memset(inc, 0, sizeof *inc);
}

int kvjit_includes_matter(const kvjit_includes *inc) {
  return inc->num_directives > 0 || inc->num_pre > 0;
}

static void hash_directive(kvjit_key_builder *b, const kvjit_includes *inc, const kvjit_include_directive *d) {
  if (d->kind == KVJIT_INCLUDE_FILE) {
    kvjit_key_put_u64(b, d->file);
  } else {
    kvjit_key_put_u64(b, d->kind == KVJIT_INCLUDE_TOOLKIT ? UINT64_MAX - 1 : UINT64_MAX);
  }
  kvjit_key_put_u64(b, (uint64_t)d->angled);
  (void)inc;
}

void kvjit_includes_hash_files(const kvjit_includes *inc, kvjit_key_builder *b) {
  /* Which file each directive reads (by index: names and contents follow), so the rewritten
   * texts NVRTC gets are a function of what is hashed here and in the description. */
  kvjit_key_put_str(b, 'R', "kvjit-includes");
  kvjit_key_put_u64(b, inc->num_files);
  for (size_t i = 0; i < inc->num_files; i++) {
    const kvjit_include_file *f = &inc->files[i];
    kvjit_key_put_str(b, 'F', f->name);
    if (f->on_disk) {
      kvjit_key_put_u64(b, f->digest.high);
      kvjit_key_put_u64(b, f->digest.low);
    }
    kvjit_key_put_u64(b, f->count);
    for (size_t j = 0; j < f->count; j++) {
      const kvjit_include_directive *d = &inc->directives[f->first + j];
      /* The directive's place in the text: the same text with the same resolutions rewrites alike. */
      kvjit_key_put_u64(b, d->start);
      hash_directive(b, inc, d);
    }
  }
  kvjit_key_put_u64(b, inc->num_pre);
  for (size_t i = 0; i < inc->num_pre; i++) hash_directive(b, inc, &inc->pre[i]);
}

void kvjit_includes_hash(const kvjit_includes *inc, kvjit_key_builder *b) {
  kvjit_includes_hash_files(inc, b);
  if (inc->uses_toolkit) {
    kvjit_key_put_str(b, 'T', "toolkit");
    kvjit_key_put_u64(b, inc->toolkit.high);
    kvjit_key_put_u64(b, inc->toolkit.low);
  }
}

char *kvjit_includes_rewrite(const kvjit_includes *inc, size_t index) {
  const kvjit_include_file *f = &inc->files[index];
  size_t extra = 0;
  for (size_t j = 0; j < f->count; j++) {
    const kvjit_include_directive *d = &inc->directives[f->first + j];
    if (d->kind == KVJIT_INCLUDE_FILE) extra += strlen(inc->files[d->file].name) + 2;
  }
  char *out = malloc(f->len + extra + 1);
  if (out == NULL) return NULL;
  size_t at = 0, used = 0;
  for (size_t j = 0; j < f->count; j++) {
    const kvjit_include_directive *d = &inc->directives[f->first + j];
    memcpy(out + used, f->text + at, d->start - at);
    used += d->start - at;
    if (d->kind == KVJIT_INCLUDE_FILE) {
      /* The name NVRTC knows the header by; in-memory headers match before any search. */
      const char *name = inc->files[d->file].name;
      size_t l = strlen(name);
      out[used++] = d->angled ? '<' : '"';
      memcpy(out + used, name, l);
      used += l;
      out[used++] = d->angled ? '>' : '"';
    } else {
      /* Toolkit and absent names as <...>: NVRTC then searches the toolkit dirs only, never its
       * working directory (which it does for "..." and which no key covers). */
      out[used++] = '<';
      memcpy(out + used, f->text + d->start + 1, d->end - d->start - 2);
      used += d->end - d->start - 2;
      out[used++] = '>';
    }
    at = d->end;
  }
  memcpy(out + used, f->text + at, f->len - at);
  used += f->len - at;
  out[used] = '\0';
  return out;
}

const char *kvjit_includes_pre_name(const kvjit_includes *inc, const kvjit_include_input *in, size_t index) {
  const kvjit_include_directive *d = &inc->pre[index];
  return d->kind == KVJIT_INCLUDE_FILE ? inc->files[d->file].name : in->pre[index];
}
