/* kvjit prewarm's list items and lists (items.h). */
#include "items.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The library's parser: sm_90, 90, 9.0 or a GPU's name (h100); its detail says why not, e.g. for
 * sm_90a, a target ops do not build. */
const char *item_arch(const char *item, int *value, char *why, size_t capacity) {
  if (kvjit_parse_arch(item, value) == KVJIT_OK) return NULL;
  const char *detail = kvjit_last_error(), *reason = strstr(detail, "\": "); /* after 'arch "ITEM": ' */
  return reason != NULL ? reason + 3 : detail;
}

const char *item_positive(const char *item, int *value, char *why, size_t capacity) {
  long v;
  if (!parse_int(item, 1, 1 << 20, &v)) return "expected a positive integer";
  *value = (int)v;
  return NULL;
}

const char *item_k_row_bytes(const char *item, int *value, char *why, size_t capacity) {
  long v;
  if (!parse_int(item, 1, MAX_ROW_BYTES, &v)) return "expected a row size in bytes, 1 to 16777216";
  *value = (int)v;
  return NULL;
}

const char *item_head_dim(const char *item, int *value, char *why, size_t capacity) {
  long v;
  if (!parse_int(item, 0, 1 << 16, &v)) return "expected elements of one head, 0 (K only) to 65536";
  *value = (int)v;
  return NULL;
}

const char *item_v_row_bytes(const char *item, int *value, char *why, size_t capacity) {
  long v;
  if (!parse_int(item, 0, MAX_ROW_BYTES, &v)) return "expected a row size in bytes, 0 (K only) to 16777216";
  *value = (int)v;
  return NULL;
}

/* @p item as the library's dtype parser reads it: without torch's "torch." prefix, in lower case
 * (people type BF16), "fp8" being fp8_e4m3. 0, or -1 when it cannot be a dtype name. */
static int dtype_of_item(const char *item, kvjit_dtype *out) {
  char name[32];
  if (strncmp(item, "torch.", 6) == 0) item += 6;
  size_t n = strlen(item);
  if (n >= sizeof name) return -1;
  for (size_t i = 0; i <= n; i++) name[i] = (char)tolower((unsigned char)item[i]);
  return kvjit_dtype_parse(strcmp(name, "fp8") == 0 ? "fp8_e4m3" : name, out) == KVJIT_OK ? 0 : -1;
}

/* A --dtype item: element bytes of the cache dtype, plus (bits 8..) the fp8 kind for fp8 caches,
 * which also get quantizing variants (see --quantize-from). bf16 and fp16 give the same rows;
 * deduplication merges them. The names are the library's (kvjit_dtype_parse()). */
const char *item_dtype(const char *item, int *value, char *why, size_t capacity) {
  kvjit_dtype d;
  if (dtype_of_item(item, &d) == 0 && d != KVJIT_DTYPE_BYTES) {
    int fp8 = d == KVJIT_DTYPE_FP8_E4M3 || d == KVJIT_DTYPE_FP8_E5M2;
    *value = fp8 ? 1 | (int)d << 8 : kvjit_dtype_bytes(d);
    return NULL;
  }
  const char *names[] = {kvjit_dtype_name(KVJIT_DTYPE_BF16),     kvjit_dtype_name(KVJIT_DTYPE_F16),
                         kvjit_dtype_name(KVJIT_DTYPE_F32),      "fp16", "fp32", "fp8",
                         kvjit_dtype_name(KVJIT_DTYPE_FP8_E4M3), kvjit_dtype_name(KVJIT_DTYPE_FP8_E5M2)};
  const char *near = nearest_word(item, names, ARRAY_SIZE(names));
  snprintf(why, capacity, "%s%s%sexpected bf16, fp16, fp32, fp8 (= fp8_e4m3) or fp8_e5m2", near ? "did you mean " : "",
           near ? near : "", near ? "? " : "");
  return why;
}

/* A --quantize-from item: the source dtype of quantizing variants, or 0 (none: plain fp8 only). */
const char *item_quant_src(const char *item, int *value, char *why, size_t capacity) {
  kvjit_dtype d;
  if (strcasecmp(item, "none") == 0)
    d = KVJIT_DTYPE_BYTES;
  else if (dtype_of_item(item, &d) || (d != KVJIT_DTYPE_BF16 && d != KVJIT_DTYPE_F16 && d != KVJIT_DTYPE_F32))
    return "expected bf16, fp16, fp32 or none";
  *value = (int)d;
  return NULL;
}

static const char *const scale_words[] = {
    [KVJIT_SCALE_NONE] = "none", [KVJIT_SCALE_PER_TENSOR] = "tensor", [KVJIT_SCALE_PER_HEAD] = "head"};

/* *value = the index of @p item in @p words; @p expected (the error's wording) when it is not there. */
static const char *item_word(const char *item, int *value, const char *const *words, size_t count,
                             const char *expected) {
  for (size_t i = 0; i < count; i++) {
    if (words[i] != NULL && strcmp(words[i], item) == 0) {
      *value = (int)i;
      return NULL;
    }
  }
  return expected;
}

const char *item_scale(const char *item, int *value, char *why, size_t capacity) {
  return item_word(item, value, scale_words, ARRAY_SIZE(scale_words), "expected tensor, head or none");
}

/* Parse "a,b,c" with @p parse into @p out (replacing what a repeated flag gave before). */
int parse_list(const char *cmd, const char *flag, const char *text, item_parser parse, int_list *out) {
  out->count = 0;
  const char *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    char item[64];
    if (len == 0) return usage_error(cmd, "%s '%s': empty item", flag, text);
    if (len >= sizeof item) return usage_error(cmd, "%s '%.*s': too long", flag, (int)len, p);
    memcpy(item, p, len);
    item[len] = '\0';
    if (out->count == MAX_LIST) return usage_error(cmd, "%s '%s': more than %d items", flag, text, MAX_LIST);
    char why[256];
    const char *expected = parse(item, &out->value[out->count], why, sizeof why);
    if (expected != NULL) return usage_error(cmd, "bad value '%s' for %s: %s", item, flag, expected);
    out->count++;
    if (p[len] == '\0') return 0;
    p += len + 1;
  }
}

int parse_one(const char *cmd, const char *flag, const char *text, item_parser parse, int *out) {
  char why[256];
  const char *expected = parse(text, out, why, sizeof why);
  if (expected != NULL) return usage_error(cmd, "bad value '%s' for %s: %s", text, flag, expected);
  return 0;
}
