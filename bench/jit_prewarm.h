/*
 * bench_jit's prewarm and compile-option measurements (jit_prewarm.c): the README's main prewarm
 * set in one share and in shares on every core, a lookup through an alias into a bundle, and the
 * later compile of one store variant with each speed option (each in a child process: a
 * precompiled header is process state).
 */
#ifndef KVJIT_BENCH_JIT_PREWARM_H
#define KVJIT_BENCH_JIT_PREWARM_H

#include "bench_util.h"
#include "kvjit.h"
#include "kvjit_tools.h"

/** The README's main prewarm set for @p arch (scripts/main.sh's default: Llama-3.1-8B ...). */
size_t jit_main_set(kvjit_variant *out, size_t capacity, int arch);

typedef struct jit_prewarm_result {
  double first_ms;       /* the whole set, one thread, the first time in the process (NVRTC's pages for
                          * these kernels may still be on disk: a fresh machine's first prewarm) */
  double one_share_ms;   /* the whole set, one thread, again (warm) */
  double shares_ms;      /* the whole set, one share per core on as many threads of one process */
  double procs_ms;       /* the whole set, one share per core on as many processes (kvjit prewarm -j) */
  unsigned shares;
  unsigned variants, kernels, programs; /* kernels compiled, NVRTC programs they took */
  bench_stats alias_compile; /* kvjit_program_compile of one kernel found through its alias, fresh context */
  bench_stats alias_load;    /* kvjit_program_get of one such kernel (bundle read and loaded), with a driver */
} jit_prewarm_result;

/** Measure the main set for @p arch in fresh dirs under @p root; @p reps lookups each. */
int jit_prewarm_measure(jit_prewarm_result *out, const char *root, int arch, int reps, int have_driver);

/** One speed-option set's later compiles. */
typedef struct jit_option_result {
  const char *label, *csv;
  bench_stats later; /* ms per compile of distinct sources, after the first in the process */
  double first;      /* ms of the first (NVRTC start-up; with -pch the one that makes the header) */
} jit_option_result;

/** The store variant @p desc (its kernel name and options) compiled @p reps + 1 times, salted, per option set. */
size_t jit_options_measure(jit_option_result *out, size_t capacity, const kvjit_program_desc *desc, int reps);

#endif
