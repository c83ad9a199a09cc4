/* The redaction of secrets in URLs (url.h). */
#include "url.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct sink {
  char *out;
  size_t capacity, len;
} sink;

static void put(sink *s, const char *p, size_t n) {
  for (size_t i = 0; i < n && s->len + 1 < s->capacity; i++) s->out[s->len++] = p[i];
  if (s->capacity) s->out[s->len] = '\0';
}

/* A query parameter whose name says it carries a secret (case-insensitive substring). */
static int secret_name(const char *name, size_t len) {
  static const char *const marks[] = {"token", "sig", "key", "secret", "passw", "pwd", "credential", "auth"};
  for (size_t m = 0; m < sizeof marks / sizeof marks[0]; m++) {
    size_t ml = strlen(marks[m]);
    for (size_t i = 0; i + ml <= len; i++) {
      if (strncasecmp(name + i, marks[m], ml) == 0) return 1;
    }
  }
  return 0;
}

/* One item [p, p + len). */
static void redact_one(sink *s, const char *p, size_t len) {
  const char *end = p + len;
  const char *scheme = NULL;
  for (const char *q = p; q + 3 <= end; q++) {
    if (q[0] == ':' && q[1] == '/' && q[2] == '/') {
      scheme = q + 3;
      break;
    }
    if (!isalnum((unsigned char)*q) && *q != '+' && *q != '-' && *q != '.') break;
  }
  const char *at = p;
  if (scheme != NULL) {
    put(s, p, (size_t)(scheme - p));
    /* The authority ends at the first '/', '?' or '#'; its last '@' ends the userinfo. */
    const char *auth_end = scheme;
    while (auth_end < end && *auth_end != '/' && *auth_end != '?' && *auth_end != '#') auth_end++;
    const char *user_end = NULL;
    for (const char *q = scheme; q < auth_end; q++)
      if (*q == '@') user_end = q;
    if (user_end != NULL) {
      put(s, "***", 3);
      at = user_end;
    } else {
      at = scheme;
    }
  }
  const char *query = memchr(at, '?', (size_t)(end - at));
  if (query == NULL) {
    put(s, at, (size_t)(end - at));
    return;
  }
  put(s, at, (size_t)(query + 1 - at));
  const char *fragment = memchr(query, '#', (size_t)(end - query));
  const char *qend = fragment ? fragment : end;
  for (const char *q = query + 1; q < qend;) {
    const char *pe = q;
    while (pe < qend && *pe != '&' && *pe != ';') pe++;
    const char *eq = memchr(q, '=', (size_t)(pe - q));
    if (eq != NULL && secret_name(q, (size_t)(eq - q))) {
      put(s, q, (size_t)(eq + 1 - q));
      put(s, "***", 3);
    } else {
      put(s, q, (size_t)(pe - q));
    }
    if (pe < qend) put(s, pe, 1);
    q = pe + 1;
  }
  if (fragment) put(s, fragment, (size_t)(end - fragment));
}

void kvjit_url_redact(char *out, size_t capacity, const char *text) {
  sink s = {out, capacity, 0};
  if (capacity) out[0] = '\0';
  if (text == NULL) return;
  for (const char *p = text; *p;) {
    size_t sep = strspn(p, " ,\t");
    put(&s, p, sep);
    p += sep;
    size_t len = strcspn(p, " ,\t");
    if (len) redact_one(&s, p, len);
    p += len;
  }
}

char *kvjit_url_redact_dup(const char *text) {
  size_t capacity = (text ? strlen(text) : 0) + 1;
  /* A redaction turns at least one byte ('@' or '=') into at most four: room for every one. */
  capacity = capacity * 4 + 8;
  char *out = malloc(capacity);
  if (out) kvjit_url_redact(out, capacity, text);
  return out;
}
