/* Canonical name expressions (names.h). */
#include "names.h"

#include <stdlib.h>
#include <string.h>

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         (unsigned char)c >= 0x80;
}

/* Would "a" followed by "b" lex differently without the space between them? */
static int needs_space(char a, char b) {
  if (is_word(a) && is_word(b)) return 1;
  if (a == '>' && b == '>') return 0; /* two template closers either way */
  static const char *const pairs[] = {"++", "--", "<<", "&&", "||", "::", "->", "==", "<=", ">=", "!=", "+=", "-=",
                                      "*=", "/=", "%=", "&=", "|=", "^=", "##", ".*",
                                      "..", "//", "/*"};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    if (pairs[i][0] == a && pairs[i][1] == b) return 1;
  }
  return 0;
}

size_t kvjit_name_canonical(const char *name, char *out) {
  const char *p = name;
  while (is_space(*p)) p++;
  if (*p == '&') p++;
  size_t n = 0;
  int pending_space = 0;
  while (*p) {
    char c = *p;
    if (is_space(c)) {
      pending_space = 1;
      p++;
      continue;
    }
    if (pending_space && n > 0 && needs_space(out[n - 1], c)) out[n++] = ' ';
    pending_space = 0;
    if (c == '\'' || c == '"') {
      /* A literal: copied as it is up to its closing quote (escapes included). */
      out[n++] = *p++;
      while (*p && *p != c) {
        if (*p == '\\' && p[1]) out[n++] = *p++;
        out[n++] = *p++;
      }
      if (*p) out[n++] = *p++;
      continue;
    }
    out[n++] = c;
    p++;
  }
  out[n] = '\0';
  return n;
}

char *kvjit_name_canonical_dup(const char *name) {
  char *out = malloc(strlen(name) + 1);
  if (out) kvjit_name_canonical(name, out);
  return out;
}
