/*
 * kvjit prewarm's shares as they finish (shares.c): the run's totals per variant, the progress bar
 * or one line per share.
 */
#ifndef KVJIT_CLI_SHARES_H
#define KVJIT_CLI_SHARES_H

#include <stdbool.h>

#include "cli.h"
#include "variants.h"

typedef struct prewarm_run {
  const char *cmd;
  const cache_opts *cache; /* each worker opens its own context with these */
  const variant_list *variants;
  bool progress_bar; /* stderr is a terminal: redraw one line; else one line per share */
  double start;
  unsigned shares;
  unsigned done;
  unsigned lost;                /* shares whose worker died before it reported them */
  char lost_why[64];            /* how the first such worker ended ("signal 11", "exit 3") */
  kvjit_prewarm_result *totals; /* per variant, summed over the shares */
} prewarm_run;


/* Folds one finished share into the totals and reports it. @p status is the share's own result;
 * one that is not OK and that no variant's result explains fails every variant not yet failed. */
void prewarm_share_done(prewarm_run *run, unsigned share, kvjit_status status, const char *detail,
                        const kvjit_prewarm_result *results, double seconds);

#endif
