/*
 * The generic op layer (see op.h): the context's op tables, the miss path that plans, loads and
 * publishes a variant, the manifest record, prepare, the launch, the bad-slot counters and the op
 * statistics. Prewarm is op_prewarm.c.
 */
#include "op.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "launch.h"
#include "loader.h"
#include "status.h"
#include "variant.h"

/* ---- the context's op tables ------------------------------------------------------------------- */

kvjit_status kvjit_op_tables_create(void **out) {
  *out = NULL;
  kvjit_op_tables *t = calloc(1, sizeof *t);
  if (t == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "op tables: out of memory");
  kvjit_status st = kvjit_fast_map_create(&t->variants, "variants", 0);
  if (st == KVJIT_OK) st = kvjit_fast_map_create(&t->recorded, "manifest", 0);
  if (st != KVJIT_OK) {
    kvjit_op_tables_destroy(t);
    return st;
  }
  *out = t;
  return KVJIT_OK;
}

static void free_entry(void *value, void *user) {
  (void)user;
  free(value);
}

void kvjit_op_tables_destroy(void *tables) {
  kvjit_op_tables *t = tables;
  if (t == NULL) return;
  /* Op entries are single malloc'd blocks (kvjit_op_load()); the manifest set's values are not owned. */
  if (t->variants != NULL) kvjit_fast_map_foreach(t->variants, free_entry, NULL);
  kvjit_fast_map_destroy(t->variants);
  kvjit_fast_map_destroy(t->recorded);
  free(t);
}

/* ---- plans and programs -------------------------------------------------------------------------- */

kvjit_status kvjit_op_make_plan(const kvjit_op *op, const int64_t *values, int batch_class, kvjit_op_plan_buffer *plan) {
  memset(plan, 0, sizeof *plan);
  return op->plan(values, (int)values[0], batch_class, plan->bytes);
}

/* Write the variant's line to the manifest the first time this context loads it. */
static void record_variant(kvjit_context *ctx, kvjit_op_tables *tables, const kvjit_op *op, const int64_t *values,
                           const char *line) {
  static char marker; /* the set's values: only the keys count */
  int inserted = 0;
  /* Class 0 stands for the variant: every class of it shares one line. */
  const kvjit_fast_key key = op->key(values, 0);
  if (kvjit_fast_map_insert(tables->recorded, &key, &marker, NULL, &inserted) != KVJIT_OK) return;
  if (inserted) kvjit_context_record(ctx, line);
}

static void log_first_overflow(kvjit_context *ctx, kvjit_op_tables *tables) {
  kvjit_fast_map_stats s;
  kvjit_fast_map_get_stats(tables->variants, &s);
  if (s.overflows == 0 || atomic_exchange(&tables->overflow_logged, 1) != 0) return;
  if (kvjit_context_warnings(ctx)) {
    kvjit_log_line("op table full at %llu variants: further ones are looked up under a lock",
                   (unsigned long long)s.entries);
  }
}

kvjit_status kvjit_op_load(kvjit_context *ctx, const kvjit_op *op, const int64_t *request, int batch_class,
                           const kvjit_fast_key *key, const kvjit_op_entry **out) {
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(values, request, op->info.num_fields * sizeof values[0]);
  /* The rules between fields run here, once per request key: a hit needs none of them. */
  kvjit_status st = kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN);
  if (st != KVJIT_OK) return st;
  kvjit_op_plan_buffer plan;
  if ((st = kvjit_op_make_plan(op, values, batch_class, &plan)) != KVJIT_OK) return st;
  char line[KVJIT_VARIANT_MAX_FIELDS * 32];
  if ((st = kvjit_op_format_line(op, values, line, sizeof line)) != KVJIT_OK) return st;
  kvjit_op_program prog;
  if ((st = op->program(plan.bytes, &prog)) != KVJIT_OK) return st;
  kvjit_entry_label label = {op->info.name, line};
  kvjit_program *program = NULL;
  if ((st = kvjit_program_get_labeled(ctx, &program, NULL, &prog.desc, &label)) != KVJIT_OK) return st;
  kvjit_kernel *kernel = NULL;
  if ((st = kvjit_program_kernel(program, &kernel, prog.kernel, 0)) != KVJIT_OK) return st;
  kvjit_op_entry *entry = malloc(sizeof *entry);
  if (entry == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "%s: out of memory", op->info.name);
  kvjit_op_entry_init(entry, kernel);
  memset(&entry->geo, 0, sizeof entry->geo); /* what an op's geometry leaves alone is 0 (no loops) */
  op->geometry(plan.bytes, &entry->geo);
  kvjit_op_tables *tables = kvjit_op_tables_of(ctx);
  if (tables == NULL) {
    free(entry);
    return KVJIT_ERR_OUT_OF_MEMORY;
  }
  void *winner = NULL;
  int inserted = 0;
  st = kvjit_fast_map_insert(tables->variants, key, entry, &winner, &inserted);
  if (st != KVJIT_OK) {
    free(entry);
    return st;
  }
  if (!inserted) free(entry); /* another thread published the same request first */
  log_first_overflow(ctx, tables);
  record_variant(ctx, tables, op, values, line);
  *out = winner;
  return KVJIT_OK;
}

kvjit_status kvjit_op_prepare(kvjit_context *ctx, const kvjit_op *op, const int64_t *values, int first, int last) {
  for (int cls = first; cls <= last; cls++) {
    const kvjit_op_entry *entry;
    kvjit_status st = kvjit_op_find_entry(ctx, op, values, cls, &entry);
    if (st != KVJIT_OK) return st;
  }
  return KVJIT_OK;
}

/* ---- launch ---------------------------------------------------------------------------------- */

uint64_t kvjit_op_blocks(const kvjit_op_geometry *geo, int64_t items) {
  /* On every call: shifts, no 64-bit division (each costs tens of cycles). */
  uint64_t units;
  if (items <= 0 || __builtin_mul_overflow((uint64_t)items, (uint64_t)geo->split, &units)) return 0;
  const uint64_t groups = geo->items == 2 ? (units >> 1) + (units & 1) : units;
  const uint32_t per_block = geo->block >> geo->group_shift;
  uint64_t blocks;
  if ((per_block & (per_block - 1)) == 0) {
    const int shift = __builtin_ctz(per_block);
    blocks = (groups >> shift) + ((groups & (per_block - 1)) != 0);
  } else {
    blocks = groups / per_block + (groups % per_block != 0);
  }
  return blocks > (uint64_t)INT32_MAX ? 0 : blocks;
}

/* The handle to launch: the kernel's CUfunction in the context the launch runs in when the entry
 * holds it, else the CUkernel (the driver finds the function from it on every launch). A CUkernel
 * runs in its stream's context (the current one for the NULL, legacy and per-thread streams); a
 * context is named by its cuCtxGetId, which no later context reuses (its address may be), so a
 * dead context's function is never launched. The first launch in a context fills a free slot,
 * when that context is current (cuKernelGetFunction's); without one the CUkernel serves. */
static CUfunction launch_handle(const kvjit_driver *drv, const kvjit_op_entry *entry, struct CUstream_st *stream) {
  kvjit_op_function *slots = ((kvjit_op_entry *)(uintptr_t)entry)->functions; /* the cache only */
  const CUfunction kernel = (CUfunction)entry->kernel->handle;
  CUcontext ctx = NULL, cur = NULL;
  unsigned long long id = 0;
  CUresult res = kvjit_driver_launch_context(drv, stream, &ctx);
  /* ids the slots cannot tell from their own marks (0, ~0) get the CUkernel */
  if (res != CUDA_SUCCESS || ctx == NULL || drv->cuCtxGetId(ctx, &id) != CUDA_SUCCESS || id >= ~0ull - 1) return kernel;
  int free_slot = -1;
  for (int i = 0; i < KVJIT_OP_FUNCTION_SLOTS; i++) {
    const unsigned long long have = atomic_load_explicit(&slots[i].ctx, memory_order_acquire);
    if (have == id + 1) return atomic_load_explicit(&slots[i].fn, memory_order_relaxed);
    if (have == 0) {
      free_slot = i;
      break; /* slots fill in order: none after a free one is taken */
    }
  }
  if (free_slot < 0 || drv->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != ctx) return kernel;
  kvjit_op_function *slot = &slots[free_slot];
  unsigned long long expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&slot->ctx, &expected, ~0ull, memory_order_acq_rel, memory_order_relaxed))
    return kernel; /* another thread took it: a later launch finds what it put there */
  CUfunction fn = NULL;
  if (drv->cuKernelGetFunction(&fn, entry->kernel->handle) != CUDA_SUCCESS || fn == NULL) return kernel; /* stays ~0 */
  atomic_store_explicit(&slot->fn, fn, memory_order_relaxed);
  atomic_store_explicit(&slot->ctx, id + 1, memory_order_release);
  return fn;
}

kvjit_status kvjit_op_launch(const kvjit_driver *drv, const kvjit_op_entry *entry, uint64_t blocks, unsigned grid_y,
                             struct CUstream_st *stream, void *params) {
  CUlaunchAttribute attr;
  if (entry->geo.pdl) {
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig lc = {
      .gridDimX = (unsigned)blocks,
      .gridDimY = grid_y,
      .gridDimZ = 1,
      .blockDimX = entry->geo.block,
      .blockDimY = 1,
      .blockDimZ = 1,
      .sharedMemBytes = 0,
      .hStream = (CUstream)stream,
      /* Tied to the wait compiled into the kernel: the attribute without it would be a race. */
      .attrs = entry->geo.pdl ? &attr : NULL,
      .numAttrs = entry->geo.pdl ? 1 : 0,
  };
  void *args[] = {params};
  CUresult res = drv->cuLaunchKernelEx(&lc, launch_handle(drv, entry, stream), args, NULL);
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuLaunchKernelEx");
  return KVJIT_OK;
}

/* ---- the calls -------------------------------------------------------------------------------- */

kvjit_status kvjit_op_variant_error_or(const kvjit_op *op, const int64_t *values, kvjit_status status) {
  char detail[512];
  snprintf(detail, sizeof detail, "%s", kvjit_last_error());
  int64_t checked[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(checked, values, op->info.num_fields * sizeof checked[0]);
  checked[0] = 0; /* any arch: the rules that do not depend on the device */
  kvjit_status st = kvjit_op_check_values(op, checked, KVJIT_OP_ALL_GIVEN);
  if (st != KVJIT_OK) return st;
  if (status == KVJIT_OK) return KVJIT_OK;
  return kvjit_fail(status, "%s", detail);
}

static kvjit_status too_many_blocks(int64_t batch, const kvjit_op_entry *e) {
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "batch: %lld items x split %u need more than 2^31-1 blocks",
                    (long long)batch, e->geo.split);
}

static kvjit_status op_call(const kvjit_driver *drv, kvjit_context *ctx, const kvjit_op *op, int64_t *values,
                            int batch_class, int64_t batch, unsigned grid_y, uint32_t max_blocks,
                            struct CUstream_st *stream, void *params);

kvjit_status kvjit_op_call(kvjit_context *ctx, const kvjit_op *op, int64_t *values, int batch_class, int64_t batch,
                           unsigned grid_y, uint32_t max_blocks, struct CUstream_st *stream, void *params) {
  if (batch == 0) return kvjit_op_variant_error_or(op, values, KVJIT_OK);
  const kvjit_driver *drv;
  kvjit_status st;
  if ((st = kvjit_driver_get(&drv)) != KVJIT_OK) return kvjit_op_variant_error_or(op, values, st);
  st = op_call(drv, ctx, op, values, batch_class, batch, grid_y, max_blocks, stream, params);
  /* Off the hot path: only a call that found no context pays for the retry. */
  if (st == KVJIT_ERR_NO_DEVICE && kvjit_driver_adopt_context(drv, stream) == KVJIT_OK)
    st = op_call(drv, ctx, op, values, batch_class, batch, grid_y, max_blocks, stream, params);
  return st;
}

static kvjit_status op_call(const kvjit_driver *drv, kvjit_context *ctx, const kvjit_op *op, int64_t *values,
                            int batch_class, int64_t batch, unsigned grid_y, uint32_t max_blocks,
                            struct CUstream_st *stream, void *params) {
  kvjit_status st;
  int sm = 0;
  if ((st = kvjit_arch_current(drv, &sm)) != KVJIT_OK) return kvjit_op_variant_error_or(op, values, st);
  if (sm > op->max_arch) return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "device: sm_%d is past sm_%d", sm, op->max_arch);
  values[0] = sm;
  const kvjit_op_entry *e;
  if ((st = kvjit_op_find_entry(ctx, op, values, batch_class, &e)) != KVJIT_OK) return st;
  uint64_t blocks = kvjit_op_blocks(&e->geo, batch);
  if (blocks == 0) return too_many_blocks(batch, e);
  if (e->geo.loops && max_blocks > 0 && blocks > max_blocks) blocks = max_blocks;
  return kvjit_op_launch(drv, e, blocks, grid_y, stream, params);
}

kvjit_status kvjit_op_prepare_call(kvjit_context *ctx, const kvjit_op *op, int64_t *values, int batch_class,
                                   int64_t batch) {
  const kvjit_driver *drv;
  kvjit_status st;
  if ((st = kvjit_driver_get(&drv)) != KVJIT_OK) return kvjit_op_variant_error_or(op, values, st);
  /* Loading needs no context (cuLibraryLoadData): without one, prepare for device 0. */
  int sm = 0;
  if ((st = kvjit_driver_current_sm(drv, &sm, NULL)) != KVJIT_OK) return kvjit_op_variant_error_or(op, values, st);
  values[0] = sm;
  /* batch 0: every class, for callers that do not know their batch sizes before capture. */
  const int first = batch > 0 ? batch_class : 0;
  const int last = batch > 0 ? batch_class : op->info.num_classes - 1;
  if ((st = kvjit_op_prepare(ctx, op, values, first, last)) != KVJIT_OK) return st;
  if (batch > 0) {
    const kvjit_op_entry *e;
    if ((st = kvjit_op_find_entry(ctx, op, values, batch_class, &e)) != KVJIT_OK) return st;
    if (kvjit_op_blocks(&e->geo, batch) == 0) return too_many_blocks(batch, e);
  }
  kvjit_clear_error();
  return KVJIT_OK;
}

/* ---- counters --------------------------------------------------------------------------------- */

int kvjit_op_is_instance(const char *name, const char *kernel) {
  size_t n = strlen(kernel);
  return name != NULL && strncmp(name, kernel, n) == 0 && (name[n] == '\0' || name[n] == '<');
}

typedef struct program_list {
  const kvjit_program **items;
  size_t count, capacity;
  const char *kernel;
  int sm;
  int failed;
} program_list;

static void collect_program(void *value, void *user) {
  const kvjit_op_entry *entry = value;
  program_list *list = user;
  const kvjit_kernel *kernel = entry->kernel;
  if (!kvjit_op_is_instance(kernel->name, list->kernel)) return;
  /* A program built for another arch is not loaded in this device's context. */
  if (kvjit_program_arch(kernel->program) != list->sm) return;
  for (size_t i = 0; i < list->count; i++) {
    if (list->items[i] == kernel->program) return;
  }
  if (list->count == list->capacity) {
    size_t cap = list->capacity ? list->capacity * 2 : 16;
    const kvjit_program **grown = realloc(list->items, cap * sizeof *grown);
    if (grown == NULL) {
      list->failed = 1;
      return;
    }
    list->items = grown;
    list->capacity = cap;
  }
  list->items[list->count++] = kernel->program;
}

kvjit_status kvjit_op_counters(kvjit_context *ctx, const kvjit_op *op, uint64_t *count, int reset) {
  const kvjit_driver *drv;
  kvjit_status st = kvjit_driver_get(&drv);
  if (st != KVJIT_OK) return st;
  program_list list = {NULL, 0, 0, op->kernel, 0, 0};
  if ((st = kvjit_arch_current(drv, &list.sm)) != KVJIT_OK) return st;
  CUresult res = drv->cuCtxSynchronize();
  if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxSynchronize");
  kvjit_op_tables *tables = kvjit_op_tables_of(ctx);
  if (tables == NULL) return KVJIT_ERR_OUT_OF_MEMORY;
  kvjit_fast_map_foreach(tables->variants, collect_program, &list);
  if (list.failed) {
    free(list.items);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "%s: listing the loaded variants", op->info.name);
  }
  uint64_t total = 0;
  for (size_t i = 0; i < list.count && st == KVJIT_OK; i++) {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    st = kvjit_program_global(list.items[i], &ptr, &bytes, op->oob_counter);
    if (st != KVJIT_OK) break;
    if (bytes != sizeof(uint64_t)) {
      st = kvjit_fail(KVJIT_ERR_INTERNAL, "%s: %zu bytes, expected 8", op->oob_counter, bytes);
      break;
    }
    uint64_t value = 0;
    res = drv->cuMemcpyDtoH(&value, ptr, sizeof value);
    if (res != CUDA_SUCCESS) {
      st = kvjit_cuda_fail(drv, res, "cuMemcpyDtoH(oob counter)");
      break;
    }
    total += value;
    if (reset) {
      res = drv->cuMemsetD32(ptr, 0, 2);
      if (res != CUDA_SUCCESS) st = kvjit_cuda_fail(drv, res, "cuMemsetD32(oob counter)");
    }
  }
  free(list.items);
  if (st != KVJIT_OK) return st;
  if (reset) {
    res = drv->cuCtxSynchronize();
    if (res != CUDA_SUCCESS) return kvjit_cuda_fail(drv, res, "cuCtxSynchronize");
  }
  *count = total;
  kvjit_clear_error();
  return KVJIT_OK;
}

kvjit_status kvjit_op_stats_get(const kvjit_context *ctx, kvjit_op_stats *out) {
  if (ctx == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
  if (out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out: NULL");
  if (out->version != KVJIT_OP_STATS_VERSION) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "out->version: must be KVJIT_OP_STATS_VERSION (%d), got %u",
                      KVJIT_OP_STATS_VERSION, out->version);
  }
  /* The tables are made on first use, which reading them may be: not a change a caller can see. */
  kvjit_op_tables *tables = kvjit_op_tables_of((kvjit_context *)(uintptr_t)ctx);
  if (tables == NULL) return KVJIT_ERR_OUT_OF_MEMORY;
  kvjit_fast_map_stats v, r;
  kvjit_fast_map_get_stats(tables->variants, &v);
  kvjit_fast_map_get_stats(tables->recorded, &r);
  out->variants = v.entries;
  out->table_capacity = v.capacity;
  out->table_grows = v.grows;
  out->table_overflows = v.overflows;
  out->manifest_lines = r.entries;
  return KVJIT_OK;
}

kvjit_status kvjit_op_stats_init(kvjit_op_stats *out, unsigned version) {
  static const kvjit_op_stats defaults = KVJIT_OP_STATS_INIT;
  static const size_t ends[] = {0, sizeof defaults};
  return kvjit_struct_init(out, version, &defaults, ends, KVJIT_OP_STATS_VERSION, "kvjit_op_stats");
}
