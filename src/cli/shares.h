/*
 * kvjit prewarm's shares as they finish (shares.c): the run's totals per variant, the progress bar
 * or one line per share, and the lines workers print, shown above the bar.
 */
#ifndef KVJIT_CLI_SHARES_H
#define KVJIT_CLI_SHARES_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"
#include "variants.h"

typedef struct prewarm_run {
  const char *cmd;
  const cache_opts *cache; /* each worker opens its own context with these */
  const variant_list *variants;
  bool progress_bar; /* stderr is a terminal: redraw one line, every second; else one line per share */
  double start;
  double last_draw; /* when the bar was drawn last */
  unsigned shares;
  unsigned done;
  unsigned lost;                /* shares whose worker died before it reported them */
  char lost_why[64];            /* how the first such worker ended ("signal 11", "exit 3") */
  kvjit_prewarm_result *totals; /* per variant, summed over the shares */
  uint64_t remote_writes;       /* entries PUT to the remote tier */
  uint64_t remote_failures;     /* remote requests that failed, timed out or were skipped */
} prewarm_run;

/* Redraws the progress bar (when there is one) if @p now or a second has passed since the last. */
void prewarm_progress(prewarm_run *run, bool now);
/* Prints one line a worker wrote to stderr, above the progress bar. */
void prewarm_print_line(prewarm_run *run, const char *line);

/* Folds one finished share into the totals and reports it. @p status is the share's own result;
 * one that is not OK and that no variant's result explains fails every variant not yet failed. */
void prewarm_share_done(prewarm_run *run, unsigned share, kvjit_status status, const char *detail,
                        const kvjit_prewarm_result *results, double seconds);

#endif
