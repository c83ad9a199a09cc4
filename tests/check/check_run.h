/* The harness's side of check.h: one case run, and what the runs add up to (check.c). */
#ifndef KVJIT_TEST_CHECK_RUN_H
#define KVJIT_TEST_CHECK_RUN_H

#include "check.h"

/** One op's totals over a run of the harness. */
typedef struct check_totals {
  uint64_t cases, failed_cases, runs, launches, rows, bytes, failures, graph_cases;
  uint64_t pdl[3]; /* cases by the mode they ran with: [KVJIT_PDL_AUTO], [_ON], [_OFF] */
} check_totals;

/** A case as the harness runs it: the op's case plus the harness's choices. */
typedef struct check_case_run {
  const check_op *op;
  size_t index;
  const void *c;
  kvjit_pdl_mode pdl;
  int graph;                  /* replays in a graph (0: none) */
  struct CUstream_st *stream; /* NULL: the legacy default stream */
  const char *program;        /* argv[0], for the rerun line */
} check_case_run;

/** The harness's choices for case @p index (PDL mode, graph replays, stream), from the index alone. */
void check_plan_run(check_case_run *r, const check_op *op, size_t index, const void *c, int sm, CUstream stream);

/** A case's world: laid out, allocated, filled (seeded from @p index) and uploaded; @p sets and
 *  @p timing as in check_world (a check: 1, 0). Aborts when memory runs out. */
check_world *check_world_make(const check_op *op, const void *c, size_t index, int sets, int timing);
/** Free a world's buffers; accepts NULL. */
void check_world_destroy(check_world *w);

/** Run one case (eager, then its graph replays); failures are printed with a rerun line. @return 0 when it passed. */
int check_run_case(check_totals *t, const check_case_run *r, kvjit_context *ctx);

/** "on", "off" or "auto". */
const char *check_pdl_name(kvjit_pdl_mode pdl);
/** A seed of the op's name: each op's random streams differ. */
uint64_t check_op_seed(const check_op *op);

#endif
