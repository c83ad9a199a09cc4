/*
 * libFuzzer harness over manifest lines of every op (kvjit_variant_parse(), cache/MANIFEST.md):
 * the input is a manifest, split into lines the way `kvjit prewarm --manifest` splits them.
 *  - parsing never reads outside the line (each is copied to an exact-size allocation, so
 *    AddressSanitizer sees one byte past it), and fails only with INVALID_ARGUMENT, UNSUPPORTED or
 *    NOT_FOUND (a blank or comment line), never leaving *out half-written on failure;
 *  - a line that parses formats to a canonical line that parses to the same variant, and that
 *    line formats to itself (format and parse are inverses on what parse accepts);
 *  - a line longer than the format allows is refused.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvjit.h"
#include "kvjit_tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) __builtin_trap();                                                               \
  } while (0)

/* cache/MANIFEST.md: at most 511 characters. */
#define LINE_MAX_CHARS 511

static int same_variant(const kvjit_variant *a, const kvjit_variant *b) {
  /* kvjit_variant_check() puts variants in canonical form: equal ones compare equal. */
  return a->version == b->version && a->op == b->op && memcmp(a->values, b->values, sizeof a->values) == 0;
}

static void one_line(const uint8_t *text, size_t len) {
  char *line = malloc(len + 1);
  if (line == NULL) return;
  memcpy(line, text, len);
  line[len] = '\0';
  kvjit_variant v, untouched;
  memset(&v, 0xa5, sizeof v);
  untouched = v;
  kvjit_status st = kvjit_variant_parse(&v, line);
  size_t chars = strcspn(line, "\r\n");
  if (chars > LINE_MAX_CHARS) CHECK(st != KVJIT_OK);
  if (st != KVJIT_OK) {
    CHECK(st == KVJIT_ERR_INVALID_ARGUMENT || st == KVJIT_ERR_UNSUPPORTED || st == KVJIT_ERR_NOT_FOUND);
    CHECK(memcmp(&v, &untouched, sizeof v) == 0);
    CHECK(kvjit_last_error()[0] != '\0');
    free(line);
    return;
  }
  char canon[512], again[512];
  CHECK(kvjit_variant_format(&v, canon, sizeof canon) == KVJIT_OK);
  kvjit_variant w;
  CHECK(kvjit_variant_parse(&w, canon) == KVJIT_OK);
  CHECK(same_variant(&v, &w));
  CHECK(kvjit_variant_format(&w, again, sizeof again) == KVJIT_OK);
  CHECK(strcmp(canon, again) == 0);
  free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* Lines end at "\n" (a "\r" before it stays for the parser, which allows "\r\n"); a line with
   * a NUL byte is refused by the reader before parsing, so it is skipped here. */
  size_t start = 0;
  for (size_t i = 0; i <= size; i++) {
    if (i < size && data[i] != '\n') continue;
    size_t len = i - start;
    if (memchr(data + start, '\0', len) == NULL) one_line(data + start, len);
    start = i + 1;
  }
  return 0;
}
