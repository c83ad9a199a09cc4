/* The directive scanner (include_scan.h): a small lexer, enough to tell code from comments. */
#include "include_scan.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

typedef struct scanner {
  const char *s;
  size_t n, i;
  kvjit_scan_directive *out;
  size_t count, cap;
} scanner;

static int is_ident(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
}

/* Skip blanks, comments and line splices, but not newlines. */
static void skip_blanks(scanner *sc) {
  while (sc->i < sc->n) {
    char c = sc->s[sc->i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      sc->i++;
    } else if (c == '\\' && sc->i + 1 < sc->n && sc->s[sc->i + 1] == '\n') {
      sc->i += 2;
    } else if (c == '/' && sc->i + 1 < sc->n && sc->s[sc->i + 1] == '*') {
      const char *end = sc->i + 2 < sc->n ? strstr(sc->s + sc->i + 2, "*/") : NULL;
      sc->i = end ? (size_t)(end - sc->s) + 2 : sc->n;
    } else {
      return;
    }
  }
}

static int add(scanner *sc, size_t start, size_t end, int angled, int computed, int has_include) {
  if (sc->count == sc->cap) {
    size_t cap = sc->cap ? sc->cap * 2 : 8;
    kvjit_scan_directive *p = realloc(sc->out, cap * sizeof *p);
    if (p == NULL) return 0;
    sc->out = p;
    sc->cap = cap;
  }
  kvjit_scan_directive *d = &sc->out[sc->count++];
  d->start = start;
  d->end = end;
  d->angled = angled;
  d->computed = computed;
  d->has_include = has_include;
  return 1;
}

/* At the name of an include (after blanks): a "..." or <...> on this line, or something computed. */
static int name_at(scanner *sc, size_t where, int has_include) {
  skip_blanks(sc);
  if (sc->i >= sc->n || sc->s[sc->i] == '\n') return 1; /* "#include" alone: NVRTC will say so */
  char open = sc->s[sc->i];
  if (open == '"' || open == '<') {
    char close = open == '<' ? '>' : '"';
    size_t j = sc->i + 1;
    while (j < sc->n && sc->s[j] != close && sc->s[j] != '\n') j++;
    if (j < sc->n && sc->s[j] == close) {
      size_t start = sc->i;
      sc->i = j + 1;
      return add(sc, start, j + 1, open == '<', 0, has_include);
    }
  }
  return add(sc, where, where, 0, 1, has_include);
}

static size_t ident_end(const scanner *sc, size_t i) {
  while (i < sc->n && is_ident(sc->s[i])) i++;
  return i;
}

static int word_is(const scanner *sc, size_t start, size_t end, const char *w) {
  size_t l = strlen(w);
  return end - start == l && memcmp(sc->s + start, w, l) == 0;
}

/* After '#' at the start of a line. */
static int directive(scanner *sc, size_t hash) {
  skip_blanks(sc);
  size_t start = sc->i, end = ident_end(sc, start);
  sc->i = end;
  if (word_is(sc, start, end, "include") || word_is(sc, start, end, "import")) return name_at(sc, hash, 0);
  if (word_is(sc, start, end, "include_next")) return add(sc, hash, hash, 0, 1, 0);
  return 1;
}

/* A quoted literal from sc->i (at its opening quote), ending at its closing quote or the line. */
static void skip_literal(scanner *sc) {
  char q = sc->s[sc->i++];
  while (sc->i < sc->n && sc->s[sc->i] != q && sc->s[sc->i] != '\n') {
    if (sc->s[sc->i] == '\\' && sc->i + 1 < sc->n) sc->i++;
    sc->i++;
  }
  if (sc->i < sc->n && sc->s[sc->i] == q) sc->i++;
}

/* R"delim( ... )delim" from sc->i (at the quote). */
static void skip_raw_string(scanner *sc) {
  size_t open = sc->i + 1, paren = open;
  while (paren < sc->n && paren - open < 16 && sc->s[paren] != '(' && sc->s[paren] != '\n') paren++;
  if (paren >= sc->n || sc->s[paren] != '(') {
    skip_literal(sc);
    return;
  }
  char close[20];
  size_t dl = paren - open;
  close[0] = ')';
  memcpy(close + 1, sc->s + open, dl);
  close[dl + 1] = '"';
  close[dl + 2] = '\0';
  const char *end = strstr(sc->s + paren + 1, close);
  sc->i = end ? (size_t)(end - sc->s) + dl + 2 : sc->n;
}

kvjit_status kvjit_scan(const char *text, size_t len, kvjit_scan_directive **out, size_t *count) {
  *out = NULL;
  *count = 0;
  /* Every directive spells "include": most kernel sources that have none are done in one search
   * (strstr: glibc's vectorised one is several times faster than memmem here; text ends in NUL). */
  const char *first = strstr(text, "include");
  if (first == NULL || (size_t)(first - text) >= len) return KVJIT_OK;
  scanner sc = {text, len, 0, NULL, 0, 0};
  int line_start = 1, ok = 1;
  while (ok && sc.i < sc.n) {
    char c = sc.s[sc.i];
    if (c == '\n') {
      line_start = 1;
      sc.i++;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' ||
               (c == '\\' && sc.i + 1 < sc.n && sc.s[sc.i + 1] == '\n') ||
               (c == '/' && sc.i + 1 < sc.n && sc.s[sc.i + 1] == '*')) {
      skip_blanks(&sc);
    } else if (c == '/' && sc.i + 1 < sc.n && sc.s[sc.i + 1] == '/') {
      while (sc.i < sc.n && sc.s[sc.i] != '\n') sc.i += sc.s[sc.i] == '\\' && sc.i + 1 < sc.n ? 2 : 1;
    } else if (c == '#' && line_start) {
      size_t hash = sc.i++;
      line_start = 0;
      ok = directive(&sc, hash);
    } else if (c == '"' || c == '\'') {
      line_start = 0;
      skip_literal(&sc);
    } else if (is_ident(c)) {
      line_start = 0;
      size_t start = sc.i, end = ident_end(&sc, start);
      sc.i = end;
      int digit = c >= '0' && c <= '9';
      if (!digit && end < sc.n && sc.s[end] == '"' &&
          (word_is(&sc, start, end, "R") || word_is(&sc, start, end, "LR") || word_is(&sc, start, end, "uR") ||
           word_is(&sc, start, end, "UR") || word_is(&sc, start, end, "u8R"))) {
        skip_raw_string(&sc);
      } else if (word_is(&sc, start, end, "__has_include") || word_is(&sc, start, end, "__has_include_next")) {
        int next = end - start > 13;
        skip_blanks(&sc);
        if (sc.i < sc.n && sc.s[sc.i] == '(') {
          sc.i++;
          ok = next ? add(&sc, start, start, 0, 1, 1) : name_at(&sc, start, 1);
        }
      } else if (end < sc.n && sc.s[end] == '\'' && !digit &&
                 !(word_is(&sc, start, end, "u") || word_is(&sc, start, end, "U") || word_is(&sc, start, end, "L") ||
                   word_is(&sc, start, end, "u8"))) {
        sc.i++; /* a digit separator after a hex digit run such as 0xff'ff: not a literal */
      } else if (digit) {
        /* A pp-number with digit separators (1'000'000): its quotes are not literals. */
        while (sc.i < sc.n && (is_ident(sc.s[sc.i]) || sc.s[sc.i] == '\'' || sc.s[sc.i] == '.')) sc.i++;
      }
    } else {
      line_start = 0;
      sc.i++;
    }
  }
  if (!ok) {
    free(sc.out);
    return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "include scan: out of memory");
  }
  *out = sc.out;
  *count = sc.count;
  return KVJIT_OK;
}
