/* Misses that explain themselves (miss.h): the nearest entry of the same program and kernels. */
#include "cache_index.h"
#include "cache_remote.h"
#include "miss.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "target.h"

const char *kvjit_miss_cause_name(kvjit_miss_cause cause) {
  static const char *const names[KVJIT_MISS_CAUSES] = {"none",    "cold",    "nvrtc",  "target",
                                                       "toolkit", "options", "source", "other"};
  return (unsigned)cause < KVJIT_MISS_CAUSES ? names[cause] : NULL;
}

/* The key inputs in which an entry differs from the query, one bit per cause. */
#define DIFF(cause) (1u << (cause))

static int known(const kvjit_key *k) { return k->high != 0 || k->low != 0; }

static unsigned differences(const kvjit_miss_query *q, const kvjit_entry_view *v) {
  unsigned d = 0;
  if (v->target.nvrtc_major != q->target.nvrtc_major || v->target.nvrtc_minor != q->target.nvrtc_minor) {
    d |= DIFF(KVJIT_MISS_NVRTC);
  }
  kvjit_payload_kind kind = v->target.kind == KVJIT_PAYLOAD_ALIAS ? KVJIT_PAYLOAD_CUBIN : v->target.kind;
  if (v->target.arch != q->target.arch || v->target.suffix != q->target.suffix || kind != q->target.kind) {
    d |= DIFF(KVJIT_MISS_TARGET);
  }
  if (kvjit_key_equal(&v->content, &q->content)) return d;
  if (v->version < 3) return d | DIFF(KVJIT_MISS_OTHER); /* no digests: which of the three is unknown */
  const kvjit_key *theirs = &v->digests.toolkit, *ours = &q->digests.toolkit;
  if (known(theirs) && known(ours) && !kvjit_key_equal(theirs, ours)) {
    d |= DIFF(KVJIT_MISS_TOOLKIT);
  }
  if (!kvjit_key_equal(&v->digests.options, &q->digests.options)) d |= DIFF(KVJIT_MISS_OPTIONS);
  if (!kvjit_key_equal(&v->digests.sources, &q->digests.sources)) d |= DIFF(KVJIT_MISS_SOURCE);
  /* Content differs but no recorded digest does (the program name, or a digest this kvjit does not
   * record): say so rather than nothing. */
  const unsigned named = DIFF(KVJIT_MISS_TOOLKIT) | DIFF(KVJIT_MISS_OPTIONS) | DIFF(KVJIT_MISS_SOURCE);
  if ((d & named) == 0) d |= DIFF(KVJIT_MISS_OTHER);
  return d;
}

/* The cause a message leads with: the one a user fixes first. */
static kvjit_miss_cause primary(unsigned d) {
  static const kvjit_miss_cause order[] = {KVJIT_MISS_NVRTC, KVJIT_MISS_TARGET, KVJIT_MISS_TOOLKIT,
                                           KVJIT_MISS_OPTIONS, KVJIT_MISS_SOURCE, KVJIT_MISS_OTHER};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
    if (d & DIFF(order[i])) return order[i];
  }
  return KVJIT_MISS_OTHER;
}

static void target_text(const kvjit_key_target *t, char *out, size_t cap) {
  kvjit_key_target keyed = *t;
  if (keyed.kind == KVJIT_PAYLOAD_ALIAS) keyed.kind = KVJIT_PAYLOAD_CUBIN;
  if (kvjit_target_name(kvjit_target_code(&keyed), out, cap) != KVJIT_OK) snprintf(out, cap, "arch %d", t->arch);
}

/* The sentence for cause @p c of entry @p v (after "WHAT: "). */
static void reason(const kvjit_miss_query *q, const kvjit_entry_view *v, kvjit_miss_cause c, const char *where,
                   char *out, size_t cap) {
  char theirs[32], ours[32];
  switch (c) {
  case KVJIT_MISS_NVRTC:
    snprintf(out, cap, "cached%s for NVRTC %d.%d, this process uses %d.%d (%s): set KVJIT_NVRTC to an NVRTC %d.%d, "
             "or prewarm with this one (kvjit prewarm --nvrtc PATH)", where, v->target.nvrtc_major,
             v->target.nvrtc_minor,
             q->target.nvrtc_major, q->target.nvrtc_minor,
             q->nvrtc_path ? q->nvrtc_path : "no NVRTC loaded: the version kvjit was built for", v->target.nvrtc_major,
             v->target.nvrtc_minor);
    break;
  case KVJIT_MISS_TARGET:
    target_text(&v->target, theirs, sizeof theirs);
    target_text(&q->target, ours, sizeof ours);
    snprintf(out, cap, "cached%s for %s, this lookup is for %s: prewarm --arch %s", where, theirs, ours, ours);
    break;
  case KVJIT_MISS_TOOLKIT:
    snprintf(out, cap, "cached%s with other toolkit headers than those beside this process's NVRTC (%s): prewarm "
             "with the same NVRTC and toolkit", where, q->nvrtc_path ? q->nvrtc_path : "none loaded");
    break;
  case KVJIT_MISS_OPTIONS:
    snprintf(out, cap, "cached%s with other compile options: prewarm with the kvjit version and options this process "
             "uses", where);
    break;
  case KVJIT_MISS_SOURCE:
    snprintf(out, cap, "cached%s from other source or header contents (another kvjit version, or an edited kernel or "
             "header): prewarm with this one", where);
    break;
  default:
    if (kvjit_key_equal(&v->key, &q->key)) {
      snprintf(out, cap, "an entry is there%s but cannot be used (an alias whose bundle is gone or a bad entry: "
               "kvjit cache verify says which): prewarm again", where);
    } else if (v->version < 3) {
      snprintf(out, cap, "cached%s with other options, source or toolkit headers (an entry from before kvjit "
               "recorded which): prewarm with this kvjit", where);
    } else {
      snprintf(out, cap, "cached%s with another program content: prewarm with this kvjit", where);
    }
    break;
  }
}

/* The nearest entry so far: fewest differing inputs, then the newest. Only its header is kept. */
typedef struct nearest {
  uint8_t *data;
  kvjit_entry_view view;
  unsigned diff;
  int count;
} nearest;

/* Weigh the header @p data / @p v (taken over or freed). */
static void consider(const kvjit_miss_query *q, nearest *best, uint8_t *data, const kvjit_entry_view *v) {
  unsigned d = kvjit_key_equal(&v->key, &q->key) ? DIFF(KVJIT_MISS_OTHER) : differences(q, v);
  int count = __builtin_popcount(d);
  if (best->data == NULL || count < best->count || (count == best->count && v->created > best->view.created)) {
    free(best->data);
    *best = (nearest){data, *v, d, count};
  } else {
    free(data);
  }
}

void kvjit_miss_explain(kvjit_cache *cache, const kvjit_miss_query *q, kvjit_miss_info *out) {
  memset(out, 0, sizeof *out);
  kvjit_key_hex(&q->key, out->key);
  kvjit_key id;
  kvjit_cache_index_id_of(q->program, q->num_kernels, q->kernels, &id);
  kvjit_key keys[KVJIT_MISS_CANDIDATES];
  size_t n = kvjit_cache_index_keys(cache, &id, keys, KVJIT_MISS_CANDIDATES);
  nearest best;
  memset(&best, 0, sizeof best);
  for (size_t i = 0; i < n; i++) {
    uint8_t *data = NULL;
    kvjit_entry_view v;
    if (kvjit_cache_read_header(cache, &keys[i], &data, &v) == KVJIT_OK) consider(q, &best, data, &v);
  }
  /* Nothing locally: the remote tier's hint (one GET, and one of the entry it names). */
  const char *where = "";
  if (best.data == NULL) {
    uint8_t *data = NULL;
    kvjit_entry_view v;
    if (kvjit_cache_remote_nearest(cache, &id, &data, &v) == KVJIT_OK) {
      consider(q, &best, data, &v);
      where = " on the remote";
    }
  }
  char why[600];
  if (best.data == NULL) {
    out->cause = KVJIT_MISS_COLD;
    snprintf(why, sizeof why, "never cached: no entry of this program and kernels in the cache dirs%s: prewarm it",
             kvjit_cache_remote_urls(cache)[0] ? " or on the remote" : "");
  } else {
    out->cause = primary(best.diff);
    reason(q, &best.view, out->cause, where, why, sizeof why);
    unsigned rest = best.diff & ~DIFF(out->cause);
    if (rest) {
      size_t used = strlen(why);
      used += (size_t)snprintf(why + used, sizeof why - used, " (also differs:");
      for (int c = KVJIT_MISS_NVRTC; c < KVJIT_MISS_CAUSES && used < sizeof why; c++) {
        if (rest & DIFF(c)) {
          used += (size_t)snprintf(why + used, sizeof why - used, " %s", kvjit_miss_cause_name((kvjit_miss_cause)c));
        }
      }
      if (used < sizeof why) snprintf(why + used, sizeof why - used, ")");
    }
    free(best.data);
  }
  snprintf(out->message, sizeof out->message, "%s: %s", q->what, why);
}

/* ---- the context's log ----------------------------------------------------------------------- */

struct kvjit_miss_log {
  pthread_mutex_t lock;
  kvjit_miss_info items[KVJIT_MISSES_KEPT];
  size_t count;
  uint64_t counts[KVJIT_MISS_CAUSES];
};

kvjit_status kvjit_miss_log_create(kvjit_miss_log **out) {
  kvjit_miss_log *log = calloc(1, sizeof *log);
  if (log == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "miss log: out of memory");
  pthread_mutex_init(&log->lock, NULL);
  *out = log;
  return KVJIT_OK;
}

void kvjit_miss_log_destroy(kvjit_miss_log *log) {
  if (log == NULL) return;
  pthread_mutex_destroy(&log->lock);
  free(log);
}

int kvjit_miss_log_add(kvjit_miss_log *log, const kvjit_miss_info *info) {
  pthread_mutex_lock(&log->lock);
  int seen = 0;
  for (size_t i = 0; i < log->count && !seen; i++) seen = strcmp(log->items[i].key, info->key) == 0;
  if (!seen) {
    if (log->count < KVJIT_MISSES_KEPT) log->items[log->count++] = *info;
    if ((unsigned)info->cause < KVJIT_MISS_CAUSES) log->counts[info->cause]++;
  }
  pthread_mutex_unlock(&log->lock);
  return !seen;
}

void kvjit_miss_log_counts(const kvjit_miss_log *log, uint64_t *counts) {
  pthread_mutex_t *lock = (pthread_mutex_t *)(uintptr_t)&log->lock;
  pthread_mutex_lock(lock);
  memcpy(counts, log->counts, sizeof log->counts);
  pthread_mutex_unlock(lock);
}

kvjit_status kvjit_miss_log_copy(const kvjit_miss_log *log, kvjit_miss_info *out, size_t capacity, size_t *count) {
  if (count == NULL || (out == NULL && capacity > 0)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count is NULL or out is NULL with capacity %zu", capacity);
  }
  pthread_mutex_t *lock = (pthread_mutex_t *)(uintptr_t)&log->lock;
  pthread_mutex_lock(lock);
  for (size_t i = 0; i < capacity && i < log->count; i++) out[i] = log->items[i];
  *count = log->count;
  pthread_mutex_unlock(lock);
  return KVJIT_OK;
}
