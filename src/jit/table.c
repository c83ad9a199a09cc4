/* The program table of a context (table.h): find, insert, finish a slot, retire a passing failure. */
#include "table.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

kvjit_program *kvjit_table_find(kvjit_context *ctx, const kvjit_key *key) {
  for (kvjit_program *p = ctx->buckets[key->low % PROGRAM_BUCKETS]; p; p = p->next) {
    if (kvjit_key_equal(&p->key, key)) return p;
  }
  return NULL;
}

void kvjit_table_insert(kvjit_context *ctx, kvjit_program *p) {
  p->next = ctx->buckets[p->key.low % PROGRAM_BUCKETS];
  ctx->buckets[p->key.low % PROGRAM_BUCKETS] = p;
}

/* Under ctx->lock: move a program whose failure is not remembered out of the table. */
static void table_retire(kvjit_context *ctx, kvjit_program *p) {
  for (kvjit_program **at = &ctx->buckets[p->key.low % PROGRAM_BUCKETS]; *at; at = &(*at)->next) {
    if (*at == p) {
      *at = p->next;
      p->next = ctx->retired;
      ctx->retired = p;
      return;
    }
  }
}

int kvjit_table_failure_is_lasting(kvjit_status st) {
  return st == KVJIT_ERR_COMPILE || st == KVJIT_ERR_NVRTC || st == KVJIT_ERR_NO_NVRTC || st == KVJIT_ERR_UNSUPPORTED ||
         st == KVJIT_ERR_INVALID_ARGUMENT;
}

void kvjit_table_finish(kvjit_context *ctx, kvjit_program *p, kvjit_status st, int transient) {
  pthread_mutex_lock(&ctx->lock);
  if (st == KVJIT_OK) {
    p->state = PROGRAM_READY;
  } else {
    p->status = st;
    p->error = strdup(kvjit_last_error());
    p->state = PROGRAM_FAILED;
    /* Remembered: the same program is not rebuilt on every call, unless the failure may pass. */
    if (transient || !kvjit_table_failure_is_lasting(st)) {
      p->transient = 1;
      table_retire(ctx, p);
    }
  }
  pthread_cond_broadcast(&ctx->built);
  pthread_mutex_unlock(&ctx->lock);
}

int kvjit_table_has(kvjit_context *ctx, const kvjit_key *key) {
  pthread_mutex_lock(&ctx->lock);
  int found = kvjit_table_find(ctx, key) != NULL;
  pthread_mutex_unlock(&ctx->lock);
  return found;
}
