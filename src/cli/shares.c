/* kvjit prewarm's shares as they finish: totals, the progress bar, workers' lines (shares.h). */
#include "shares.h"

#include <inttypes.h>
#include <stdio.h>

static void draw_progress_bar(prewarm_run *run) {
  enum { WIDTH = 30 };
  uint64_t compiled = 0, cached = 0;
  for (size_t i = 0; i < run->variants->count; i++) {
    compiled += run->totals[i].compiled;
    cached += run->totals[i].cached;
  }
  size_t filled = run->shares ? run->done * WIDTH / run->shares : WIDTH;
  char bar[WIDTH + 1];
  for (size_t i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(stderr, "\r\033[K[%s] %u/%u shares  kernels: compiled %" PRIu64 "  cached %" PRIu64 "  %.1fs", bar,
          run->done, run->shares, compiled, cached, now_seconds() - run->start);
  fflush(stderr);
  run->last_draw = now_seconds();
}

void prewarm_progress(prewarm_run *run, bool now) {
  if (run->progress_bar && (now || now_seconds() - run->last_draw >= 1.0)) draw_progress_bar(run);
}

void prewarm_print_line(prewarm_run *run, const char *line) {
  if (run->progress_bar) fputs("\r\033[K", stderr);
  fprintf(stderr, "%s\n", line);
  prewarm_progress(run, true);
}

void prewarm_share_done(prewarm_run *run, unsigned share, kvjit_status status, const char *detail,
                        const kvjit_prewarm_result *results, double seconds) {
  const size_t count = run->variants->count;
  /* A share that failed as a whole (out of memory, no cache) leaves every variant unbuilt. */
  int explained = 0;
  for (size_t i = 0; results != NULL && i < count; i++) explained |= results[i].status != KVJIT_OK;
  for (size_t i = 0; status != KVJIT_OK && !explained && i < count; i++) {
    if (run->totals[i].status != KVJIT_OK) continue;
    run->totals[i].status = status;
    snprintf(run->totals[i].error, sizeof run->totals[i].error, "%s", detail);
  }
  unsigned compiled = 0, cached = 0;
  for (size_t i = 0; results != NULL && i < count; i++) {
    kvjit_prewarm_result *t = &run->totals[i];
    compiled += results[i].compiled;
    cached += results[i].cached;
    t->compiled += results[i].compiled;
    t->cached += results[i].cached;
    if (t->status == KVJIT_OK && results[i].status != KVJIT_OK) {
      t->status = results[i].status;
      snprintf(t->error, sizeof t->error, "%s", results[i].error);
    }
  }
  run->done++;
  if (run->progress_bar) {
    draw_progress_bar(run);
  } else {
    fprintf(stderr, "[share %u/%u] kernels: %u compiled, %u cached, %.2f s\n", share + 1, run->shares, compiled,
            cached, seconds);
  }
}
