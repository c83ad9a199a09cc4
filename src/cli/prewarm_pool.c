/*
 * kvjit prewarm's worker processes (prewarm_pool.h says why processes).
 *
 * The parent forks the workers, feeds share numbers into one queue pipe (4 bytes each, written
 * non-blocking as the queue drains, so any number of shares fits) and reads each worker's own
 * result pipe: a "started share S" message, then "done" with the share's per-variant results.
 * Each worker opens its own context and compiles into the same cache dirs (the cache's locks make
 * that safe, as for any processes). A worker that dies leaves its started share unreported: at
 * the end the parent looks up each variant it had not seen fail, and fails those with a kernel
 * missing. A failure is never reported as success.
 *
 * The workers' stderr is one pipe the parent reads: a line several workers print alike (a bad
 * environment variable, a remote that does not answer) is shown once. Each share's "done" also
 * carries the remote tier's counters, so that the summary can say what was pushed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prewarm_pool.h"

enum { MAX_WORKERS = 256 };
enum { MSG_STARTED = 1, MSG_DONE = 2 };

typedef struct msg {
  uint32_t kind;
  uint32_t share;
  int32_t status;
  double seconds;
  uint64_t remote_writes, remote_failures; /* during the share */
  char detail[256];
} msg;

typedef struct worker {
  pid_t pid;
  int fd;       /* its result pipe; -1 once it closed */
  long running; /* the share it started and has not reported, or -1 */
} worker;

static int write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* 1: all @p n bytes; 0: end of file or an error first (a worker gone). */
static int read_all(int fd, void *data, size_t n) {
  char *p = data;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    p += r;
    n -= (size_t)r;
  }
  return 1;
}

/* The remote tier's PUTs so far, and its requests that failed, timed out or were skipped while it
 * backed off (any of which may have cost a push). */
static void remote_counts(kvjit_context *ctx, uint64_t *writes, uint64_t *failures) {
  kvjit_stats stats = KVJIT_STATS_INIT;
  *writes = *failures = 0;
  if (ctx == NULL || kvjit_context_stats(ctx, &stats) != KVJIT_OK) return;
  *writes = stats.remote_writes;
  *failures = stats.remote_errors + stats.remote_timeouts + stats.remote_skipped;
}

/* ---- in this process ------------------------------------------------------------------------ */

static void run_here(prewarm_run *run, kvjit_context *ctx, unsigned share, kvjit_prewarm_result *results) {
  double t0 = now_seconds();
  uint64_t writes0, failures0, writes, failures;
  remote_counts(ctx, &writes0, &failures0);
  kvjit_status status =
      kvjit_variants_prewarm(ctx, run->variants->items, run->variants->count, share, run->shares, results);
  remote_counts(ctx, &writes, &failures);
  run->remote_writes += writes - writes0;
  run->remote_failures += failures - failures0;
  prewarm_share_done(run, share, status, status != KVJIT_OK ? kvjit_last_error() : "", results, now_seconds() - t0);
}

/* ---- a worker ------------------------------------------------------------------------------- */

static void worker_main(const prewarm_run *run, int queue, int out) {
  const size_t count = run->variants->count;
  kvjit_prewarm_result *results = calloc(count ? count : 1, sizeof *results);
  if (results == NULL) exit(3);
  kvjit_context *ctx = NULL;
  const int opened = open_context(run->cmd, run->cache, &ctx) == 0;
  uint32_t share;
  while (read_all(queue, &share, sizeof share)) {
    msg m;
    memset(&m, 0, sizeof m);
    m.kind = MSG_STARTED;
    m.share = share;
    if (write_all(out, &m, sizeof m) != 0) break;
    double t0 = now_seconds();
    memset(results, 0, count * sizeof *results);
    kvjit_status status = KVJIT_ERR_IO;
    snprintf(m.detail, sizeof m.detail, "a prewarm worker could not open the cache");
    uint64_t writes0, failures0;
    remote_counts(ctx, &writes0, &failures0);
    if (opened) {
      status = kvjit_variants_prewarm(ctx, run->variants->items, count, share, run->shares, results);
      snprintf(m.detail, sizeof m.detail, "%s", status != KVJIT_OK ? kvjit_last_error() : "");
    }
    remote_counts(ctx, &m.remote_writes, &m.remote_failures);
    m.remote_writes -= writes0;
    m.remote_failures -= failures0;
    m.kind = MSG_DONE;
    m.status = status;
    m.seconds = now_seconds() - t0;
    if (write_all(out, &m, sizeof m) != 0 || write_all(out, results, count * sizeof *results) != 0) break;
  }
  kvjit_context_destroy(ctx);
  free(results);
  /* exit(), not _exit(): what NVRTC cleans up at exit is cleaned up. Nothing is buffered (the
   * parent flushed before the fork; a worker prints only on stderr). */
  exit(0);
}

/* ---- the parent ----------------------------------------------------------------------------- */

static void describe_end(int wstatus, char *out, size_t capacity) {
  if (WIFSIGNALED(wstatus)) snprintf(out, capacity, "signal %d", WTERMSIG(wstatus));
  else if (WIFEXITED(wstatus)) snprintf(out, capacity, "exit %d", WEXITSTATUS(wstatus));
  else snprintf(out, capacity, "status %d", wstatus);
}

/* A message from @p w, or its end: 0 while it lives. */
static int take_message(prewarm_run *run, worker *w, kvjit_prewarm_result *results) {
  msg m;
  if (read_all(w->fd, &m, sizeof m) && m.share < run->shares) {
    if (m.kind == MSG_STARTED) {
      w->running = m.share;
      return 0;
    }
    if (m.kind == MSG_DONE && read_all(w->fd, results, run->variants->count * sizeof *results)) {
      m.detail[sizeof m.detail - 1] = '\0';
      run->remote_writes += m.remote_writes;
      run->remote_failures += m.remote_failures;
      prewarm_share_done(run, m.share, (kvjit_status)m.status, m.detail, results, m.seconds);
      w->running = -1;
      return 0;
    }
  }
  /* End of file, or a message cut short: the worker is gone. */
  close(w->fd);
  w->fd = -1;
  int wstatus = 0;
  while (waitpid(w->pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (w->running >= 0) {
    if (run->lost++ == 0) describe_end(wstatus, run->lost_why, sizeof run->lost_why);
    run->done++;
    w->running = -1;
  }
  return 1;
}

/* The workers' stderr: each distinct line printed once (the first MAX_SEEN kept to compare). */
enum { MAX_SEEN = 64 };
typedef struct err_lines {
  int fd; /* -1 once every worker closed it */
  char buf[4096];
  size_t len;
  char *seen[MAX_SEEN];
  size_t num_seen;
} err_lines;

static void err_line(prewarm_run *run, err_lines *e, const char *line) {
  for (size_t i = 0; i < e->num_seen; i++)
    if (strcmp(e->seen[i], line) == 0) return;
  if (e->num_seen < MAX_SEEN && (e->seen[e->num_seen] = strdup(line)) != NULL) e->num_seen++;
  prewarm_print_line(run, line);
}

/* Prints the whole lines read so far; at end of file (or a line longer than the buffer) the rest. */
static void err_read(prewarm_run *run, err_lines *e) {
  ssize_t got = read(e->fd, e->buf + e->len, sizeof e->buf - 1 - e->len);
  if (got < 0 && errno == EINTR) return;
  if (got > 0) e->len += (size_t)got;
  char *start = e->buf, *newline;
  e->buf[e->len] = '\0';
  while ((newline = memchr(start, '\n', e->len - (size_t)(start - e->buf))) != NULL) {
    *newline = '\0';
    err_line(run, e, start);
    start = newline + 1;
  }
  e->len -= (size_t)(start - e->buf);
  memmove(e->buf, start, e->len);
  if (got <= 0 || e->len == sizeof e->buf - 1) {
    e->buf[e->len] = '\0';
    if (e->len != 0) err_line(run, e, e->buf);
    e->len = 0;
  }
  if (got <= 0) {
    close(e->fd);
    e->fd = -1;
  }
}

static void err_lines_free(err_lines *e) {
  if (e->fd >= 0) close(e->fd);
  for (size_t i = 0; i < e->num_seen; i++) free(e->seen[i]);
}

/* Forks up to @p wanted workers reading @p queue, their stderr into @p err; returns how many started. */
static size_t start_workers(const prewarm_run *run, worker *workers, size_t wanted, const int queue[2],
                            const int err[2]) {
  size_t started = 0;
  fflush(NULL);
  for (; started < wanted; started++) {
    int out[2];
    if (pipe(out) != 0) break;
    pid_t pid = fork();
    if (pid < 0) {
      close(out[0]);
      close(out[1]);
      break;
    }
    if (pid == 0) {
      close(queue[1]);
      close(out[0]);
      close(err[0]);
      dup2(err[1], STDERR_FILENO);
      close(err[1]);
      for (size_t i = 0; i < started; i++) close(workers[i].fd);
      worker_main(run, queue[0], out[1]);
    }
    close(out[1]);
    workers[started] = (worker){pid, out[0], -1};
  }
  return started;
}

/* Variants of a lost share that are not all in the cache fail, naming how their worker ended. */
static void fail_lost(prewarm_run *run, kvjit_context *ctx) {
  for (size_t i = 0; i < run->variants->count; i++) {
    kvjit_prewarm_result *t = &run->totals[i];
    if (t->status != KVJIT_OK) continue;
    unsigned local = 0, remote = 0, missing = 0;
    kvjit_status st = kvjit_variant_locate(ctx, &run->variants->items[i], &local, &remote, &missing);
    if (st == KVJIT_OK && missing == 0) continue;
    t->status = KVJIT_ERR_INTERNAL;
    snprintf(t->error, sizeof t->error, "a prewarm worker died (%s) while building its kernels", run->lost_why);
  }
}

void prewarm_run_shares(prewarm_run *run, kvjit_context *ctx, long jobs) {
  size_t wanted = jobs > 0 && (size_t)jobs < run->shares ? (size_t)jobs : run->shares;
  if (wanted > MAX_WORKERS) wanted = MAX_WORKERS;
  kvjit_prewarm_result *results = calloc(run->variants->count ? run->variants->count : 1, sizeof *results);
  if (results == NULL) {
    for (unsigned share = 0; share < run->shares; share++) {
      prewarm_share_done(run, share, KVJIT_ERR_OUT_OF_MEMORY, "out of memory", NULL, 0);
    }
    return;
  }
  int queue[2] = {-1, -1}, err[2] = {-1, -1};
  err_lines errs = {.fd = -1};
  worker workers[MAX_WORKERS];
  size_t started = 0;
  struct sigaction ignore, saved;
  memset(&ignore, 0, sizeof ignore);
  ignore.sa_handler = SIG_IGN;
  /* A worker that dies must not take the parent with it on a write. */
  sigaction(SIGPIPE, &ignore, &saved);
  /* One worker too when the bar is drawn: the parent ticks it while the worker compiles. */
  if ((wanted > 1 || run->progress_bar) && pipe(queue) == 0 && pipe(err) == 0) {
    started = start_workers(run, workers, wanted, queue, err);
    close(err[1]);
    errs.fd = err[0];
  }
  uint32_t next = 0;
  if (started > 0) {
    /* The write end is the parent's alone; the read end stays blocking while workers share it. */
    fcntl(queue[1], F_SETFL, fcntl(queue[1], F_GETFL) | O_NONBLOCK);
    size_t alive = started;
    struct pollfd fds[MAX_WORKERS + 1];
    worker *who[MAX_WORKERS]; /* fds[f]'s worker */
    while (alive > 0) {
      nfds_t n = 0;
      for (size_t i = 0; i < started; i++) {
        if (workers[i].fd < 0) continue;
        who[n] = &workers[i];
        fds[n++] = (struct pollfd){workers[i].fd, POLLIN, 0};
      }
      const nfds_t readers = n;
      const nfds_t err_at = n;
      if (errs.fd >= 0) fds[n++] = (struct pollfd){errs.fd, POLLIN, 0};
      const int feeding = queue[1] >= 0;
      if (feeding) fds[n++] = (struct pollfd){queue[1], POLLOUT, 0};
      int ready = poll(fds, n, run->progress_bar ? 250 : -1);
      prewarm_progress(run, false);
      if (ready < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (errs.fd >= 0 && fds[err_at].revents != 0) err_read(run, &errs);
      if (feeding && fds[n - 1].revents != 0) {
        while (next < run->shares && write(queue[1], &next, sizeof next) == (ssize_t)sizeof next) next++;
        if (next == run->shares) {
          /* Every share queued: end of file tells the workers to finish. */
          close(queue[1]);
          queue[1] = -1;
        }
      }
      for (nfds_t f = 0; f < readers; f++) {
        if ((fds[f].revents & (POLLIN | POLLERR | POLLHUP)) && take_message(run, who[f], results)) alive--;
      }
    }
    while (errs.fd >= 0) err_read(run, &errs); /* what the workers printed last */
    /* Queued, never taken (every worker gone): here, as are the ones never queued. The parent
     * kept the queue's read end for this; no worker reads it any more. */
    fcntl(queue[0], F_SETFL, fcntl(queue[0], F_GETFL) | O_NONBLOCK);
    uint32_t share;
    while (read(queue[0], &share, sizeof share) == (ssize_t)sizeof share) {
      if (share < run->shares) run_here(run, ctx, share, results);
    }
  }
  err_lines_free(&errs);
  if (queue[0] >= 0) close(queue[0]);
  if (queue[1] >= 0) close(queue[1]);
  sigaction(SIGPIPE, &saved, NULL);
  for (; next < run->shares; next++) run_here(run, ctx, next, results);
  free(results);
  if (run->lost != 0) fail_lost(run, ctx);
}
