/*
 * The one strict parser for the numbers and switches kvjit reads from text: environment
 * variables, CLI flags and (through the C API) the Python binding. Each value either parses whole
 * or is refused with a message naming it: nothing wraps, nothing is half-read, nothing quietly
 * becomes a default.
 */
#include "parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "status.h"

/* Messages quote at most this much of a value: a hostile one may be megabytes long. */
#define QUOTE "%.64s%s"
#define QUOTED(text) (text), strlen(text) > 64 ? "..." : ""

/* Plain decimal digits, the whole of [text, text + len), no overflow. 0, or -1. */
static int parse_digits(const char *text, size_t len, uint64_t *out) {
  if (len == 0) return -1;
  uint64_t value = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') return -1;
    unsigned digit = (unsigned)(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return -1;
    value = value * 10 + digit;
  }
  *out = value;
  return 0;
}

kvjit_status kvjit_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
  if (text == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "text or out is NULL");
  uint64_t value = 0;
  if (parse_digits(text, strlen(text), &value) != 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "\"" QUOTE "\": expected a whole number of plain decimal digits from %llu to %llu",
                      QUOTED(text), (unsigned long long)min, (unsigned long long)max);
  }
  if (value < min || value > max) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "\"" QUOTE "\": out of range %llu to %llu", QUOTED(text),
                      (unsigned long long)min, (unsigned long long)max);
  }
  *out = value;
  return KVJIT_OK;
}

/* Bits to shift by for a size's unit, case-insensitive: none or B (bytes); K, M, G, T, P or E,
 * alone or followed by B or iB. All are powers of 1024: "64KB" is 65536 like "64KiB". -1: no unit. */
static int unit_shift(const char *unit) {
  static const char prefixes[] = "KMGTPE";
  if (unit[0] == '\0' || strcasecmp(unit, "B") == 0) return 0;
  for (int i = 0; prefixes[i] != '\0'; i++) {
    if ((unit[0] | 0x20) != (prefixes[i] | 0x20)) continue;
    const char *rest = unit + 1;
    if (rest[0] == '\0' || strcasecmp(rest, "B") == 0 || strcasecmp(rest, "iB") == 0) return 10 * (i + 1);
    return -1;
  }
  return -1;
}

kvjit_status kvjit_parse_size(const char *text, uint64_t *out) {
  if (text == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "text or out is NULL");
  size_t digits = strspn(text, "0123456789");
  int shift = unit_shift(text + digits);
  uint64_t value = 0;
  if (digits == 0 || shift < 0) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT,
                      "size \"" QUOTE "\": expected decimal digits and an optional unit K, M, G, T, P or E "
                      "(powers of 1024; KiB and KB mean K), e.g. 500M",
                      QUOTED(text));
  }
  if (parse_digits(text, digits, &value) != 0 || (shift != 0 && value > (UINT64_MAX >> shift))) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "size \"" QUOTE "\": larger than 16 EiB", QUOTED(text));
  }
  *out = value << shift;
  return KVJIT_OK;
}

kvjit_status kvjit_parse_bool(const char *text, int *out) {
  if (text == NULL || out == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "text or out is NULL");
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
    if (strcasecmp(text, yes[i]) == 0) {
      *out = 1;
      return KVJIT_OK;
    }
    if (strcasecmp(text, no[i]) == 0) {
      *out = 0;
      return KVJIT_OK;
    }
  }
  return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "\"" QUOTE "\": expected 1, 0, true, false, yes, no, on or off",
                    QUOTED(text));
}

kvjit_status kvjit_parse_duration_ms(const char *text, uint64_t *out) {
  uint64_t value = 0;
  kvjit_status st = kvjit_parse_uint(text, 0, KVJIT_MAX_DURATION_MS, &value);
  if (st != KVJIT_OK) {
    return kvjit_fail(st, "duration \"" QUOTE "\": expected milliseconds, plain decimal digits from 0 to %u",
                      QUOTED(text ? text : ""), KVJIT_MAX_DURATION_MS);
  }
  *out = value;
  return KVJIT_OK;
}

/* ---- environment ------------------------------------------------------------------------ */

const char *kvjit_env_text(const char *name) {
  const char *value = getenv(name);
  return value != NULL && value[0] != '\0' ? value : NULL;
}

/* One line: the variable, its value, why it was refused and what is used instead. */
static void env_warning(const char *name, const char *value, const char *fallback, int log) {
  if (log == 0) return;
  kvjit_log_line("warning: ignoring %s=\"" QUOTE "\" (%s); using the default, %s", name, QUOTED(value),
                 kvjit_last_error(), fallback);
}

int kvjit_env_bool(const char *name, int fallback, int log) {
  const char *text = kvjit_env_text(name);
  int value = fallback;
  if (text != NULL && kvjit_parse_bool(text, &value) != KVJIT_OK) {
    env_warning(name, text, fallback ? "on" : "off", log);
    value = fallback;
  }
  return value;
}

/* A number from the environment read by @p parse and checked against [min, max]; anything else
 * warns once (naming the variable, its text and the fallback shown with @p unit) and falls back. */
static uint64_t env_number(const char *name, kvjit_status (*parse)(const char *, uint64_t *), const char *unit,
                           uint64_t min, uint64_t max, uint64_t fallback, int log) {
  const char *text = kvjit_env_text(name);
  if (text == NULL) return fallback;
  uint64_t value = 0;
  kvjit_status st = parse(text, &value);
  if (st == KVJIT_OK && (value < min || value > max)) {
    st = kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "%llu %s, out of range %llu to %llu", (unsigned long long)value, unit,
                    (unsigned long long)min, (unsigned long long)max);
  }
  if (st != KVJIT_OK) {
    char shown[32];
    snprintf(shown, sizeof shown, "%llu %s", (unsigned long long)fallback, unit);
    env_warning(name, text, shown, log);
    return fallback;
  }
  return value;
}

uint64_t kvjit_env_size(const char *name, uint64_t min, uint64_t max, uint64_t fallback, int log) {
  return env_number(name, kvjit_parse_size, "bytes", min, max, fallback, log);
}

uint64_t kvjit_env_duration_ms(const char *name, uint64_t min, uint64_t max, uint64_t fallback, int log) {
  return env_number(name, kvjit_parse_duration_ms, "ms", min, max, fallback, log);
}
