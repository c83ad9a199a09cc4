/*
 * check_gpu: every case of every op of check_ops.c on this GPU (gpu suite; exits 77 without a
 * driver or device). See check.h for what the harness checks.
 *
 *   check_gpu                      the full space of every op
 *   KVJIT_TEST_QUICK=1 check_gpu   a deterministic sample (about one case in CHECK_QUICK_EVERY,
 *                                  the same on every machine), or --quick
 *   check_gpu --op transfer_kv     one op;  --case N: case N of it alone (what a failure prints)
 *   check_gpu --group layout       the cases whose description starts with that group's name
 *                                  (e.g. fields: the variant space of the ops' field tables, check_space.h)
 *   check_gpu --list [--quick]     the cases and their parameters, no GPU needed; --count: per op
 *                                  (and fails when an op of the library has no family here)
 *
 * The last line is "check_gpu: ... N passed, N failed, N skipped" (cases).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"

/** Quick mode runs the cases whose index hashes to 0 modulo this. */
#define CHECK_QUICK_EVERY 12

typedef struct options {
  const char *op;   /* NULL: every op */
  const char *group; /* NULL: every group */
  long long index;  /* -1: every selected case */
  int quick, list, count;
  const char *program;
} options;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
  fprintf(f, "usage: check_gpu [--op NAME] [--case N] [--group NAME] [--quick | --full] [--list | --count]\n"
             "  ops:");
  for (size_t i = 0; i < check_num_ops; i++) fprintf(f, " %s", check_ops[i]->name);
  fprintf(f, "\n  KVJIT_TEST_QUICK=1 is --quick\n");
}

static int parse(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->index = -1;
  o->program = argv[0];
  const char *q = getenv("KVJIT_TEST_QUICK");
  o->quick = q != NULL && strcmp(q, "1") == 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
      o->op = argv[++i];
    } else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
      char *end = NULL;
      o->index = strtoll(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || o->index < 0) {
        fprintf(stderr, "check_gpu: --case: not a case number: \"%s\"\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--group") == 0 && i + 1 < argc) {
      o->group = argv[++i];
    } else if (strcmp(argv[i], "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(argv[i], "--full") == 0) {
      o->quick = 0;
    } else if (strcmp(argv[i], "--list") == 0) {
      o->list = 1;
    } else if (strcmp(argv[i], "--count") == 0) {
      o->count = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      exit(0);
    } else {
      fprintf(stderr, "check_gpu: unknown argument \"%s\"\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (o->op != NULL) {
    int found = 0;
    for (size_t i = 0; i < check_num_ops; i++) found |= strcmp(check_ops[i]->name, o->op) == 0;
    if (!found) {
      fprintf(stderr, "check_gpu: --op: no op \"%s\"\n", o->op);
      usage(stderr);
      return 2;
    }
  }
  if (o->index >= 0 && o->op == NULL) {
    fprintf(stderr, "check_gpu: --case needs --op\n");
    return 2;
  }
  return 0;
}

static int in_quick(const check_op *op, size_t index) {
  return check_mix(check_op_seed(op) ^ check_mix(index ^ 0x9a1c7ull)) % CHECK_QUICK_EVERY == 0;
}

/* The indices of @p op this run covers. */
static size_t select_cases(const check_op *op, const options *o, size_t **out) {
  size_t total = op->count(), n = 0;
  size_t *idx = malloc(sizeof *idx * (total ? total : 1));
  if (idx == NULL) abort();
  if (o->index >= 0) {
    if ((size_t)o->index < total) idx[n++] = (size_t)o->index;
  } else {
    void *c = o->group ? malloc(op->case_size) : NULL;
    char what[640];
    const size_t glen = o->group ? strlen(o->group) : 0;
    for (size_t i = 0; i < total; i++) {
      if (o->quick && !in_quick(op, i)) continue;
      if (o->group) { /* a case's description starts with its group's name */
        op->get(i, c);
        op->describe(c, what, sizeof what);
        if (strncmp(what, o->group, glen) != 0 || (what[glen] != ' ' && what[glen] != '\0')) continue;
      }
      idx[n++] = i;
    }
    free(c);
  }
  *out = idx;
  return n;
}

/* ---- bundled prewarm of the selected cases' variants (NVRTC's fixed cost once per bundle) --------- */

typedef struct prewarm_job {
  kvjit_context *ctx;
  const kvjit_variant *variants;
  size_t count;
  unsigned shares;
  atomic_uint next, failures;
} prewarm_job;

static void *prewarm_worker(void *arg) {
  prewarm_job *job = arg;
  kvjit_prewarm_result *results = malloc(job->count * sizeof *results);
  if (results == NULL) abort();
  for (;;) {
    unsigned share = atomic_fetch_add(&job->next, 1);
    if (share >= job->shares) break;
    if (kvjit_variants_prewarm(job->ctx, job->variants, job->count, share, job->shares, results) != KVJIT_OK) {
      fprintf(stderr, "check_gpu: prewarm share %u: %s\n", share, kvjit_last_error());
      atomic_fetch_add(&job->failures, 1);
    }
  }
  free(results);
  return NULL;
}

static int cmp_line(const void *a, const void *b) { return strcmp(a, b); }

enum { LINE = 256 };

static unsigned prewarm(kvjit_context *ctx, const check_case_run *runs, size_t n, int sm) {
  char *lines = malloc((n ? n : 1) * LINE);
  kvjit_variant *variants = malloc((n ? n : 1) * sizeof *variants);
  if (lines == NULL || variants == NULL) abort();
  size_t count = 0, distinct = 0;
  for (size_t i = 0; i < n; i++)
    if (runs[i].op->manifest_line(runs[i].c, sm, runs[i].pdl, lines + count * LINE, LINE)) count++;
  qsort(lines, count, LINE, cmp_line);
  for (size_t i = 0; i < count; i++) {
    if (i > 0 && strcmp(lines + i * LINE, lines + (i - 1) * LINE) == 0) continue;
    if (kvjit_variant_parse(&variants[distinct], lines + i * LINE) != KVJIT_OK) {
      fprintf(stderr, "check_gpu: manifest line \"%s\": %s\n", lines + i * LINE, kvjit_last_error());
      continue;
    }
    distinct++;
  }
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cores < 1 ? 1 : cores > 16 ? 16 : (int)cores;
  prewarm_job job = {ctx, variants, distinct, (unsigned)threads * 2, 0, 0};
  pthread_t tid[16];
  for (int t = 0; t < threads && distinct > 0; t++) pthread_create(&tid[t], NULL, prewarm_worker, &job);
  for (int t = 0; t < threads && distinct > 0; t++) pthread_join(tid[t], NULL);
  free(lines);
  free(variants);
  return atomic_load(&job.failures);
}

/* ---- main ---------------------------------------------------------------------------------------------- */

/* Every op of the library has its family in the table (adding an op = its checks too). */
static int every_op_checked(void) {
  int missing = 0;
  for (size_t i = 0; i < kvjit_op_count(); i++) {
    const kvjit_op_info *info = kvjit_op_get(i);
    int found = 0;
    for (size_t k = 0; k < check_num_ops; k++) found |= strcmp(check_ops[k]->name, info->name) == 0;
    if (!found) {
      fprintf(stderr, "check_gpu: op %s has no family in tests/check/check_ops.c\n", info->name);
      missing++;
    }
  }
  return missing;
}

static int list(const options *o) {
  if (o->count && every_op_checked() != 0) return 1;
  for (size_t k = 0; k < check_num_ops; k++) {
    const check_op *op = check_ops[k];
    if (o->op && strcmp(o->op, op->name) != 0) continue;
    size_t *idx, n = select_cases(op, o, &idx);
    if (o->count) {
      options quick = *o;
      quick.quick = 1;
      size_t *qidx, nq = select_cases(op, &quick, &qidx);
      printf("%s: %zu cases, %zu in quick mode\n", op->name, op->count(), nq);
      free(qidx);
    } else {
      void *c = malloc(op->case_size);
      char what[640];
      for (size_t i = 0; i < n; i++) {
        op->get(idx[i], c);
        op->describe(c, what, sizeof what);
        printf("%s #%zu: %s\n", op->name, idx[i], what);
      }
      free(c);
    }
    free(idx);
  }
  return 0;
}

static void run_op(const check_op *op, const options *o, kvjit_context *ctx, const gpu_env *env, CUstream stream,
                   check_totals *t) {
  double t0 = now_s();
  size_t *idx, n = select_cases(op, o, &idx);
  char *cases = malloc(op->case_size * (n ? n : 1));
  check_case_run *runs = malloc(sizeof *runs * (n ? n : 1));
  if (cases == NULL || runs == NULL) abort();
  for (size_t i = 0; i < n; i++) {
    op->get(idx[i], cases + i * op->case_size);
    check_plan_run(&runs[i], op, idx[i], cases + i * op->case_size, env->sm, stream);
    runs[i].program = o->program;
  }
  kvjit_stats s0 = KVJIT_STATS_INIT, s1 = KVJIT_STATS_INIT;
  kvjit_context_stats(ctx, &s0);
  if (n > 1 && prewarm(ctx, runs, n, env->sm) != 0) t->failures++;
  double t1 = now_s();
  for (size_t i = 0; i < n; i++) check_run_case(t, &runs[i], ctx);
  kvjit_context_stats(ctx, &s1);
  printf("check %s: sm_%d, %s, %llu cases (%llu in graphs; PDL auto/on/off %llu/%llu/%llu), %llu runs, %llu launches, "
         "%llu rows, %.1f MB compared, %llu kernels compiled (prewarm %.1f s), %llu failures, %.1f s\n",
         op->name, env->sm, o->index >= 0 ? "one case" : o->quick ? "quick" : "full", (unsigned long long)t->cases,
         (unsigned long long)t->graph_cases, (unsigned long long)t->pdl[KVJIT_PDL_AUTO],
         (unsigned long long)t->pdl[KVJIT_PDL_ON], (unsigned long long)t->pdl[KVJIT_PDL_OFF],
         (unsigned long long)t->runs, (unsigned long long)t->launches, (unsigned long long)t->rows,
         (double)t->bytes / 1e6, (unsigned long long)(s1.compiles - s0.compiles), t1 - t0,
         (unsigned long long)t->failures, now_s() - t0);
  free(idx);
  free(cases);
  free(runs);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  options o;
  int rc = parse(argc, argv, &o);
  if (rc != 0) return rc;
  if (o.list || o.count) return list(&o);
  gpu_env env;
  if ((rc = gpu_setup(&env)) != 0) return rc;
  kvjit_context *ctx = NULL;
  char dir[64];
  if (gpu_context_create(&ctx, dir, sizeof dir, "check", NULL) != 0) return 1;
  CUstream stream = NULL;
  GPU_CU(env.drv->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  printf("device 0: %s, sm_%d, %d device(s)%s\n", env.name, env.sm, env.device_count, o.quick ? ", quick" : "");
  uint64_t cases = 0, failed = 0;
  double t0 = now_s();
  for (size_t k = 0; k < check_num_ops; k++) {
    if (o.op && strcmp(o.op, check_ops[k]->name) != 0) continue;
    check_totals t;
    memset(&t, 0, sizeof t);
    run_op(check_ops[k], &o, ctx, &env, stream, &t);
    cases += t.cases;
    failed += t.failed_cases + (t.failures > t.failed_cases ? 1 : 0); /* a failed prewarm counts once */
  }
  GPU_CU(env.drv->cuStreamDestroy(stream));
  gpu_context_destroy(ctx, dir);
  gpu_teardown(&env);
  printf("check_gpu: sm_%d, %s, %.1f s: %llu passed, %llu failed, 0 skipped\n", env.sm,
         o.index >= 0 ? "one case" : o.quick ? "quick" : "full", now_s() - t0,
         (unsigned long long)(cases > failed ? cases - failed : 0), (unsigned long long)failed);
  return failed ? 1 : 0;
}
