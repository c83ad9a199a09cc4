/*
 * kvjit: the command-line tool. Fills the cubin cache on a build machine (no GPU, no driver needed),
 * then inspects and maintains it. Uses the public API only (kvjit.h), like zstd's programs/.
 *
 * Exit status: 0 success; 1 a library call failed, a variant failed to compile or verify found bad
 * entries; 2 bad command line (one line on stderr naming the flag and the value).
 */
#include "kvjit.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_USAGE = 2 };

/* Longest comma-separated list a flag takes; more is a usage error, not a silent truncation. */
#define MAX_LIST 32
/* Upper bound of a row in bytes: far past any real head layout, small enough for int arithmetic. */
#define MAX_ROW_BYTES (1 << 24)
/* Longest manifest line kvjit_store_kv_variant_format() is given room for. */
#define LINE_CAPACITY 512

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------------------------ */
/* Messages                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* "kvjit CMD: MESSAGE" on stderr; returns the usage exit status so callers can `return`. */
__attribute__((format(printf, 2, 3))) static int usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "kvjit %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputs(" (see 'kvjit ", stderr);
  fputs(cmd, stderr);
  fputs(" --help')\n", stderr);
  va_end(ap);
  return EXIT_USAGE;
}

/* A failed library call: its thread-local detail, else the status's own message. */
static int library_error(const char *cmd, const char *what, kvjit_status status) {
  const char *detail = kvjit_last_error();
  fprintf(stderr, "kvjit %s: %s: %s [%s]\n", cmd, what, detail[0] ? detail : kvjit_status_string(status),
          kvjit_status_name(status));
  return EXIT_FAILURE;
}

static int out_of_memory(const char *cmd) {
  fprintf(stderr, "kvjit %s: out of memory\n", cmd);
  return EXIT_FAILURE;
}

/* Bytes in binary units, "512B", "1.5K", "2.0G". */
static const char *human_size(uint64_t bytes, char *buf, size_t capacity) {
  static const char units[] = "KMGTP";
  if (bytes < 1024) {
    snprintf(buf, capacity, "%" PRIu64 "B", bytes);
    return buf;
  }
  double value = (double)bytes / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof units - 1) {
    value /= 1024.0;
    unit++;
  }
  snprintf(buf, capacity, "%.1f%c", value, units[unit]);
  return buf;
}

/* Seconds in the largest unit that fits, "42s", "7m", "3h", "12d". */
static const char *human_age(int64_t seconds, char *buf, size_t capacity) {
  if (seconds < 0) seconds = 0;
  if (seconds < 120)
    snprintf(buf, capacity, "%" PRId64 "s", seconds);
  else if (seconds < 2 * 3600)
    snprintf(buf, capacity, "%" PRId64 "m", seconds / 60);
  else if (seconds < 2 * 86400)
    snprintf(buf, capacity, "%" PRId64 "h", seconds / 3600);
  else
    snprintf(buf, capacity, "%" PRId64 "d", seconds / 86400);
  return buf;
}

/* "sm_90", or "compute_90" for PTX entries (negative arch). */
static const char *arch_name(int arch, char *buf, size_t capacity) {
  if (arch < 0)
    snprintf(buf, capacity, "compute_%d", -arch);
  else
    snprintf(buf, capacity, "sm_%d", arch);
  return buf;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------------------ */
/* Option parsing                                                                              */
/* ------------------------------------------------------------------------------------------ */

/*
 * getopt_long() reports problems as '?' (unknown option) or ':' (missing value, optstring starts
 * with ':'); turn them into one line naming the flag as the user typed it.
 */
static int getopt_error(const char *cmd, int c, char *const argv[]) {
  const char *element = argv[optind - 1];
  char flag[64];
  if (strncmp(element, "--", 2) == 0 || optopt <= 0 || optopt >= 256) {
    snprintf(flag, sizeof flag, "%s", element);
    flag[strcspn(flag, "=")] = '\0';
  } else {
    snprintf(flag, sizeof flag, "-%c", optopt);
  }
  if (c == ':') return usage_error(cmd, "%s needs a value", flag);
  if (c == '?' && optopt != 0 && strchr(element, '=') != NULL && strncmp(element, "--", 2) == 0)
    return usage_error(cmd, "%s takes no value", flag);
  return usage_error(cmd, "unknown option '%s'", flag);
}

/* Anything getopt_long() left over is an error: no command takes positional arguments. */
static int check_no_operands(const char *cmd, int argc, char *const argv[]) {
  if (optind < argc) return usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  return 0;
}

/* Whole-string decimal integer in [min, max]. */
static bool parse_int(const char *text, long min, long max, long *out) {
  if (text[0] == '\0' || text[0] == '+' || text[0] == ' ') return false;
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

/* "500M", "2G", "1048576", "64KiB": binary units (K = 1024), case-insensitive. */
static bool parse_size(const char *text, uint64_t *out) {
  if (text[0] < '0' || text[0] > '9') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0) return false;
  unsigned shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: break;
  }
  if (shift != 0 && (*end == 'i' || *end == 'I')) end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end != '\0') return false;
  if (shift != 0 && value > (UINT64_MAX >> shift)) return false;
  *out = (uint64_t)value << shift;
  return true;
}

/*
 * Parser of one list item: NULL on success, else what was expected ("bf16, fp16, fp32 or fp8"),
 * for the error line.
 */
typedef const char *(*item_parser)(const char *item, int *value);

static const char *item_arch(const char *item, int *value) {
  return kvjit_parse_arch(item, value) == KVJIT_OK ? NULL : "an arch such as sm_90, sm_90a, 90 or 9.0";
}

static const char *item_positive(const char *item, int *value) {
  long v;
  if (!parse_int(item, 1, 1 << 20, &v)) return "a positive integer";
  *value = (int)v;
  return NULL;
}

static const char *item_k_row_bytes(const char *item, int *value) {
  long v;
  if (!parse_int(item, 1, MAX_ROW_BYTES, &v)) return "a row size in bytes, 1 to 16777216";
  *value = (int)v;
  return NULL;
}

static const char *item_head_dim(const char *item, int *value) {
  long v;
  if (!parse_int(item, 0, 1 << 16, &v)) return "elements of one head, 0 (K only) to 65536";
  *value = (int)v;
  return NULL;
}

static const char *item_v_row_bytes(const char *item, int *value) {
  long v;
  if (!parse_int(item, 0, MAX_ROW_BYTES, &v)) return "a row size in bytes, 0 (K only) to 16777216";
  *value = (int)v;
  return NULL;
}

/* A --dtype item: element bytes of the cache dtype, plus (bits 8..) the fp8 kind for fp8 caches,
 * which also get quantizing variants (see --quantize-from). bf16 and fp16 give the same rows;
 * deduplication merges them. */
#define DTYPE_BYTES(value) ((value) & 0xff)
#define DTYPE_FP8_KIND(value) ((kvjit_dtype)((value) >> 8))
static const char *item_dtype(const char *item, int *value) {
  static const struct {
    const char *name;
    int value;
  } dtypes[] = {
      {"bf16", 2},
      {"bfloat16", 2},
      {"fp16", 2},
      {"float16", 2},
      {"half", 2},
      {"fp32", 4},
      {"float32", 4},
      {"float", 4},
      {"fp8", 1 | KVJIT_DTYPE_FP8_E4M3 << 8},
      {"fp8_e4m3", 1 | KVJIT_DTYPE_FP8_E4M3 << 8},
      {"fp8_e5m2", 1 | KVJIT_DTYPE_FP8_E5M2 << 8},
  };
  for (size_t i = 0; i < ARRAY_SIZE(dtypes); i++) {
    if (strcmp(item, dtypes[i].name) == 0) {
      *value = dtypes[i].value;
      return NULL;
    }
  }
  return "bf16, fp16, fp32, fp8 (= fp8_e4m3) or fp8_e5m2";
}

/* A --quantize-from item: the source dtype of quantizing variants, or 0 (none: plain fp8 only). */
static const char *item_quant_src(const char *item, int *value) {
  if (strcmp(item, "none") == 0) *value = KVJIT_DTYPE_BYTES;
  else if (strcmp(item, "bf16") == 0 || strcmp(item, "bfloat16") == 0) *value = KVJIT_DTYPE_BF16;
  else if (strcmp(item, "fp16") == 0 || strcmp(item, "float16") == 0 || strcmp(item, "half") == 0) *value = KVJIT_DTYPE_F16;
  else if (strcmp(item, "fp32") == 0 || strcmp(item, "float32") == 0 || strcmp(item, "float") == 0) *value = KVJIT_DTYPE_F32;
  else return "bf16, fp16, fp32 or none";
  return NULL;
}

/* The keyword of each value of the enum options, indexed by the value: the option parsers and
 * the progress lines both read these. */
static const char *const index_words[] = {[KVJIT_INDEX_INT32] = "int32", [KVJIT_INDEX_INT64] = "int64"};
static const char *const pdl_words[] = {[KVJIT_PDL_AUTO] = "auto", [KVJIT_PDL_ON] = "on", [KVJIT_PDL_OFF] = "off"};
static const char *const scale_words[] = {
    [KVJIT_SCALE_NONE] = "none", [KVJIT_SCALE_PER_TENSOR] = "tensor", [KVJIT_SCALE_PER_HEAD] = "head"};
static const char *const dtype_words[] = {
    [KVJIT_DTYPE_BYTES] = "bytes", [KVJIT_DTYPE_F16] = "fp16",          [KVJIT_DTYPE_BF16] = "bf16",
    [KVJIT_DTYPE_F32] = "fp32",    [KVJIT_DTYPE_FP8_E4M3] = "fp8_e4m3", [KVJIT_DTYPE_FP8_E5M2] = "fp8_e5m2"};

static const char *word_of(const char *const *words, size_t count, int value) {
  return value >= 0 && (size_t)value < count && words[value] != NULL ? words[value] : "?";
}

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

static const char *item_scale(const char *item, int *value) {
  return item_word(item, value, scale_words, ARRAY_SIZE(scale_words), "tensor, head or none");
}

static const char *item_index(const char *item, int *value) {
  return item_word(item, value, index_words, ARRAY_SIZE(index_words), "int32 or int64");
}

static const char *item_pdl(const char *item, int *value) {
  return item_word(item, value, pdl_words, ARRAY_SIZE(pdl_words), "auto, on or off");
}

/* --split all: every split (see add_splits()). */
enum { SPLIT_ALL = -1 };

/* "auto" is split 0 (whatever the automatic choice may pick); else an explicit split count. */
static const char *item_split(const char *item, int *value) {
  long v;
  if (strcmp(item, "auto") == 0) *value = 0;
  else if (strcmp(item, "all") == 0) *value = SPLIT_ALL;
  else if (parse_int(item, 1, 1 << 20, &v)) *value = (int)v;
  else return "auto, all or a split count that divides the rows";
  return NULL;
}

static const char *item_vec(const char *item, int *value) {
  long v;
  if (!parse_int(item, 1, 16, &v) || (v & (v - 1)) != 0) return "16, 8, 4, 2 or 1";
  *value = (int)v;
  return NULL;
}

typedef struct int_list {
  int value[MAX_LIST];
  size_t count;
} int_list;

/* Parse "a,b,c" with @p parse into @p out (replacing what a repeated flag gave before). */
static int parse_list(const char *cmd, const char *flag, const char *text, item_parser parse, int_list *out) {
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
    const char *expected = parse(item, &out->value[out->count]);
    if (expected != NULL) return usage_error(cmd, "bad value '%s' for %s (expected %s)", item, flag, expected);
    out->count++;
    if (p[len] == '\0') return 0;
    p += len + 1;
  }
}

static int parse_one(const char *cmd, const char *flag, const char *text, item_parser parse, int *out) {
  const char *expected = parse(text, out);
  if (expected != NULL) return usage_error(cmd, "bad value '%s' for %s (expected %s)", text, flag, expected);
  return 0;
}

/* Options every command that opens a context takes. */
typedef struct cache_opts {
  const char *cache_dir;  /* NULL: $KVJIT_CACHE_DIR etc. */
  const char *cache_path; /* NULL: $KVJIT_CACHE_PATH */
} cache_opts;

enum { OPT_CACHE_DIR = 256, OPT_CACHE_PATH };
#define CACHE_LONG_OPTIONS                                                                       \
  {"cache-dir", required_argument, NULL, OPT_CACHE_DIR}, {"cache-path", required_argument, NULL, OPT_CACHE_PATH}
#define CACHE_OPTIONS_HELP                                                                       \
  "      --cache-dir DIR     writable cache dir (default: $KVJIT_CACHE_DIR, else\n"              \
  "                          $XDG_CACHE_HOME/kvjit, else ~/.cache/kvjit)\n"                      \
  "      --cache-path DIRS   colon-separated read-only cache dirs (default: $KVJIT_CACHE_PATH)\n"

/* Handles a cache option; false when @p c is not one. */
static bool cache_option(int c, cache_opts *opts) {
  if (c == OPT_CACHE_DIR) opts->cache_dir = optarg;
  else if (c == OPT_CACHE_PATH) opts->cache_path = optarg;
  else return false;
  return true;
}

static int open_context(const char *cmd, const cache_opts *opts, kvjit_context **out) {
  kvjit_context_options options = KVJIT_CONTEXT_OPTIONS_INIT;
  options.cache_dir = opts->cache_dir;
  options.cache_path = opts->cache_path;
  kvjit_status status = kvjit_context_create(out, &options);
  if (status != KVJIT_OK) return library_error(cmd, "cannot create the context", status);
  return 0;
}

/* Exit status 1 with a message when the context has no writable dir to fill or maintain. */
static int need_write_dir(const char *cmd, kvjit_context *ctx, kvjit_cache_info *info) {
  kvjit_status status = kvjit_context_cache_info(ctx, info);
  if (status != KVJIT_OK) return library_error(cmd, "cache info", status);
  if (info->write_dir == NULL) {
    fprintf(stderr, "kvjit %s: no writable cache dir (%s)\n", cmd,
            info->degraded_reason ? info->degraded_reason : "disk cache disabled");
    return EXIT_FAILURE;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* prewarm: variants                                                                           */
/* ------------------------------------------------------------------------------------------ */

/*
 * A model's KV cache layout. A store_kv_cache row is one token's K (or V) of every KV head of one
 * tensor-parallel rank: (kv_heads / tp) * head_dim * dtype bytes. MLA caches one latent "head",
 * which every rank replicates.
 */
typedef struct model_shape {
  const char *name;
  int kv_heads;
  int head_dim;   /* elements of one K head */
  int v_head_dim; /* elements of one V head; 0: K only (MLA latent cache) */
} model_shape;

static const model_shape model_presets[] = {
    {"llama-3.1-8b", 8, 128, 128},   {"llama-3.1-70b", 8, 128, 128}, {"llama-3.1-405b", 8, 128, 128},
    {"qwen2.5-7b", 4, 128, 128},     {"qwen2.5-72b", 8, 128, 128},   {"qwen3-32b", 8, 128, 128},
    {"mistral-7b", 8, 128, 128},     {"mixtral-8x7b", 8, 128, 128},  {"gemma-2-9b", 8, 256, 256},
    {"gemma-2-27b", 16, 128, 128},   {"gpt-oss-120b", 8, 64, 64},
    /* MLA: kv_lora_rank 512 + rope 64 = 576 elements, K only, not split across ranks. */
    {"deepseek-v3", 1, 576, 0},      {"deepseek-r1", 1, 576, 0},
};

static const model_shape *find_model(const char *name) {
  for (size_t i = 0; i < ARRAY_SIZE(model_presets); i++)
    if (strcmp(model_presets[i].name, name) == 0) return &model_presets[i];
  return NULL;
}

/* Index into model_presets, as an item of --model. */
static const char *item_model(const char *item, int *value) {
  const model_shape *model = find_model(item);
  if (model == NULL) return "a model listed by 'kvjit prewarm --help'";
  *value = (int)(model - model_presets);
  return NULL;
}

/*
 * KV heads one rank holds at tensor-parallel size @p tp, or 0 when @p tp does not fit the model.
 * With tp > kv_heads, vLLM and SGLang replicate each KV head over tp / kv_heads ranks (tp must be
 * a multiple of kv_heads), so every rank holds one head.
 */
static int heads_per_rank(int kv_heads, int tp) {
  if (tp <= kv_heads) return kv_heads % tp == 0 ? kv_heads / tp : 0;
  return tp % kv_heads == 0 ? 1 : 0;
}

typedef struct variant_list {
  kvjit_store_kv_variant *items;
  size_t count;
  size_t capacity;
} variant_list;

static bool variant_list_add(variant_list *list, const kvjit_store_kv_variant *variant) {
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 64;
    kvjit_store_kv_variant *items = realloc(list->items, capacity * sizeof *items);
    if (items == NULL) return false;
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = *variant;
  return true;
}

static int compare_i64(int64_t a, int64_t b) { return (a > b) - (a < b); }

static int compare_variants(const void *pa, const void *pb) {
  const kvjit_store_kv_variant *a = pa, *b = pb;
  int c;
  if ((c = compare_i64(a->arch, b->arch)) != 0) return c;
  if ((c = compare_i64(b->k_row_bytes, a->k_row_bytes)) != 0) return c; /* biggest rows first */
  if ((c = compare_i64(b->v_row_bytes, a->v_row_bytes)) != 0) return c;
  if ((c = compare_i64(a->index_type, b->index_type)) != 0) return c;
  if ((c = compare_i64(a->pdl, b->pdl)) != 0) return c;
  if ((c = compare_i64(a->split, b->split)) != 0) return c;
  if ((c = compare_i64(b->vector_bytes, a->vector_bytes)) != 0) return c;
  if ((c = compare_i64(a->cache_dtype, b->cache_dtype)) != 0) return c;
  if ((c = compare_i64(a->dtype, b->dtype)) != 0) return c;
  if ((c = compare_i64(a->scale_kind, b->scale_kind)) != 0) return c;
  return compare_i64(a->num_heads, b->num_heads);
}

/* Sort, then drop repeats: bf16 and fp16, 8B and 70B, tp and dtype pairs that give equal rows. */
static void variant_list_dedup(variant_list *list) {
  if (list->count == 0) return;
  if (list->count > 1) qsort(list->items, list->count, sizeof *list->items, compare_variants);
  size_t kept = 1;
  for (size_t i = 1; i < list->count; i++)
    if (compare_variants(&list->items[kept - 1], &list->items[i]) != 0) list->items[kept++] = list->items[i];
  list->count = kept;
}

/* "sm_90 k=2048 v=2048 int64 pdl=auto split=auto vec=16[ bf16->fp8_e4m3/tensor]", for progress lines. */
static const char *describe_variant(const kvjit_store_kv_variant *v, char *buf, size_t capacity) {
  char arch[32], v_bytes[32], split[16];
  if (v->v_row_bytes == 0)
    snprintf(v_bytes, sizeof v_bytes, "none");
  else
    snprintf(v_bytes, sizeof v_bytes, "%" PRId64, v->v_row_bytes);
  if (v->split == 0)
    snprintf(split, sizeof split, "auto");
  else
    snprintf(split, sizeof split, "%d", v->split);
  char quant[64] = "";
  if (v->cache_dtype == KVJIT_DTYPE_FP8_E4M3 || v->cache_dtype == KVJIT_DTYPE_FP8_E5M2) {
    snprintf(quant, sizeof quant, " %s->%s/%s", word_of(dtype_words, ARRAY_SIZE(dtype_words), (int)v->dtype),
             word_of(dtype_words, ARRAY_SIZE(dtype_words), (int)v->cache_dtype),
             word_of(scale_words, ARRAY_SIZE(scale_words), (int)v->scale_kind));
  }
  snprintf(buf, capacity, "%s k=%" PRId64 " v=%s %s pdl=%s split=%s vec=%d%s", arch_name(v->arch, arch, sizeof arch),
           v->k_row_bytes, v_bytes, word_of(index_words, ARRAY_SIZE(index_words), (int)v->index_type),
           word_of(pdl_words, ARRAY_SIZE(pdl_words), (int)v->pdl), split, v->vector_bytes ? v->vector_bytes : 16,
           quant);
  return buf;
}

/* A K/V row pair before the arch, index, PDL, split and vector choices multiply it; quantizing
 * rows (an fp8 cache fed from bf16/fp16/fp32) count source bytes. */
typedef struct row_pair {
  int k;
  int v;
  kvjit_dtype src, cache; /* BYTES, BYTES: a plain copy */
  kvjit_scale_kind scale;
  int heads; /* per-head scales: heads per row */
} row_pair;

/* Room for every combination the lists allow (models x tps x dtypes x (1 + sources x scales));
 * repeats go at the end. */
typedef struct row_list {
  row_pair *items; /* room for row_list_room() pairs */
  size_t count;
} row_list;

static void row_list_add(row_list *rows, int k, int v) {
  rows->items[rows->count++] = (row_pair){k, v, KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0};
}

typedef struct prewarm_opts {
  cache_opts cache;
  int_list archs, k_rows, v_rows, models, dtypes, tps, indexes, pdls, splits, vecs, quant_srcs, scales;
  bool have_v_rows;
  int kv_heads, head_dim, v_head_dim; /* 0 / -1 (v) when not given */
  const char *manifest;
  long jobs;
  bool dry_run;
} prewarm_opts;

/* Whether the op accepts the combination: pdl=on needs sm_90; an explicit split divides both rows. */
static bool op_accepts(const kvjit_store_kv_variant *v) {
  if (v->pdl == KVJIT_PDL_ON && v->arch < 90) return false;
  if (v->split == 0) return true;
  if (v->k_row_bytes % v->split != 0 || v->v_row_bytes % v->split != 0) return false;
  if (v->cache_dtype == KVJIT_DTYPE_BYTES) return true;
  /* Quantizing: slices of whole source elements, and the split limit of those kernels. */
  int64_t elem = v->dtype == KVJIT_DTYPE_F32 ? 4 : 2;
  return v->split <= 65535 && (v->k_row_bytes / v->split) % elem == 0 && (v->v_row_bytes / v->split) % elem == 0;
}

/* Adds @p v, or counts it in @p skipped when the op would refuse it (there is nothing to build). */
static bool add_variant(variant_list *out, const kvjit_store_kv_variant *v, size_t *skipped) {
  if (op_accepts(v)) return variant_list_add(out, v);
  (*skipped)++;
  return true;
}

/*
 * Adds @p base with its split, or for --split all: the automatic choice plus every power-of-two
 * split that divides both rows into parts of at least one vector.
 */
static bool add_splits(variant_list *out, kvjit_store_kv_variant base, size_t *skipped) {
  if (base.split != SPLIT_ALL) return add_variant(out, &base, skipped);
  base.split = 0;
  if (!add_variant(out, &base, skipped)) return false;
  int vec = base.vector_bytes ? base.vector_bytes : 16;
  for (int64_t split = 1; base.k_row_bytes / split >= vec; split *= 2) {
    if (base.k_row_bytes % split != 0 || base.v_row_bytes % split != 0) break;
    if (base.v_row_bytes != 0 && base.v_row_bytes / split < vec) break;
    base.split = (int)split;
    if (!add_variant(out, &base, skipped)) return false;
  }
  return true;
}

/* Every (arch, rows, index, pdl, split, vec) combination of the options the op accepts. */
static bool expand_variants(const prewarm_opts *o, const row_list *rows, variant_list *out, size_t *skipped) {
  for (size_t a = 0; a < o->archs.count; a++)
    for (size_t r = 0; r < rows->count; r++)
      for (size_t i = 0; i < o->indexes.count; i++)
        for (size_t p = 0; p < o->pdls.count; p++)
          for (size_t s = 0; s < o->splits.count; s++)
            for (size_t w = 0; w < o->vecs.count; w++) {
              kvjit_store_kv_variant v = {
                  .version = KVJIT_STORE_KV_VARIANT_VERSION,
                  .arch = o->archs.value[a],
                  .k_row_bytes = rows->items[r].k,
                  .v_row_bytes = rows->items[r].v,
                  .index_type = (kvjit_index_type)o->indexes.value[i],
                  .pdl = (kvjit_pdl_mode)o->pdls.value[p],
                  .split = o->splits.value[s],
                  .vector_bytes = o->vecs.value[w],
                  .dtype = rows->items[r].src,
                  .cache_dtype = rows->items[r].cache,
                  .scale_kind = rows->items[r].scale,
                  .num_heads = rows->items[r].scale == KVJIT_SCALE_PER_HEAD ? rows->items[r].heads : 0,
              };
              if (!add_splits(out, v, skipped)) return false;
            }
  return true;
}

/* Rows of every model x dtype x tp; exit status 2 when a tp does not fit a model's heads. */
static int model_rows(const char *cmd, const prewarm_opts *o, const model_shape *models, size_t num_models,
                      row_list *rows) {
  for (size_t m = 0; m < num_models; m++)
    for (size_t t = 0; t < o->tps.count; t++) {
      int tp = o->tps.value[t];
      int heads = heads_per_rank(models[m].kv_heads, tp);
      if (heads == 0 && models[m].name == NULL)
        return usage_error(cmd, "--tp %d does not fit --kv-heads %d: tp must divide the heads or be a multiple "
                                "of them", tp, models[m].kv_heads);
      if (heads == 0)
        return usage_error(cmd, "--tp %d does not fit --model %s (%d KV heads): tp must divide the heads or be "
                                "a multiple of them", tp, models[m].name, models[m].kv_heads);
      for (size_t d = 0; d < o->dtypes.count; d++) {
        int bytes = DTYPE_BYTES(o->dtypes.value[d]);
        long k = (long)heads * models[m].head_dim * bytes, v = (long)heads * models[m].v_head_dim * bytes;
        if (k > MAX_ROW_BYTES || v > MAX_ROW_BYTES)
          return usage_error(cmd, "--kv-heads/--head-dim: rows of %ld bytes are too large", k > v ? k : v);
        row_list_add(rows, (int)k, (int)v); /* fp8 too: rows quantized before the store */
        kvjit_dtype fp8 = DTYPE_FP8_KIND(o->dtypes.value[d]);
        if (fp8 == KVJIT_DTYPE_BYTES) continue;
        /* An fp8 cache fed from bf16/fp16/fp32 rows, quantized in the store. */
        for (size_t q = 0; q < o->quant_srcs.count; q++) {
          kvjit_dtype src = (kvjit_dtype)o->quant_srcs.value[q];
          if (src == KVJIT_DTYPE_BYTES) continue;
          long elem = src == KVJIT_DTYPE_F32 ? 4 : 2;
          if (k * elem > MAX_ROW_BYTES || v * elem > MAX_ROW_BYTES)
            return usage_error(cmd, "--kv-heads/--head-dim: rows of %ld bytes are too large", (k > v ? k : v) * elem);
          for (size_t sc = 0; sc < o->scales.count; sc++) {
            rows->items[rows->count++] = (row_pair){(int)(k * elem), (int)(v * elem), src, fp8,
                                                    (kvjit_scale_kind)o->scales.value[sc], heads};
          }
        }
      }
    }
  return 0;
}

/* Strip a trailing newline and surrounding blanks in place. */
static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t len = strlen(s);
  while (len > 0 && (s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == ' ' || s[len - 1] == '\t'))
    s[--len] = '\0';
  return s;
}

/* The variants of a manifest's lines (blank and # lines skipped); exit status 2 naming FILE:LINE. */
static int read_manifest(const char *cmd, const char *path, variant_list *out) {
  FILE *file = fopen(path, "r");
  if (file == NULL) return usage_error(cmd, "--manifest '%s': %s", path, strerror(errno));
  char *line = NULL;
  size_t capacity = 0;
  unsigned long number = 0;
  int rc = 0;
  while (rc == 0 && getline(&line, &capacity, file) != -1) {
    number++;
    char *text = trim(line);
    if (text[0] == '\0' || text[0] == '#') continue;
    kvjit_store_kv_variant v;
    kvjit_status status = kvjit_store_kv_variant_parse(&v, text);
    if (status == KVJIT_ERR_NOT_FOUND) continue; /* comment-only after all */
    if (status != KVJIT_OK) {
      const char *detail = kvjit_last_error();
      fprintf(stderr, "kvjit %s: %s:%lu: %s\n", cmd, path, number, detail[0] ? detail : kvjit_status_string(status));
      rc = EXIT_USAGE;
    } else if (!variant_list_add(out, &v)) {
      rc = out_of_memory(cmd);
    }
  }
  if (rc == 0 && ferror(file)) rc = usage_error(cmd, "--manifest '%s': read error", path);
  free(line);
  fclose(file);
  return rc;
}

/* --arch given, else the local GPU's; each must be one NVRTC can build. */
static int resolve_archs(const char *cmd, prewarm_opts *o) {
  if (o->archs.count == 0) {
    int sm = 0;
    kvjit_status status = kvjit_current_sm(&sm);
    if (status != KVJIT_OK) {
      const char *detail = kvjit_last_error();
      return usage_error(cmd, "no --arch and no GPU (%s)", detail[0] ? detail : kvjit_status_string(status));
    }
    o->archs.value[0] = sm;
    o->archs.count = 1;
  }
  int supported[128];
  size_t count = 0;
  if (kvjit_nvrtc_archs(supported, ARRAY_SIZE(supported), &count) != KVJIT_OK) return 0; /* the compile will say */
  if (count > ARRAY_SIZE(supported)) count = ARRAY_SIZE(supported);
  for (size_t a = 0; a < o->archs.count; a++) {
    bool found = false;
    for (size_t i = 0; i < count && !found; i++) found = supported[i] == o->archs.value[a];
    if (!found) {
      char list[1024] = "", name[32];
      size_t used = 0;
      for (size_t i = 0; i < count && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "",
                                 arch_name(supported[i], name, sizeof name));
      return usage_error(cmd, "bad value 'sm_%d' for --arch (NVRTC builds: %s)", o->archs.value[a], list);
    }
  }
  return 0;
}

/* K/V row pairs of the row or model options, or of their defaults. */
static int option_rows(const char *cmd, prewarm_opts *o, bool shape_flags, row_list *rows) {
  /* Defaults: the README's main job, `kvjit prewarm --arch sm_90`. */
  static const int_list default_dtypes = {{2, 1 | KVJIT_DTYPE_FP8_E4M3 << 8}, 2}, default_tps = {{1, 2, 4, 8}, 4},
                        default_quant_srcs = {{KVJIT_DTYPE_BF16}, 1}, default_scales = {{KVJIT_SCALE_PER_TENSOR}, 1};
  if (o->dtypes.count == 0) o->dtypes = default_dtypes;
  if (o->tps.count == 0) o->tps = default_tps;
  if (o->quant_srcs.count == 0) o->quant_srcs = default_quant_srcs;
  if (o->scales.count == 0) o->scales = default_scales;
  /* Room for every pair the lists can make. */
  size_t model_count = o->models.count ? o->models.count : 1;
  size_t room = o->k_rows.count * (o->v_rows.count + 1) +
                model_count * o->tps.count * o->dtypes.count * (1 + o->quant_srcs.count * o->scales.count);
  rows->items = calloc(room, sizeof *rows->items);
  if (rows->items == NULL) return out_of_memory(cmd);

  if (o->k_rows.count != 0) {
    for (size_t k = 0; k < o->k_rows.count; k++) {
      if (!o->have_v_rows) row_list_add(rows, o->k_rows.value[k], o->k_rows.value[k]);
      for (size_t v = 0; o->have_v_rows && v < o->v_rows.count; v++)
        row_list_add(rows, o->k_rows.value[k], o->v_rows.value[v]);
    }
    return 0;
  }
  if (shape_flags) {
    model_shape custom = {NULL, o->kv_heads, o->head_dim, o->v_head_dim >= 0 ? o->v_head_dim : o->head_dim};
    return model_rows(cmd, o, &custom, 1, rows);
  }
  model_shape models[MAX_LIST];
  size_t num_models = o->models.count;
  for (size_t m = 0; m < num_models; m++) models[m] = model_presets[o->models.value[m]];
  if (num_models == 0) {
    models[0] = *find_model("llama-3.1-8b");
    num_models = 1;
  }
  return model_rows(cmd, o, models, num_models, rows);
}

/* Variants of the row or model options, times the kernel choices. */
static int option_variants(const char *cmd, prewarm_opts *o, bool shape_flags, variant_list *out, size_t *skipped) {
  static const int_list default_indexes = {{KVJIT_INDEX_INT32, KVJIT_INDEX_INT64}, 2},
                        default_pdls = {{KVJIT_PDL_AUTO}, 1}, default_splits = {{0}, 1}, default_vecs = {{16}, 1};
  if (o->indexes.count == 0) o->indexes = default_indexes;
  if (o->pdls.count == 0) o->pdls = default_pdls;
  if (o->splits.count == 0) o->splits = default_splits;
  if (o->vecs.count == 0) o->vecs = default_vecs;

  row_list rows = {NULL, 0};
  int rc = option_rows(cmd, o, shape_flags, &rows);
  if (rc == 0) rc = resolve_archs(cmd, o);
  if (rc == 0 && !expand_variants(o, &rows, out, skipped)) rc = out_of_memory(cmd);
  free(rows.items);
  return rc;
}

/* The variant list the options describe, deduplicated. Bad options are reported before a GPU is looked for. */
static int build_variants(const char *cmd, prewarm_opts *o, variant_list *out) {
  bool shape_flags = o->kv_heads != 0 || o->head_dim != 0 || o->v_head_dim >= 0;
  bool model_flags = o->models.count != 0 || shape_flags || o->dtypes.count != 0 || o->tps.count != 0 ||
                     o->quant_srcs.count != 0 || o->scales.count != 0;
  bool choice_flags = o->indexes.count != 0 || o->pdls.count != 0 || o->splits.count != 0 || o->vecs.count != 0;
  if (o->manifest != NULL && (o->k_rows.count != 0 || o->have_v_rows || model_flags || choice_flags))
    return usage_error(cmd, "--manifest replays its lines as written: give only --arch with it");
  if (o->k_rows.count != 0 && model_flags)
    return usage_error(cmd, "--k-row-bytes cannot be combined with --model, --kv-heads, --head-dim, --dtype, --tp, "
                            "--quantize-from or --scale");
  if (o->have_v_rows && o->k_rows.count == 0) return usage_error(cmd, "--v-row-bytes needs --k-row-bytes");
  if (o->models.count != 0 && shape_flags)
    return usage_error(cmd, "--model cannot be combined with --kv-heads, --head-dim or --v-head-dim");
  if (shape_flags && (o->kv_heads == 0 || o->head_dim == 0))
    return usage_error(cmd, "a model shape needs both --kv-heads and --head-dim");

  size_t skipped = 0;
  int rc;
  if (o->manifest != NULL) {
    variant_list lines = {NULL, 0, 0};
    rc = read_manifest(cmd, o->manifest, &lines);
    if (rc == 0) rc = resolve_archs(cmd, o);
    for (size_t i = 0; rc == 0 && i < lines.count; i++)
      for (size_t a = 0; rc == 0 && a < o->archs.count; a++) {
        kvjit_store_kv_variant v = lines.items[i];
        v.arch = o->archs.value[a];
        if (!add_variant(out, &v, &skipped)) rc = out_of_memory(cmd);
      }
    free(lines.items);
  } else {
    rc = option_variants(cmd, o, shape_flags, out, &skipped);
  }
  if (rc != 0) return rc;
  variant_list_dedup(out);
  if (skipped != 0)
    fprintf(stderr, "kvjit %s: note: skipped %zu combinations the op refuses (pdl=on before sm_90, a split "
                    "that does not divide the rows)\n", cmd, skipped);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* prewarm: parallel compiles                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* Shared by the workers; everything below `lock` is guarded by it. */
typedef struct prewarm_run {
  kvjit_context *ctx;
  const variant_list *variants;
  bool progress_bar; /* stderr is a terminal: redraw one line; else one line per variant */
  double start;
  pthread_mutex_t lock;
  size_t next;
  size_t done;
  size_t variants_compiled, variants_cached, variants_failed;
  uint64_t kernels_compiled, kernels_cached;
} prewarm_run;

static void draw_progress_bar(const prewarm_run *run) {
  enum { WIDTH = 30 };
  size_t total = run->variants->count;
  size_t filled = total ? run->done * WIDTH / total : WIDTH;
  char bar[WIDTH + 1];
  for (size_t i = 0; i < WIDTH; i++) bar[i] = i < filled ? '#' : '.';
  bar[WIDTH] = '\0';
  fprintf(stderr, "\r\033[K[%s] %zu/%zu  compiled %zu  cached %zu  failed %zu  %.1fs", bar, run->done, total,
          run->variants_compiled, run->variants_cached, run->variants_failed, now_seconds() - run->start);
  fflush(stderr);
}

/* Called with run->lock held, once per finished variant. */
static void report_variant(prewarm_run *run, const kvjit_store_kv_variant *v, kvjit_status status,
                           const char *detail, unsigned compiled, unsigned cached, double seconds) {
  char name[160];
  describe_variant(v, name, sizeof name);
  run->done++;
  if (status != KVJIT_OK) {
    run->variants_failed++;
    if (run->progress_bar) fputs("\r\033[K", stderr);
    fprintf(stderr, "[%zu/%zu] %s: FAILED: %s [%s]\n", run->done, run->variants->count, name,
            detail[0] ? detail : kvjit_status_string(status), kvjit_status_name(status));
  } else {
    run->kernels_compiled += compiled;
    run->kernels_cached += cached;
    if (compiled != 0) run->variants_compiled++;
    else run->variants_cached++;
    if (!run->progress_bar)
      fprintf(stderr, "[%zu/%zu] %s: %u compiled, %u cached, %.2f s\n", run->done, run->variants->count, name,
              compiled, cached, seconds);
  }
  if (run->progress_bar) draw_progress_bar(run);
}

static void *prewarm_worker(void *arg) {
  prewarm_run *run = arg;
  for (;;) {
    pthread_mutex_lock(&run->lock);
    size_t i = run->next++;
    pthread_mutex_unlock(&run->lock);
    if (i >= run->variants->count) return NULL;

    const kvjit_store_kv_variant *v = &run->variants->items[i];
    unsigned compiled = 0, cached = 0;
    double t0 = now_seconds();
    kvjit_status status = kvjit_store_kv_cache_prewarm(run->ctx, v, &compiled, &cached);
    double seconds = now_seconds() - t0;
    /* The detail is thread-local: copy it before taking the lock. */
    char detail[512] = "";
    if (status != KVJIT_OK) snprintf(detail, sizeof detail, "%s", kvjit_last_error());

    pthread_mutex_lock(&run->lock);
    report_variant(run, v, status, detail, compiled, cached, seconds);
    pthread_mutex_unlock(&run->lock);
  }
}

/* Runs the variants on @p jobs threads (the caller's included); returns the number that failed. */
static size_t prewarm_all(prewarm_run *run, long jobs) {
  pthread_t threads[256];
  size_t started = 0;
  size_t wanted = (size_t)jobs < run->variants->count ? (size_t)jobs : run->variants->count;
  if (wanted > ARRAY_SIZE(threads) + 1) wanted = ARRAY_SIZE(threads) + 1;
  /* A thread that cannot start just leaves its share to the others. */
  while (started + 1 < wanted && pthread_create(&threads[started], NULL, prewarm_worker, run) == 0) started++;
  prewarm_worker(run);
  for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
  if (run->progress_bar && run->done != 0) fputc('\n', stderr);
  return run->variants_failed;
}

static int print_dry_run(const variant_list *variants) {
  printf("# kvjit prewarm --dry-run: %zu variants (one manifest line each)\n", variants->count);
  for (size_t i = 0; i < variants->count; i++) {
    char line[LINE_CAPACITY];
    if (kvjit_store_kv_variant_format(&variants->items[i], line, sizeof line) != KVJIT_OK)
      describe_variant(&variants->items[i], line, sizeof line);
    puts(line);
  }
  return 0;
}

static const char prewarm_help[] =
    "Usage: kvjit prewarm [options]\n"
    "Compile store_kv_cache variants into the cache, for archs that need not be present (no GPU or\n"
    "driver needed). Without any variant option: llama-3.1-8b, bf16 and fp8, tp 1,2,4,8, int32 and\n"
    "int64 indices, pdl auto.\n"
    "\n"
    "Targets:\n"
    "      --arch LIST         archs to build for, e.g. sm_90,sm_100 (default: the local GPU's)\n"
    "Variants from a model (lists are comma-separated; every combination is built, duplicates once):\n"
    "      --model LIST        presets (below)\n"
    "      --kv-heads N        KV heads of a model not in the presets (with --head-dim)\n"
    "      --head-dim N        elements of one K head\n"
    "      --v-head-dim N      elements of one V head (default: --head-dim; 0: K only)\n"
    "      --dtype LIST        cache dtypes: bf16, fp16, fp32, fp8 (= fp8_e4m3), fp8_e5m2\n"
    "                          (default: bf16,fp8); an fp8 cache gets the plain copy of fp8 rows\n"
    "                          and the stores that quantize on the way in (next two options)\n"
    "      --quantize-from LIST  dtypes of the K/V rows an fp8 cache is fed from: bf16, fp16,\n"
    "                          fp32, none (default: bf16)\n"
    "      --scale LIST        quantization scales: tensor, head, none (default: tensor)\n"
    "      --tp LIST           tensor-parallel sizes (default: 1,2,4,8); a row holds kv_heads/tp\n"
    "                          heads; tp above kv_heads must be a multiple of it and leaves one\n"
    "                          (replicated) head per rank, as vLLM and SGLang do\n"
    "Variants from row sizes:\n"
    "      --k-row-bytes LIST  bytes of one token's K row\n"
    "      --v-row-bytes LIST  bytes of one V row (default: same as K; 0: K only)\n"
    "Kernel choices (with either):\n"
    "      --index LIST        int32, int64 (default: both)\n"
    "      --pdl LIST          auto, on, off (default: auto; on is skipped before sm_90)\n"
    "      --split LIST        auto (default: every split the automatic choice may pick), all\n"
    "                          (auto plus every power-of-two split leaving parts of >= vec\n"
    "                          bytes) or split counts that divide the rows\n"
    "      --vec LIST          widest access the pointers allow: 16, 8, 4, 2, 1 (default: 16)\n"
    "Or:\n"
    "      --manifest FILE     replay the variants a run recorded ($KVJIT_MANIFEST; format in\n"
    "                          cache/MANIFEST.md), each line once per --arch\n"
    "\n"
    "  -j, --jobs N            parallel compiles (default: the number of cores)\n"
    "  -n, --dry-run           print the variants as manifest lines; compile nothing\n" CACHE_OPTIONS_HELP
    "  -h, --help              this help\n"
    "\n"
    "Model presets (KV heads x head dim):\n";

static void print_prewarm_help(void) {
  fputs(prewarm_help, stdout);
  for (size_t i = 0; i < ARRAY_SIZE(model_presets); i++) {
    const model_shape *m = &model_presets[i];
    if (m->v_head_dim == 0)
      printf("  %-16s MLA latent, %d elements, K only, same on every rank\n", m->name, m->head_dim);
    else
      printf("  %-16s %d x %d\n", m->name, m->kv_heads, m->head_dim);
  }
  puts("\nExit status: 0 all variants cached, 1 some failed, 2 bad command line.");
}

static int cmd_prewarm(int argc, char **argv) {
  static const char cmd[] = "prewarm";
  enum {
    OPT_ARCH = 300, OPT_MODEL, OPT_KV_HEADS, OPT_HEAD_DIM, OPT_V_HEAD_DIM, OPT_DTYPE, OPT_TP,
    OPT_K_ROW, OPT_V_ROW, OPT_INDEX, OPT_PDL, OPT_SPLIT, OPT_VEC, OPT_MANIFEST, OPT_QUANT_SRC, OPT_SCALE,
  };
  static const struct option long_options[] = {
      {"arch", required_argument, NULL, OPT_ARCH},
      {"model", required_argument, NULL, OPT_MODEL},
      {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
      {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
      {"v-head-dim", required_argument, NULL, OPT_V_HEAD_DIM},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"tp", required_argument, NULL, OPT_TP},
      {"quantize-from", required_argument, NULL, OPT_QUANT_SRC},
      {"scale", required_argument, NULL, OPT_SCALE},
      {"k-row-bytes", required_argument, NULL, OPT_K_ROW},
      {"v-row-bytes", required_argument, NULL, OPT_V_ROW},
      {"index", required_argument, NULL, OPT_INDEX},
      {"pdl", required_argument, NULL, OPT_PDL},
      {"split", required_argument, NULL, OPT_SPLIT},
      {"vec", required_argument, NULL, OPT_VEC},
      {"manifest", required_argument, NULL, OPT_MANIFEST},
      {"jobs", required_argument, NULL, 'j'},
      {"dry-run", no_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'h'},
      CACHE_LONG_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  prewarm_opts o;
  memset(&o, 0, sizeof o);
  o.v_head_dim = -1;
  o.jobs = sysconf(_SC_NPROCESSORS_ONLN);
  if (o.jobs < 1) o.jobs = 1;

  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, ":j:nh", long_options, NULL)) != -1) {
    switch (c) {
    case OPT_ARCH: rc = parse_list(cmd, "--arch", optarg, item_arch, &o.archs); break;
    case OPT_MODEL: rc = parse_list(cmd, "--model", optarg, item_model, &o.models); break;
    case OPT_KV_HEADS: rc = parse_one(cmd, "--kv-heads", optarg, item_positive, &o.kv_heads); break;
    case OPT_HEAD_DIM: rc = parse_one(cmd, "--head-dim", optarg, item_positive, &o.head_dim); break;
    case OPT_V_HEAD_DIM: rc = parse_one(cmd, "--v-head-dim", optarg, item_head_dim, &o.v_head_dim); break;
    case OPT_DTYPE: rc = parse_list(cmd, "--dtype", optarg, item_dtype, &o.dtypes); break;
    case OPT_TP: rc = parse_list(cmd, "--tp", optarg, item_positive, &o.tps); break;
    case OPT_QUANT_SRC: rc = parse_list(cmd, "--quantize-from", optarg, item_quant_src, &o.quant_srcs); break;
    case OPT_SCALE: rc = parse_list(cmd, "--scale", optarg, item_scale, &o.scales); break;
    case OPT_K_ROW: rc = parse_list(cmd, "--k-row-bytes", optarg, item_k_row_bytes, &o.k_rows); break;
    case OPT_V_ROW:
      rc = parse_list(cmd, "--v-row-bytes", optarg, item_v_row_bytes, &o.v_rows);
      o.have_v_rows = true;
      break;
    case OPT_INDEX: rc = parse_list(cmd, "--index", optarg, item_index, &o.indexes); break;
    case OPT_PDL: rc = parse_list(cmd, "--pdl", optarg, item_pdl, &o.pdls); break;
    case OPT_SPLIT: rc = parse_list(cmd, "--split", optarg, item_split, &o.splits); break;
    case OPT_VEC: rc = parse_list(cmd, "--vec", optarg, item_vec, &o.vecs); break;
    case OPT_MANIFEST: o.manifest = optarg; break;
    case 'j':
      if (!parse_int(optarg, 1, 1024, &o.jobs))
        rc = usage_error(cmd, "bad value '%s' for -j/--jobs (expected 1 to 1024)", optarg);
      break;
    case 'n': o.dry_run = true; break;
    case 'h': print_prewarm_help(); return 0;
    default:
      if (!cache_option(c, &o.cache)) rc = getopt_error(cmd, c, argv);
      break;
    }
  }
  if (rc == 0) rc = check_no_operands(cmd, argc, argv);
  if (rc != 0) return rc;

  variant_list variants = {NULL, 0, 0};
  rc = build_variants(cmd, &o, &variants);
  if (rc == 0 && o.dry_run) rc = print_dry_run(&variants);
  if (rc != 0 || o.dry_run) {
    free(variants.items);
    return rc;
  }

  kvjit_context *ctx = NULL;
  rc = open_context(cmd, &o.cache, &ctx);
  if (rc != 0) {
    free(variants.items);
    return rc;
  }
  /* Compiling into a memory-only context would be thrown away at exit. */
  kvjit_cache_info info;
  rc = need_write_dir(cmd, ctx, &info);
  if (rc != 0) {
    kvjit_context_destroy(ctx);
    free(variants.items);
    return rc;
  }

  prewarm_run run = {
      .ctx = ctx,
      .variants = &variants,
      .progress_bar = isatty(STDERR_FILENO) != 0,
      .start = now_seconds(),
  };
  pthread_mutex_init(&run.lock, NULL);
  size_t failed = prewarm_all(&run, o.jobs);
  pthread_mutex_destroy(&run.lock);

  printf("prewarm: %zu variants: %zu compiled, %zu already cached, %zu failed; kernels: %" PRIu64
         " compiled, %" PRIu64 " already cached; %.2f s with -j %ld\n",
         variants.count, run.variants_compiled, run.variants_cached, failed, run.kernels_compiled,
         run.kernels_cached, now_seconds() - run.start, o.jobs);
  kvjit_context_destroy(ctx);
  free(variants.items);
  return failed != 0 ? EXIT_FAILURE : 0;
}

/* ------------------------------------------------------------------------------------------ */
/* cache                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* An entry copied out of the kvjit_cache_list() callback, whose strings live only for the call. */
typedef struct entry_row {
  char *path, *key, *program, *kernels;
  int arch;
  uint64_t bytes;
  int64_t mtime;
  bool read_only; /* found in a --cache-path dir, not the writable one */
  kvjit_status status;
} entry_row;

typedef struct entry_table {
  entry_row *rows;
  size_t count, capacity;
  const char *write_dir; /* to tell the writable dir's entries from the read-only ones */
  bool out_of_memory;
} entry_table;

static bool under_dir(const char *path, const char *dir) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  return strncmp(path, dir, len) == 0 && path[len] == '/';
}

static int collect_entry(const kvjit_cache_entry_info *entry, void *user) {
  entry_table *table = user;
  if (table->count == table->capacity) {
    size_t capacity = table->capacity ? table->capacity * 2 : 64;
    entry_row *rows = realloc(table->rows, capacity * sizeof *rows);
    if (rows == NULL) goto oom;
    table->rows = rows;
    table->capacity = capacity;
  }
  entry_row row = {
      .path = strdup(entry->path ? entry->path : ""),
      .key = strdup(entry->key ? entry->key : "?"),
      .program = strdup(entry->program ? entry->program : "?"),
      .kernels = strdup(entry->kernels ? entry->kernels : ""),
      .arch = entry->arch,
      .bytes = entry->bytes,
      .mtime = entry->mtime,
      .read_only = table->write_dir == NULL || entry->path == NULL || !under_dir(entry->path, table->write_dir),
      .status = entry->status,
  };
  if (row.path == NULL || row.key == NULL || row.program == NULL || row.kernels == NULL) {
    free(row.path);
    free(row.key);
    free(row.program);
    free(row.kernels);
    goto oom;
  }
  table->rows[table->count++] = row;
  return 0;
oom:
  table->out_of_memory = true;
  return 1;
}

static void entry_table_free(entry_table *table) {
  for (size_t i = 0; i < table->count; i++) {
    free(table->rows[i].path);
    free(table->rows[i].key);
    free(table->rows[i].program);
    free(table->rows[i].kernels);
  }
  free(table->rows);
}

static int compare_rows(const void *pa, const void *pb) {
  const entry_row *a = pa, *b = pb;
  int c;
  if ((c = (a->read_only > b->read_only) - (a->read_only < b->read_only)) != 0) return c;
  if ((c = (a->arch > b->arch) - (a->arch < b->arch)) != 0) return c;
  if ((c = strcmp(a->program, b->program)) != 0) return c;
  return strcmp(a->kernels, b->kernels);
}

/* kvjit_cache_list() into @p table; exit status. */
static int list_entries(const char *cmd, kvjit_context *ctx, bool all, bool verify, entry_table *table,
                        uint64_t *bad) {
  kvjit_cache_info info;
  kvjit_status status = kvjit_context_cache_info(ctx, &info);
  if (status != KVJIT_OK) return library_error(cmd, "cache info", status);
  table->write_dir = info.write_dir;
  status = kvjit_cache_list(ctx, all, verify, collect_entry, table, bad);
  if (table->out_of_memory) return out_of_memory(cmd);
  if (status != KVJIT_OK) return library_error(cmd, "listing the cache", status);
  if (table->count > 1) qsort(table->rows, table->count, sizeof *table->rows, compare_rows); /* rows is NULL when empty */
  return 0;
}

typedef struct cache_cmd_opts {
  cache_opts cache;
  bool all;
  bool long_format;
  bool have_max_size;
  uint64_t max_size;
} cache_cmd_opts;

static int cache_ls(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  entry_table table = {0};
  int rc = list_entries(cmd, ctx, o->all, false, &table, NULL);
  if (rc != 0) {
    entry_table_free(&table);
    return rc;
  }
  int width = 7;
  for (size_t i = 0; i < table.count; i++) {
    int len = (int)strlen(table.rows[i].program);
    if (len > width) width = len < 48 ? len : 48;
  }
  uint64_t total = 0;
  int64_t now = (int64_t)time(NULL);
  /* The key's first 12 hex digits tell entries of one program apart; --long prints the path. */
  enum { KEY_DIGITS = 12, INDENT = 11 + 1 + 7 + 1 + 5 + 1 + 3 + 1 + KEY_DIGITS };
  if (table.count != 0)
    printf("%-11s %7s %5s %-3s %-*s %-*s %s\n", "ARCH", "SIZE", "AGE", "DIR", KEY_DIGITS, "KEY", width, "PROGRAM",
           o->long_format ? "KERNELS / PATH" : "KERNELS");
  for (size_t i = 0; i < table.count; i++) {
    const entry_row *r = &table.rows[i];
    char arch[32], size[32], age[32];
    printf("%-11s %7s %5s %-3s %-*.*s %-*s %s\n", arch_name(r->arch, arch, sizeof arch),
           human_size(r->bytes, size, sizeof size), human_age(now - r->mtime, age, sizeof age),
           r->read_only ? "ro" : "rw", KEY_DIGITS, KEY_DIGITS, r->key, width, r->program, r->kernels);
    if (o->long_format) printf("%*s %s\n", INDENT + 1 + width, "", r->path);
    total += r->bytes;
  }
  char size[32];
  printf("%zu entries, %s\n", table.count, human_size(total, size, sizeof size));
  entry_table_free(&table);
  return 0;
}

static int cache_verify(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  entry_table table = {0};
  uint64_t bad = 0;
  int rc = list_entries(cmd, ctx, o->all, true, &table, &bad);
  if (rc == 0) {
    for (size_t i = 0; i < table.count; i++) {
      const entry_row *r = &table.rows[i];
      if (r->status == KVJIT_OK) continue;
      printf("bad: %s: %s (%s)\n", r->path, kvjit_status_string(r->status),
             r->read_only ? "read-only dir, left in place" : "quarantined");
    }
    printf("verified %zu entries: %" PRIu64 " bad\n", table.count, bad);
    if (bad != 0) rc = EXIT_FAILURE;
  }
  entry_table_free(&table);
  return rc;
}

static int cache_prune(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  kvjit_cache_info info;
  int rc = need_write_dir(cmd, ctx, &info);
  if (rc != 0) return rc;
  uint64_t max_bytes = o->have_max_size ? o->max_size : info.max_bytes;
  uint64_t entries = 0, bytes = 0;
  kvjit_status status = kvjit_cache_prune(ctx, max_bytes, &entries, &bytes);
  if (status != KVJIT_OK) return library_error(cmd, "pruning the cache", status);
  char limit[32], removed[32];
  printf("pruned %s to at most %s: removed %" PRIu64 " entries, %s\n", info.write_dir,
         human_size(max_bytes, limit, sizeof limit), entries, human_size(bytes, removed, sizeof removed));
  return 0;
}

static int cache_clear(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  (void)o;
  kvjit_cache_info info;
  int rc = need_write_dir(cmd, ctx, &info);
  if (rc != 0) return rc;
  uint64_t entries = 0;
  kvjit_status status = kvjit_cache_clear(ctx, &entries);
  if (status != KVJIT_OK) return library_error(cmd, "clearing the cache", status);
  printf("removed %" PRIu64 " entries from %s\n", entries, info.write_dir);
  return 0;
}

/* Calls @p fn once per dir of a colon-separated list (empty items skipped). */
static void for_each_dir(const char *dirs, void (*fn)(const char *dir, void *user), void *user) {
  if (dirs == NULL) return;
  const char *p = dirs;
  while (*p != '\0') {
    size_t len = strcspn(p, ":");
    if (len != 0 && len < PATH_MAX) {
      char dir[PATH_MAX];
      memcpy(dir, p, len);
      dir[len] = '\0';
      fn(dir, user);
    }
    p += len;
    if (*p == ':') p++;
  }
}

static void print_read_dir(const char *dir, void *user) {
  (void)user;
  printf("read:  %s\n", dir);
}

static int cache_path(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o) {
  (void)o;
  kvjit_cache_info info;
  kvjit_status status = kvjit_context_cache_info(ctx, &info);
  if (status != KVJIT_OK) return library_error(cmd, "cache info", status);
  if (info.write_dir != NULL)
    printf("write: %s\n", info.write_dir);
  else
    printf("write: none (memory only: %s)\n", info.degraded_reason ? info.degraded_reason : "disabled");
  for_each_dir(info.read_dirs, print_read_dir, NULL);
  return 0;
}

typedef int (*cache_action)(const char *cmd, kvjit_context *ctx, const cache_cmd_opts *o);

static const struct cache_command {
  const char *name;
  cache_action action;
  const char *summary;
  const char *help; /* options beyond the cache ones */
} cache_commands[] = {
    {"ls", cache_ls, "list entries: arch, size, age, dir (rw/ro), program, kernels",
     "  -a, --all               also list the read-only dirs ($KVJIT_CACHE_PATH)\n"
     "  -l, --long              also print each entry's path\n"},
    {"verify", cache_verify, "check every entry's checksum; quarantine bad ones (exit 1 if any)",
     "  -a, --all               also check the read-only dirs (bad ones are reported, not moved)\n"},
    {"prune", cache_prune, "evict least recently used entries down to a size",
     "      --max-size SIZE     e.g. 500M, 2G (K, M, G, T: powers of 1024; default: the budget,\n"
     "                          $KVJIT_CACHE_MAX_SIZE or 2G)\n"},
    {"clear", cache_clear, "remove every entry of the writable dir", ""},
    {"path", cache_path, "print the writable dir and the read-only dirs", ""},
};

static void print_cache_help(FILE *out) {
  fputs("Usage: kvjit cache COMMAND [options]\n\nCommands:\n", out);
  for (size_t i = 0; i < ARRAY_SIZE(cache_commands); i++)
    fprintf(out, "  %-8s %s\n", cache_commands[i].name, cache_commands[i].summary);
  fputs("\nEach takes --cache-dir DIR, --cache-path DIRS and --help.\n", out);
}

static int cmd_cache(int argc, char **argv) {
  if (argc < 2) {
    print_cache_help(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    print_cache_help(stdout);
    return 0;
  }
  const struct cache_command *command = NULL;
  for (size_t i = 0; i < ARRAY_SIZE(cache_commands) && command == NULL; i++)
    if (strcmp(argv[1], cache_commands[i].name) == 0) command = &cache_commands[i];
  if (command == NULL) return usage_error("cache", "unknown command '%s'", argv[1]);

  char cmd[32];
  snprintf(cmd, sizeof cmd, "cache %s", command->name);
  enum { OPT_MAX_SIZE = 300 };
  static const struct option long_options[] = {
      {"all", no_argument, NULL, 'a'},
      {"long", no_argument, NULL, 'l'},
      {"max-size", required_argument, NULL, OPT_MAX_SIZE},
      {"help", no_argument, NULL, 'h'},
      CACHE_LONG_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  bool is_ls = command->action == cache_ls, is_verify = command->action == cache_verify;
  cache_cmd_opts o;
  memset(&o, 0, sizeof o);
  argc--;
  argv++;
  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, ":alh", long_options, NULL)) != -1) {
    if (c == 'h') {
      printf("Usage: kvjit %s [options]\n%s.\n\nOptions:\n%s" CACHE_OPTIONS_HELP
             "  -h, --help              this help\n",
             cmd, command->summary, command->help);
      return 0;
    }
    if (c == 'a' && (is_ls || is_verify)) o.all = true;
    else if (c == 'l' && is_ls) o.long_format = true;
    else if (c == OPT_MAX_SIZE && command->action == cache_prune) {
      o.have_max_size = true;
      if (!parse_size(optarg, &o.max_size))
        rc = usage_error(cmd, "bad value '%s' for --max-size (expected a size such as 500M or 2G)", optarg);
    } else if (c == '?' || c == ':') {
      rc = getopt_error(cmd, c, argv);
    } else if (!cache_option(c, &o.cache)) {
      /* An option another cache command takes. */
      const char *name = "?";
      for (const struct option *opt = long_options; opt->name != NULL; opt++)
        if (opt->val == c) name = opt->name;
      rc = usage_error(cmd, "--%s does not apply here", name);
    }
  }
  if (rc == 0) rc = check_no_operands(cmd, argc, argv);
  if (rc != 0) return rc;

  kvjit_context *ctx = NULL;
  rc = open_context(cmd, &o.cache, &ctx);
  if (rc != 0) return rc;
  rc = command->action(cmd, ctx, &o);
  kvjit_context_destroy(ctx);
  return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* info                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct dir_usage {
  const entry_table *table;
  bool read_only;
} dir_usage;

static void print_dir_usage(const char *dir, void *user) {
  const dir_usage *u = user;
  uint64_t entries = 0, bytes = 0;
  for (size_t i = 0; i < u->table->count; i++) {
    if (!under_dir(u->table->rows[i].path, dir)) continue;
    entries++;
    bytes += u->table->rows[i].bytes;
  }
  char size[32];
  const char *state = access(dir, F_OK) != 0 ? "missing" : access(dir, W_OK) == 0 ? "writable" : "not writable";
  printf("  %s %s: %" PRIu64 " entries, %s, %s\n", u->read_only ? "read: " : "write:", dir, entries,
         human_size(bytes, size, sizeof size), state);
}

static int cmd_info(int argc, char **argv) {
  static const char cmd[] = "info";
  static const struct option long_options[] = {
      {"help", no_argument, NULL, 'h'},
      CACHE_LONG_OPTIONS,
      {NULL, 0, NULL, 0},
  };
  cache_opts cache = {NULL, NULL};
  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    if (c == 'h') {
      fputs("Usage: kvjit info [options]\n"
            "Library, NVRTC and driver versions, the archs NVRTC builds, GPUs, cache dirs.\n\nOptions:\n"
            CACHE_OPTIONS_HELP "  -h, --help              this help\n",
            stdout);
      return 0;
    }
    if (!cache_option(c, &cache)) rc = getopt_error(cmd, c, argv);
  }
  if (rc == 0) rc = check_no_operands(cmd, argc, argv);
  if (rc != 0) return rc;

  printf("kvjit:   %s\n", kvjit_version_string());

  int major = 0, minor = 0;
  kvjit_status status = kvjit_nvrtc_version(&major, &minor);
  if (status != KVJIT_OK) return library_error(cmd, "NVRTC version", status);
  int archs[128];
  size_t count = 0;
  status = kvjit_nvrtc_archs(archs, ARRAY_SIZE(archs), &count);
  if (status != KVJIT_OK) return library_error(cmd, "NVRTC archs", status);
  printf("nvrtc:   %d.%d, builds", major, minor);
  for (size_t i = 0; i < count && i < ARRAY_SIZE(archs); i++) printf(" sm_%d", archs[i]);
  putchar('\n');

  int driver = 0;
  status = kvjit_driver_version(&driver);
  if (status == KVJIT_ERR_NO_DRIVER) {
    puts("driver:  none");
  } else if (status != KVJIT_OK) {
    rc = library_error(cmd, "driver version", status);
  } else {
    printf("driver:  %d.%d\n", driver / 1000, driver % 1000 / 10);
    int devices = 0;
    status = kvjit_device_count(&devices);
    if (status != KVJIT_OK && status != KVJIT_ERR_NO_DEVICE) rc = library_error(cmd, "device count", status);
    for (int i = 0; i < devices; i++) {
      char name[256];
      int sm = 0;
      status = kvjit_device_info(i, name, sizeof name, &sm);
      if (status != KVJIT_OK) rc = library_error(cmd, "device info", status);
      else printf("gpu %d:   %s (sm_%d)\n", i, name, sm);
    }
    if (devices == 0) puts("gpus:    none");
  }

  kvjit_context *ctx = NULL;
  int ctx_rc = open_context(cmd, &cache, &ctx);
  if (ctx_rc != 0) return ctx_rc;
  entry_table table = {0};
  ctx_rc = list_entries(cmd, ctx, true, false, &table, NULL);
  if (ctx_rc == 0) {
    kvjit_cache_info info;
    kvjit_context_cache_info(ctx, &info); /* succeeded inside list_entries() */
    char budget[32];
    printf("cache:   budget %s\n", human_size(info.max_bytes, budget, sizeof budget));
    dir_usage write = {&table, false}, read = {&table, true};
    if (info.write_dir != NULL)
      print_dir_usage(info.write_dir, &write);
    else
      printf("  write: none (memory only: %s)\n", info.degraded_reason ? info.degraded_reason : "disabled");
    for_each_dir(info.read_dirs, print_dir_usage, &read);
  }
  entry_table_free(&table);
  kvjit_context_destroy(ctx);
  return rc != 0 ? rc : ctx_rc;
}

/* ------------------------------------------------------------------------------------------ */
/* main                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static void print_usage(FILE *out) {
  fputs("Usage: kvjit COMMAND [options]\n"
        "Compile kvjit's kernels ahead of time and maintain the cubin cache.\n"
        "\n"
        "Commands:\n"
        "  prewarm     compile store_kv_cache variants into the cache for given archs (no GPU needed)\n"
        "  cache       ls | verify | prune | clear | path\n"
        "  info        versions, archs NVRTC builds, driver and GPUs, cache dirs\n"
        "\n"
        "  -h, --help      this help ('kvjit COMMAND --help' for a command's)\n"
        "  -V, --version   print the library version\n"
        "\n"
        "Ship a cache: 'kvjit prewarm --arch sm_90 --cache-dir DIR' on a build machine, copy DIR into\n"
        "the image, and run the server with KVJIT_CACHE_PATH=DIR: it starts with no compile.\n",
        out);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return EXIT_USAGE;
  }
  const char *command = argv[1];
  if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0 || strcmp(command, "help") == 0) {
    print_usage(stdout);
    return 0;
  }
  if (strcmp(command, "-V") == 0 || strcmp(command, "--version") == 0) {
    printf("kvjit %s\n", kvjit_version_string());
    return 0;
  }
  /* getopt_long() then sees the command as argv[0] and only its options. */
  opterr = 0;
  if (strcmp(command, "prewarm") == 0) return cmd_prewarm(argc - 1, argv + 1);
  if (strcmp(command, "cache") == 0) return cmd_cache(argc - 1, argv + 1);
  if (strcmp(command, "info") == 0) return cmd_info(argc - 1, argv + 1);
  fprintf(stderr, "kvjit: unknown command '%s' (see 'kvjit --help')\n", command);
  return EXIT_USAGE;
}
