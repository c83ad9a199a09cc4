/*
 * Prewarm (op_prewarm.h): the kernels of many variants, planned for every batch class, each distinct
 * kernel once, grouped by program (one op template, its options and arch) and compiled as
 * bundles (bundle.h), so that NVRTC's fixed cost is paid once per group rather than once per
 * kernel. The kernels are cut into shares of about equal size for callers that build shares on
 * threads: deterministic, so every share's caller cuts the same way.
 */
#include "op_prewarm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "loader.h"
#include "op.h"
#include "status.h"
#include "variant.h"
#include "xxh.h"

/* At most this many distinct plans per variant (one per batch class). */
enum { MAX_CLASSES = 8 };

typedef struct pw_variant {
  const kvjit_op *op;
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  char line[KVJIT_VARIANT_MAX_FIELDS * 32];
  kvjit_entry_label label;
  size_t kernels[MAX_CLASSES]; /* its distinct kernels (indexes into the set's) */
  size_t num_kernels;
  kvjit_status status;
  char error[256];
} pw_variant;

typedef struct pw_kernel {
  kvjit_op_program prog; /* points into itself: never moved once filled */
  size_t owner;          /* the first variant that plans it: its entry's label */
  size_t family;         /* kernels of one family can share a program */
  size_t seq;            /* planning order */
  unsigned cost;         /* relative NVRTC time (op->compile_cost) */
  int in_share;          /* built by this call */
  uint64_t hash;
  kvjit_origin origin;
  kvjit_status status;
  char error[256];
} pw_kernel;

typedef struct pw_set {
  pw_variant *variants;
  size_t num_variants;
  pw_kernel **kernels; /* allocated one by one: they point into themselves */
  size_t num_kernels, cap_kernels;
  size_t *slots; /* open addressing over kernels by hash: index + 1, 0 empty */
  size_t num_slots;
  const kvjit_program_desc **families; /* the first kernel's description of each family */
  size_t num_families, cap_families;
} pw_set;

static void fail_into(char *error, size_t cap) { snprintf(error, cap, "%s", kvjit_last_error()); }

/* Kernels of one family differ only in their kernel name: same program name, template, options
 * and target (op programs have no headers). */
static int same_family(const kvjit_program_desc *a, const kvjit_program_desc *b) {
  if (a->arch != b->arch || strcmp(a->name, b->name) != 0 || a->num_options != b->num_options ||
      a->num_headers != 0 || b->num_headers != 0 || (a->source != b->source && strcmp(a->source, b->source) != 0)) {
    return 0;
  }
  for (size_t i = 0; i < a->num_options; i++) {
    if (strcmp(a->options[i], b->options[i]) != 0) return 0;
  }
  return 1;
}

static uint64_t kernel_hash(const kvjit_program_desc *d) {
  uint64_t h = XXH3_64bits(d->kernels[0], strlen(d->kernels[0]));
  return h ^ XXH3_64bits(d->name, strlen(d->name)) ^ ((uint64_t)(unsigned)d->arch * 0x9e3779b97f4a7c15ull);
}

static int grow_slots(pw_set *s) {
  size_t n = s->num_slots ? s->num_slots * 2 : 64;
  size_t *slots = calloc(n, sizeof *slots);
  if (slots == NULL) return -1;
  for (size_t k = 0; k < s->num_kernels; k++) {
    size_t i = (size_t)s->kernels[k]->hash & (n - 1);
    while (slots[i]) i = (i + 1) & (n - 1);
    slots[i] = k + 1;
  }
  free(s->slots);
  s->slots = slots;
  s->num_slots = n;
  return 0;
}

/* The index of @p k's kernel in the set, adding it (moved in) when new; (size_t)-1 out of memory. */
static size_t add_kernel(pw_set *s, pw_kernel *k, size_t owner) {
  k->hash = kernel_hash(&k->prog.desc);
  if ((s->num_kernels + 1) * 2 > s->num_slots && grow_slots(s) != 0) return (size_t)-1;
  size_t i = (size_t)k->hash & (s->num_slots - 1);
  for (; s->slots[i]; i = (i + 1) & (s->num_slots - 1)) {
    const pw_kernel *o = s->kernels[s->slots[i] - 1];
    if (o->hash == k->hash && strcmp(o->prog.kernel, k->prog.kernel) == 0 && same_family(&o->prog.desc, &k->prog.desc)) {
      return s->slots[i] - 1;
    }
  }
  if (s->num_kernels == s->cap_kernels) {
    size_t cap = s->cap_kernels ? s->cap_kernels * 2 : 64;
    pw_kernel **grown = realloc(s->kernels, cap * sizeof *grown);
    if (grown == NULL) return (size_t)-1;
    s->kernels = grown;
    s->cap_kernels = cap;
  }
  pw_kernel *own = malloc(sizeof *own);
  if (own == NULL) return (size_t)-1;
  /* Filled again in place: the description points into the struct. */
  *own = *k;
  own->prog.desc.kernels = own->prog.kernels;
  own->prog.kernels[0] = own->prog.kernel;
  own->owner = owner;
  own->origin = KVJIT_FROM_DISK;
  own->status = KVJIT_OK;
  own->error[0] = '\0';
  own->seq = s->num_kernels;
  own->in_share = 0;
  own->family = s->num_families;
  for (size_t f = 0; f < s->num_families; f++) {
    if (same_family(s->families[f], &own->prog.desc)) {
      own->family = f;
      break;
    }
  }
  if (own->family == s->num_families) {
    if (s->num_families == s->cap_families) {
      size_t cap = s->cap_families ? s->cap_families * 2 : 8;
      const kvjit_program_desc **grown = realloc(s->families, cap * sizeof *grown);
      if (grown == NULL) {
        free(own);
        return (size_t)-1;
      }
      s->families = grown;
      s->cap_families = cap;
    }
    s->families[s->num_families++] = &own->prog.desc;
  }
  s->kernels[s->num_kernels] = own;
  s->slots[i] = ++s->num_kernels;
  return s->num_kernels - 1;
}

/* A variant's arch (the device's for 0), line and distinct kernels. */
static kvjit_status plan_variant(pw_set *s, size_t index) {
  pw_variant *v = &s->variants[index];
  const kvjit_op *op = v->op;
  kvjit_status st;
  if (v->values[0] == 0) {
    const kvjit_driver *drv;
    int arch = 0;
    if ((st = kvjit_driver_get(&drv)) != KVJIT_OK) return st;
    if ((st = kvjit_driver_current_sm(drv, &arch, NULL)) != KVJIT_OK) return st;
    v->values[0] = arch;
    /* Again with the real arch (PDL on needs sm_90, ...). */
    if ((st = kvjit_op_check_values(op, v->values, KVJIT_OP_ALL_GIVEN)) != KVJIT_OK) return st;
  }
  if ((st = kvjit_op_format_line(op, v->values, v->line, sizeof v->line)) != KVJIT_OK) return st;
  v->label.op = op->info.name;
  v->label.variant = v->line;
  /* Every kernel the automatic choice may pick: one plan per batch class, duplicates once. */
  for (int cls = 0; cls < op->info.num_classes && cls < MAX_CLASSES; cls++) {
    kvjit_op_plan_buffer plan;
    if ((st = kvjit_op_make_plan(op, v->values, cls, &plan)) != KVJIT_OK) return st;
    pw_kernel k;
    if ((st = op->program(plan.bytes, &k.prog)) != KVJIT_OK) return st;
    k.cost = op->compile_cost ? op->compile_cost(plan.bytes) : 1;
    if (k.cost == 0) k.cost = 1;
    size_t at = add_kernel(s, &k, index);
    if (at == (size_t)-1) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prewarm: out of memory");
    int seen = 0;
    for (size_t i = 0; i < v->num_kernels && !seen; i++) seen = v->kernels[i] == at;
    if (!seen) v->kernels[v->num_kernels++] = at;
  }
  return KVJIT_OK;
}

static void set_free(pw_set *s) {
  for (size_t k = 0; k < s->num_kernels; k++) free(s->kernels[k]);
  free(s->kernels);
  free(s->slots);
  free(s->families);
}

/* A family's order and a kernel's place in it from what they are alone (program name, arch,
 * options, template, kernel name), never from the order variants were given or planned: the
 * bundles, and so the entries a prewarm writes, are the same however it is run or split. */
static int by_family(const void *pa, const void *pb) {
  const pw_kernel *a = *(pw_kernel *const *)pa, *b = *(pw_kernel *const *)pb;
  const kvjit_program_desc *x = &a->prog.desc, *y = &b->prog.desc;
  int c = strcmp(x->name, y->name);
  if (c == 0) c = (x->arch > y->arch) - (x->arch < y->arch);
  if (c == 0) c = (x->num_options > y->num_options) - (x->num_options < y->num_options);
  for (size_t i = 0; c == 0 && i < x->num_options; i++) c = strcmp(x->options[i], y->options[i]);
  if (c == 0 && x->source != y->source) c = strcmp(x->source, y->source);
  if (c == 0) c = strcmp(a->prog.kernel, b->prog.kernel);
  return c;
}

/* One kernel alone (a failed group retried kernel by kernel, so each failure is its own). */
static void compile_alone(kvjit_context *ctx, pw_set *s, pw_kernel *k) {
  k->status = kvjit_program_compile_labeled(ctx, &k->origin, &k->prog.desc, &s->variants[k->owner].label);
  if (k->status != KVJIT_OK) fail_into(k->error, sizeof k->error);
}

/* One bundle: kernels run[0 .. count) of one family, compiled as one group (bundle.h). */
static void compile_bundle(kvjit_context *ctx, pw_set *s, pw_kernel **run, size_t count) {
  const char *names[KVJIT_PREWARM_GROUP_MAX];
  kvjit_group_member members[KVJIT_PREWARM_GROUP_MAX];
  kvjit_program_desc desc = run[0]->prog.desc;
  for (size_t i = 0; i < count; i++) {
    names[i] = run[i]->prog.kernel;
    members[i].label = &s->variants[run[i]->owner].label;
    members[i].origin = KVJIT_FROM_DISK;
  }
  desc.kernels = names;
  desc.num_kernels = count;
  kvjit_status st = kvjit_program_compile_group(ctx, &desc, members);
  if (st == KVJIT_OK) {
    for (size_t i = 0; i < count; i++) run[i]->origin = members[i].origin;
  } else if (st == KVJIT_ERR_COMPILE || st == KVJIT_ERR_NVRTC || st == KVJIT_ERR_NOT_CACHED) {
    /* One kernel that does not compile fails its bundle: each alone, so the failure is its own
     * (under KVJIT_COMPILE=never that costs nothing, and each miss names its own variant). */
    for (size_t i = 0; i < count; i++) compile_alone(ctx, s, run[i]);
  } else {
    /* The same for every kernel (not cached, out of memory, no NVRTC): no use compiling alone. */
    for (size_t i = 0; i < count; i++) {
      run[i]->status = st;
      fail_into(run[i]->error, sizeof run[i]->error);
    }
  }
}

/* The bundles of the whole set, decided before any share is: each family (in by_family order)
 * cut into ceil(n / KVJIT_PREWARM_GROUP_MAX) bundles of even size. Bundle b is
 * order[start[b] .. start[b + 1]). @return the number of bundles. */
static size_t cut_bundles(pw_kernel **order, size_t n, size_t *start) {
  size_t bundles = 0;
  for (size_t a = 0, b; a < n; a = b) {
    for (b = a; b < n && order[b]->family == order[a]->family; b++) {
    }
    const size_t len = b - a, groups = (len + KVJIT_PREWARM_GROUP_MAX - 1) / KVJIT_PREWARM_GROUP_MAX;
    for (size_t g = 0; g < groups; g++) start[bundles++] = a + len * g / groups;
  }
  start[bundles] = n;
  return bundles;
}

kvjit_status kvjit_op_prewarm_set(kvjit_context *ctx, const kvjit_op *const *ops, const int64_t *const *values,
                                  size_t count, unsigned part, unsigned parts, kvjit_prewarm_result *results) {
  pw_set s;
  memset(&s, 0, sizeof s);
  for (size_t i = 0; i < count; i++) memset(&results[i], 0, sizeof results[i]);
  if (count == 0) return KVJIT_OK;
  if ((s.variants = calloc(count, sizeof *s.variants)) == NULL) {
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prewarm: out of memory");
  }
  s.num_variants = count;
  kvjit_status st = KVJIT_OK;
  for (size_t i = 0; i < count; i++) {
    pw_variant *v = &s.variants[i];
    v->op = ops[i];
    memcpy(v->values, values[i], ops[i]->info.num_fields * sizeof v->values[0]);
    if ((v->status = plan_variant(&s, i)) != KVJIT_OK) {
      if (v->status == KVJIT_ERR_OUT_OF_MEMORY) {
        st = v->status;
        goto done;
      }
      fail_into(v->error, sizeof v->error);
    }
  }
  pw_kernel **order = malloc((s.num_kernels ? s.num_kernels : 1) * sizeof *order);
  if (order == NULL) {
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prewarm: out of memory");
    goto done;
  }
  memcpy(order, s.kernels, s.num_kernels * sizeof *order);
  qsort(order, s.num_kernels, sizeof *order, by_family);
  size_t *start = malloc((s.num_kernels + 1) * sizeof *start);
  if (start == NULL) {
    free(order);
    st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "prewarm: out of memory");
    goto done;
  }
  const size_t bundles = cut_bundles(order, s.num_kernels, start);
  /* This share: the whole bundles whose cost midpoint falls in [W * part / parts,
   * W * (part + 1) / parts) of the total W, so that shares on threads take about the same time
   * and every share holds the bundles a single run would write. */
  uint64_t total = 0;
  for (size_t k = 0; k < s.num_kernels; k++) total += order[k]->cost;
  uint64_t before = 0;
  for (size_t b = 0; b < bundles; b++) {
    uint64_t cost = 0;
    for (size_t k = start[b]; k < start[b + 1]; k++) cost += order[k]->cost;
    unsigned share = (unsigned)((2 * before + cost) * parts / (2 * total));
    before += cost;
    if (share != part) continue;
    for (size_t k = start[b]; k < start[b + 1]; k++) order[k]->in_share = 1;
    compile_bundle(ctx, &s, order + start[b], start[b + 1] - start[b]);
  }
  free(start);
  free(order);
  for (size_t i = 0; i < count; i++) {
    pw_variant *v = &s.variants[i];
    kvjit_prewarm_result *r = &results[i];
    r->status = v->status;
    snprintf(r->error, sizeof r->error, "%s", v->error);
    for (size_t j = 0; j < v->num_kernels && r->status == KVJIT_OK; j++) {
      const pw_kernel *k = s.kernels[v->kernels[j]];
      if (!k->in_share) continue;
      if (k->status != KVJIT_OK) {
        r->status = k->status;
        snprintf(r->error, sizeof r->error, "%s", k->error);
      } else if (k->owner == i && k->origin == KVJIT_FROM_COMPILE) {
        r->compiled++;
      } else {
        r->cached++;
      }
    }
    if (r->status != KVJIT_OK && st == KVJIT_OK) st = r->status;
  }
done:
  if (st != KVJIT_OK) {
    for (size_t i = 0; i < count; i++) {
      if (results[i].status != KVJIT_OK) {
        kvjit_fail(results[i].status, "%s", results[i].error);
        break;
      }
    }
  }
  set_free(&s);
  free(s.variants);
  if (st == KVJIT_OK) kvjit_clear_error();
  return st;
}

kvjit_status kvjit_op_prewarm(kvjit_context *ctx, const kvjit_op *op, const int64_t *checked, unsigned *compiled,
                              unsigned *cached) {
  kvjit_prewarm_result r;
  kvjit_status st = kvjit_op_prewarm_set(ctx, &op, &checked, 1, 0, 1, &r);
  if (compiled) *compiled = st == KVJIT_OK ? r.compiled : 0;
  if (cached) *cached = st == KVJIT_OK ? r.cached : 0;
  return st;
}

kvjit_status kvjit_op_locate(kvjit_context *ctx, const kvjit_op *op, const int64_t *checked, unsigned *local,
                             unsigned *remote, unsigned *missing, kvjit_miss_info *why) {
  *local = *remote = *missing = 0;
  if (why) memset(why, 0, sizeof *why);
  int64_t values[KVJIT_VARIANT_MAX_FIELDS];
  memcpy(values, checked, op->info.num_fields * sizeof values[0]);
  kvjit_status st;
  if (values[0] == 0) {
    const kvjit_driver *drv;
    int arch = 0;
    if ((st = kvjit_driver_get(&drv)) != KVJIT_OK || (st = kvjit_driver_current_sm(drv, &arch, NULL)) != KVJIT_OK) {
      return st;
    }
    values[0] = arch;
    if ((st = kvjit_op_check_values(op, values, KVJIT_OP_ALL_GIVEN)) != KVJIT_OK) return st;
  }
  char line[KVJIT_VARIANT_MAX_FIELDS * 32];
  if ((st = kvjit_op_format_line(op, values, line, sizeof line)) != KVJIT_OK) return st;
  kvjit_entry_label label = {op->info.name, line};
  /* The programs a runtime lookup would ask for: one per distinct plan, as kvjit_op_prewarm(). */
  kvjit_op_plan_buffer done[MAX_CLASSES];
  int num_done = 0;
  for (int cls = 0; cls < op->info.num_classes && cls < MAX_CLASSES; cls++) {
    if ((st = kvjit_op_make_plan(op, values, cls, &done[num_done])) != KVJIT_OK) return st;
    int seen = 0;
    for (int i = 0; i < num_done && !seen; i++) seen = memcmp(done[i].bytes, done[num_done].bytes, op->plan_size) == 0;
    if (seen) continue;
    kvjit_op_program prog;
    if ((st = op->program(done[num_done].bytes, &prog)) != KVJIT_OK) return st;
    num_done++;
    /* The one-kernel program a runtime miss asks for: found as an entry or as a bundle's alias. */
    kvjit_cached_at where = KVJIT_CACHED_NOWHERE;
    kvjit_miss_info first;
    int explain = why != NULL && why->cause == KVJIT_MISS_NONE;
    if ((st = kvjit_program_find(ctx, &prog.desc, &label, &where, explain ? &first : NULL)) != KVJIT_OK) return st;
    if (explain && where != KVJIT_CACHED_LOCAL) *why = first;
    if (where == KVJIT_CACHED_LOCAL) (*local)++;
    else if (where == KVJIT_CACHED_REMOTE) (*remote)++;
    else (*missing)++; /* nowhere, or a remote that could not say: a server would compile it */
  }
  kvjit_clear_error();
  return KVJIT_OK;
}
