/* The cache's entries as `cache ls/verify` and `info` print them: copied out of kvjit_cache_list(). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool under_dir(const char *path, const char *dir) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  return strncmp(path, dir, len) == 0 && path[len] == '/';
}

static void entry_row_free(entry_row *r) {
  free(r->path);
  free(r->key);
  free(r->program);
  free(r->kernels);
  free(r->reason);
  free(r->op);
  free(r->variant);
  free(r->compiler);
  free(r->bundle);
}

static int collect_entry(const kvjit_cache_entry_info *entry, void *user) {
  entry_table *table = user;
  if (table->count == table->capacity) {
    size_t capacity = table->capacity ? table->capacity * 2 : 64;
    entry_row *rows = realloc(table->rows, capacity * sizeof *rows);
    if (rows == NULL) goto oom;
    table->rows = rows;
    table->capacity = capacity;
  }
  entry_row row = {
      .path = strdup(entry->path ? entry->path : ""),
      .key = strdup(entry->key ? entry->key : "?"),
      .program = strdup(entry->program ? entry->program : "?"),
      .kernels = strdup(entry->kernels ? entry->kernels : ""),
      .arch = entry->arch,
      .bytes = entry->bytes,
      .mtime = entry->mtime,
      .read_only = table->write_dir == NULL || entry->path == NULL || !under_dir(entry->path, table->write_dir),
      .status = entry->status,
      .reason = strdup(entry->reason ? entry->reason : ""),
      .op = strdup(entry->op ? entry->op : ""),
      .variant = strdup(entry->variant ? entry->variant : ""),
      .compiler = strdup(entry->compiler ? entry->compiler : ""),
      .bundle = entry->bundle ? strdup(entry->bundle) : NULL,
  };
  if (row.path == NULL || row.key == NULL || row.program == NULL || row.kernels == NULL || row.reason == NULL ||
      row.op == NULL || row.variant == NULL || row.compiler == NULL || (entry->bundle && row.bundle == NULL)) {
    entry_row_free(&row);
    goto oom;
  }
  table->rows[table->count++] = row;
  return 0;
oom:
  table->out_of_memory = true;
  return 1;
}

void entry_table_free(entry_table *table) {
  for (size_t i = 0; i < table->count; i++) entry_row_free(&table->rows[i]);
  free(table->rows);
}

static int compare_rows(const void *pa, const void *pb) {
  const entry_row *a = pa, *b = pb;
  int c;
  if ((c = (a->read_only > b->read_only) - (a->read_only < b->read_only)) != 0) return c;
  if ((c = (a->arch > b->arch) - (a->arch < b->arch)) != 0) return c;
  if ((c = strcmp(a->program, b->program)) != 0) return c;
  return strcmp(a->kernels, b->kernels);
}

/* kvjit_cache_list() into @p table; exit status. */
int list_entries(const char *cmd, kvjit_context *ctx, bool all, bool verify, entry_table *table,
                        uint64_t *bad) {
  kvjit_cache_info info;
  kvjit_status status = kvjit_context_cache_info(ctx, &info);
  if (status != KVJIT_OK) return library_error(cmd, "cache info", status);
  table->write_dir = info.write_dir;
  status = kvjit_cache_list(ctx, all, verify, collect_entry, table, bad);
  if (table->out_of_memory) return out_of_memory(cmd);
  if (status != KVJIT_OK) return library_error(cmd, "listing the cache", status);
  if (table->count > 1) qsort(table->rows, table->count, sizeof *table->rows, compare_rows); /* rows is NULL when empty */
  return 0;
}
