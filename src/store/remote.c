/* The remote cache tier over HTTP with libcurl (see remote.h for what it promises). */
#include "remote.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "entry.h"
#include "status.h"
#include "url.h"

#define MAX_REMOTES 8
#define MAX_URL 2048

typedef struct remote_server {
  char *base;      /* without a trailing slash */
  char *shown;     /* base as logs show it: redacted (url.h) */
  int read_write;
  /* Monotonic ms before which the server is skipped (all requests), or only for writes. */
  atomic_uint_fast64_t skip_until, skip_writes_until;
} remote_server;

struct kvjit_remote {
  remote_server servers[MAX_REMOTES];
  size_t count;
  char *urls; /* as configured, redacted (url.h), for info */
  struct curl_slist *headers;
  long connect_timeout_ms, timeout_ms;
  uint64_t backoff_ms;
  int log;
  kvjit_remote_counters counters;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result = CURLE_FAILED_INIT;

static void curl_init(void) { curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT); }

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

__attribute__((format(printf, 2, 3))) static void warn(const kvjit_remote *r, const char *fmt, ...) {
  if (r->log == 0) return;
  char line[MAX_URL + 200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  kvjit_log_line("warning: remote cache: %s", line);
}

/* Add one "URL[|ro|rw]" item; malformed items are skipped with a warning. */
static kvjit_status add_server(kvjit_remote *r, const char *item, size_t len, int default_rw) {
  char text[MAX_URL];
  if (len >= sizeof text) {
    warn(r, "a URL longer than %zu bytes skipped", sizeof text - 1);
    return KVJIT_OK;
  }
  memcpy(text, item, len);
  text[len] = '\0';
  char shown[MAX_URL * 4 + 8]; /* what warnings print: never a password (url.h) */
  kvjit_url_redact(shown, sizeof shown, text);
  int rw = default_rw;
  char *bar = strchr(text, '|');
  if (bar != NULL) {
    *bar = '\0';
    kvjit_url_redact(shown, sizeof shown, text);
    if (strcmp(bar + 1, "ro") == 0) rw = 0;
    else if (strcmp(bar + 1, "rw") == 0) rw = 1;
    else {
      warn(r, "%s: unknown attribute \"%.32s\" (expected |ro or |rw); skipped", shown, bar + 1);
      return KVJIT_OK;
    }
  }
  if (strncmp(text, "http://", 7) != 0 && strncmp(text, "https://", 8) != 0) {
    warn(r, "%s: not an http:// or https:// URL; skipped", shown);
    return KVJIT_OK;
  }
  if (r->count == MAX_REMOTES) {
    warn(r, "more than %d URLs; the rest are skipped", MAX_REMOTES);
    return KVJIT_OK;
  }
  size_t n = strlen(text);
  while (n > 0 && text[n - 1] == '/') text[--n] = '\0';
  remote_server *s = &r->servers[r->count];
  s->base = strdup(text);
  s->shown = kvjit_url_redact_dup(text);
  if (s->base == NULL || s->shown == NULL) {
    free(s->base);
    free(s->shown);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "remote cache: out of memory");
  }
  s->read_write = rw;
  atomic_init(&s->skip_until, 0);
  atomic_init(&s->skip_writes_until, 0);
  r->count++;
  return KVJIT_OK;
}

kvjit_status kvjit_remote_open(kvjit_remote **out, const kvjit_remote_config *config) {
  *out = NULL;
  if (config->urls == NULL || config->urls[strspn(config->urls, " ,\t")] == '\0') return KVJIT_OK;
  pthread_once(&curl_once, curl_init);
  if (curl_init_result != CURLE_OK) {
    return kvjit_fail(KVJIT_ERR_UNSUPPORTED, "remote cache: curl_global_init failed: %s",
                      curl_easy_strerror(curl_init_result));
  }
  kvjit_remote *r = calloc(1, sizeof *r);
  if (r == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "remote cache: out of memory");
  r->log = config->log;
  /* libcurl reads 0 as "no timeout": never let one through (config.c refuses 0 already). */
  r->connect_timeout_ms = config->connect_timeout_ms ? (long)config->connect_timeout_ms : 1;
  r->timeout_ms = config->timeout_ms ? (long)config->timeout_ms : 1;
  r->backoff_ms = config->backoff_ms;
  kvjit_status st = KVJIT_OK;
  r->urls = kvjit_url_redact_dup(config->urls);
  if (r->urls == NULL) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "remote cache: out of memory");
  for (const char *p = config->urls; st == KVJIT_OK && *p;) {
    p += strspn(p, " ,\t");
    size_t len = strcspn(p, " ,\t");
    if (len > 0) st = add_server(r, p, len, config->read_write);
    p += len;
  }
  if (st == KVJIT_OK && config->header != NULL && config->header[0] != '\0') {
    r->headers = curl_slist_append(NULL, config->header);
    if (r->headers == NULL) st = kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "remote cache: out of memory");
  }
  if (st != KVJIT_OK || r->count == 0) {
    kvjit_remote_close(r);
    return st;
  }
  *out = r;
  return KVJIT_OK;
}

void kvjit_remote_close(kvjit_remote *r) {
  if (r == NULL) return;
  for (size_t i = 0; i < r->count; i++) {
    free(r->servers[i].base);
    free(r->servers[i].shown);
  }
  curl_slist_free_all(r->headers);
  free(r->urls);
  free(r);
}

int kvjit_remote_writable(const kvjit_remote *r) {
  if (r == NULL) return 0;
  for (size_t i = 0; i < r->count; i++) {
    if (r->servers[i].read_write) return 1;
  }
  return 0;
}

const kvjit_remote_counters *kvjit_remote_get_counters(const kvjit_remote *r) { return &r->counters; }

const char *kvjit_remote_urls(const kvjit_remote *r) { return r && r->urls ? r->urls : ""; }

/* ---- one request ------------------------------------------------------------------------------ */

typedef struct body {
  uint8_t *data;
  size_t len, cap;
  int too_large;
  size_t limit;   /* a ranged GET: keep at most this many bytes, then stop (cut) */
  int cut;
  uint64_t total; /* the whole file's size from Content-Range, 0 when not said */
} body;

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *user) {
  body *b = user;
  size_t n = size * nmemb;
  if (b->limit && b->len + n > b->limit) {
    /* A server that ignores Range sends the whole file: the head is all that is wanted. */
    n = b->limit - b->len;
    b->cut = 1;
  }
  if (b->len + n > KVJIT_ENTRY_MAX_BYTES) {
    b->too_large = 1;
    return 0; /* aborts the transfer: no entry is that large */
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64 * 1024;
    while (cap < b->len + n) cap *= 2;
    uint8_t *grown = realloc(b->data, cap);
    if (grown == NULL) return 0;
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, ptr, n);
  b->len += n;
  return b->cut ? 0 : n;
}

/* "Content-Range: bytes 0-N/TOTAL": the whole file's size, for the entry's own size checks. */
static size_t on_header(char *line, size_t size, size_t nmemb, void *user) {
  body *b = user;
  size_t n = size * nmemb;
  static const char name[] = "content-range:";
  if (n > sizeof name && strncasecmp(line, name, sizeof name - 1) == 0) {
    const char *slash = memchr(line, '/', n);
    uint64_t total = 0;
    for (const char *p = slash ? slash + 1 : line + n; p < line + n && *p >= '0' && *p <= '9'; p++) {
      if (total > (UINT64_MAX - 9) / 10) break;
      total = total * 10 + (uint64_t)(*p - '0');
    }
    b->total = total;
  }
  return n;
}

typedef struct upload {
  const uint8_t *data;
  size_t len, sent;
} upload;

static size_t on_read(char *ptr, size_t size, size_t nmemb, void *user) {
  upload *u = user;
  size_t n = size * nmemb;
  if (n > u->len - u->sent) n = u->len - u->sent;
  memcpy(ptr, u->data + u->sent, n);
  u->sent += n;
  return n;
}

typedef enum request { REQ_GET, REQ_RANGE, REQ_PUT } request;

/* What became of a request, for counting and backing off. */
typedef enum outcome {
  OUT_OK,        /* 2xx */
  OUT_ABSENT,    /* 404 / 410 */
  OUT_REFUSED,   /* 401 / 403 / 429 */
  OUT_FAILED,    /* 5xx, other statuses, connection errors, truncated or oversized bodies */
  OUT_TIMED_OUT
} outcome;

/* What a request is about: an entry, `<url>/v2/<key>.kvjit`, or a per-kernel hint,
 * `<url>/v2/index/<id>` (the key last published for a program and kernel list). */
typedef enum object { OBJ_ENTRY, OBJ_HINT } object;

static outcome perform(kvjit_remote *r, remote_server *s, request kind, object what, const kvjit_key *key, body *in,
                       upload *up, long *status) {
  char hex[33], url[MAX_URL + 64];
  kvjit_key_hex(key, hex);
  snprintf(url, sizeof url, what == OBJ_HINT ? "%s/v%u/index/%s" : "%s/v%u/%s.kvjit", s->base,
           KVJIT_CACHE_FORMAT_VERSION, hex);
  *status = 0;
  CURL *h = curl_easy_init();
  if (h == NULL) return OUT_FAILED;
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM for timeouts: other threads run */
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r->connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, r->timeout_ms);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  if (r->headers) curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->headers);
  if (kind == REQ_GET || kind == REQ_RANGE) {
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, in);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)KVJIT_ENTRY_MAX_BYTES);
  }
  char range[32];
  if (kind == REQ_RANGE) {
    snprintf(range, sizeof range, "0-%zu", in->limit - 1);
    curl_easy_setopt(h, CURLOPT_RANGE, range);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, in);
  } else if (kind == REQ_PUT) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, up);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)up->len);
  }
  CURLcode res = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
  curl_easy_cleanup(h);
  if (res == CURLE_OPERATION_TIMEDOUT) return OUT_TIMED_OUT;
  if (res == CURLE_FILESIZE_EXCEEDED || (in && in->too_large)) return OUT_FAILED;
  if (res == CURLE_WRITE_ERROR && in && in->cut && *status >= 200 && *status < 300) return OUT_OK;
  if (res != CURLE_OK) {
    /* A 404 with a body the write callback refused still counts as absent. */
    return *status == 404 || *status == 410 ? OUT_ABSENT : OUT_FAILED;
  }
  if (*status >= 200 && *status < 300) return OUT_OK;
  if (*status == 404 || *status == 410) return OUT_ABSENT;
  if (*status == 401 || *status == 403 || *status == 429) return OUT_REFUSED;
  return OUT_FAILED;
}

/* Count a bad outcome and start the server's back-off (@p writes_only: only its writes). */
static void back_off(kvjit_remote *r, remote_server *s, outcome o, long status, int writes_only) {
  atomic_fetch_add(o == OUT_TIMED_OUT ? &r->counters.timeouts : &r->counters.errors, 1);
  uint64_t until = mono_ms() + r->backoff_ms;
  atomic_uint_fast64_t *slot = writes_only ? &s->skip_writes_until : &s->skip_until;
  uint64_t before = atomic_exchange(slot, until);
  if (before <= mono_ms()) { /* one line per back-off, not per request */
    if (o == OUT_TIMED_OUT)
      warn(r, "%s: timed out; skipping it for %llu ms", s->shown, (unsigned long long)r->backoff_ms);
    else if (writes_only)
      warn(r, "%s: writes refused (HTTP %ld); reading only for a while", s->shown, status);
    else
      warn(r, "%s: %s; skipping it for %llu ms", s->shown, status ? "error answer" : "no connection",
           (unsigned long long)r->backoff_ms);
  }
}

static int skipping(kvjit_remote *r, remote_server *s, int write) {
  uint64_t now = mono_ms();
  if (atomic_load(&s->skip_until) > now || (write && atomic_load(&s->skip_writes_until) > now)) {
    atomic_fetch_add(&r->counters.skipped, 1);
    return 1;
  }
  return 0;
}

int kvjit_remote_get(kvjit_remote *r, const kvjit_key *key, uint8_t **data, size_t *len, size_t *from) {
  if (r == NULL) return 0;
  for (size_t i = 0; i < r->count; i++) {
    remote_server *s = &r->servers[i];
    if (skipping(r, s, 0)) continue;
    body b = {NULL, 0, 0, 0, 0, 0, 0};
    long status = 0;
    outcome o = perform(r, s, REQ_GET, OBJ_ENTRY, key, &b, NULL, &status);
    if (o == OUT_OK && b.len > 0) {
      atomic_fetch_add(&r->counters.bytes_in, b.len);
      *data = b.data;
      *len = b.len;
      *from = i;
      return 1;
    }
    free(b.data);
    if (o == OUT_ABSENT || (o == OUT_OK && b.len == 0)) {
      atomic_fetch_add(&r->counters.misses, 1);
    } else {
      back_off(r, s, o, status, 0);
    }
  }
  return 0;
}

void kvjit_remote_accept(kvjit_remote *r, size_t from) {
  (void)from;
  atomic_fetch_add(&r->counters.hits, 1);
}

void kvjit_remote_reject(kvjit_remote *r, size_t from, const char *why) {
  atomic_fetch_add(&r->counters.errors, 1);
  if (from < r->count) warn(r, "%s sent a bad entry, not used (%s)", r->servers[from].shown, why ? why : "");
}

int kvjit_remote_head(kvjit_remote *r, const kvjit_key *key, size_t max_bytes, uint8_t **data, size_t *len,
                      uint64_t *total) {
  if (r == NULL) return -1;
  int answered = 0;
  for (size_t i = 0; i < r->count; i++) {
    remote_server *s = &r->servers[i];
    if (skipping(r, s, 0)) continue;
    body b = {NULL, 0, 0, 0, max_bytes ? max_bytes : 1, 0, 0};
    long status = 0;
    outcome o = perform(r, s, REQ_RANGE, OBJ_ENTRY, key, &b, NULL, &status);
    /* 206: the range; 200: a server that ignores Range (its whole body, or the head of it). */
    if (o == OUT_OK && b.len > 0 && (status == 206 || status == 200)) {
      *data = b.data;
      *len = b.len;
      *total = status == 206 ? b.total : b.cut ? 0 : b.len;
      return 1;
    }
    free(b.data);
    if (o == OUT_ABSENT || (o == OUT_OK && b.len == 0)) {
      answered = 1;
      continue;
    }
    back_off(r, s, o, status, 0);
  }
  return answered ? 0 : -1;
}

/* A hint is one line, "<32 hex>\n": anything else is not one (and is not counted as an entry). */
#define HINT_BYTES 33u

/* PUT the hint of @p id naming @p key to server @p s (just after its entry went up there). */
static void put_hint(kvjit_remote *r, remote_server *s, const kvjit_key *id, const kvjit_key *key) {
  uint8_t line[HINT_BYTES + 1];
  kvjit_key_hex(key, (char *)line);
  line[32] = '\n';
  upload up = {line, HINT_BYTES, 0};
  long status = 0;
  outcome o = perform(r, s, REQ_PUT, OBJ_HINT, id, NULL, &up, &status);
  if (o != OUT_OK) back_off(r, s, o, status, o == OUT_REFUSED || o == OUT_ABSENT);
}

void kvjit_remote_put_indexed(kvjit_remote *r, const kvjit_key *key, const uint8_t *data, size_t len,
                              const kvjit_key *hint_id) {
  if (r == NULL) return;
  for (size_t i = 0; i < r->count; i++) {
    remote_server *s = &r->servers[i];
    if (!s->read_write || skipping(r, s, 1)) continue;
    upload up = {data, len, 0};
    long status = 0;
    outcome o = perform(r, s, REQ_PUT, OBJ_ENTRY, key, NULL, &up, &status);
    if (o == OUT_OK) {
      atomic_fetch_add(&r->counters.writes, 1);
      atomic_fetch_add(&r->counters.bytes_out, len);
      if (hint_id) put_hint(r, s, hint_id, key);
    } else {
      /* Refused writes (quota, read-only tokens) back off writes only: reads may still hit. */
      back_off(r, s, o, status, o == OUT_REFUSED || o == OUT_ABSENT);
    }
  }
}

void kvjit_remote_put(kvjit_remote *r, const kvjit_key *key, const uint8_t *data, size_t len) {
  kvjit_remote_put_indexed(r, key, data, len, NULL);
}

int kvjit_remote_get_hint(kvjit_remote *r, const kvjit_key *id, kvjit_key *out) {
  if (r == NULL) return 0;
  for (size_t i = 0; i < r->count; i++) {
    remote_server *s = &r->servers[i];
    if (skipping(r, s, 0)) continue;
    body b = {NULL, 0, 0, 0, 0, 0, 0};
    long status = 0;
    outcome o = perform(r, s, REQ_GET, OBJ_HINT, id, &b, NULL, &status);
    char hex[HINT_BYTES];
    int got = o == OUT_OK && b.len == HINT_BYTES && b.data[32] == '\n';
    if (got) {
      memcpy(hex, b.data, 32);
      hex[32] = '\0';
      got = kvjit_key_parse_hex(out, hex) == 0;
    }
    free(b.data);
    if (got) return 1;
    if (o != OUT_OK && o != OUT_ABSENT) back_off(r, s, o, status, 0);
  }
  return 0;
}
