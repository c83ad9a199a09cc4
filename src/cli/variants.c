/*
 * kvjit prewarm's variant list: model presets and row sizes times the kernel choices of the op
 * (--op; its field table says which choices there are), manifest replay (lines of any op),
 * deduplication, and the command line that describes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "items.h"
#include "layouts.h"
#include "manifest.h"
#include "models.h"
#include "variant_list.h"
#include "variants.h"

/* ------------------------------------------------------------------------------------------ */
/* prewarm: variants                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* Index of a preset, as an item of --model. */
static const char *item_model(const char *item, int *value, char *why, size_t capacity) {
  const model_shape *model = model_find(item);
  if (model != NULL) {
    *value = (int)model_index(model);
    return NULL;
  }
  const char *near = model_nearest(item);
  if (near != NULL) snprintf(why, capacity, "did you mean %s?", near);
  else snprintf(why, capacity, "expected one of the presets, or --kv-heads and --head-dim for another model");
  return why;
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

/* A K/V row pair before the arch and the kernel choices multiply it; quantizing rows (an fp8
 * cache fed from bf16/fp16/fp32) count source bytes. */
typedef struct row_pair {
  int k;
  int v;
  kvjit_dtype src, cache; /* BYTES, BYTES: a plain copy */
  kvjit_scale_kind scale;
  int heads; /* per-head scales: heads per row */
  /* a model's rows: one rank's heads, their elements and the cache's element bytes (0: rows by size) */
  int rank_heads, head_dim, v_head_dim, cache_elem;
} row_pair;

/* Room for every combination the lists allow (models x tps x dtypes x (1 + sources x scales));
 * repeats go at the end. */
typedef struct row_list {
  row_pair *items; /* room for row_list_room() pairs */
  size_t count;
} row_list;

static void row_list_add(row_list *rows, int k, int v) {
  rows->items[rows->count++] = (row_pair){k, v, KVJIT_DTYPE_BYTES, KVJIT_DTYPE_BYTES, KVJIT_SCALE_NONE, 0, 0, 0, 0, 0};
}

/* What the expansion skipped: combinations the op refuses (nothing to build), and the first reason. */
typedef struct skip_note {
  size_t count;
  char first[256];
} skip_note;

/* Adds @p v when the op accepts it (kvjit_variant_check(), which also makes it canonical). */
static bool add_variant(variant_list *out, kvjit_variant v, skip_note *skipped) {
  if (kvjit_variant_check(&v) == KVJIT_OK) return variant_list_add(out, &v);
  if (skipped->count++ == 0) snprintf(skipped->first, sizeof skipped->first, "%s", kvjit_last_error());
  return true;
}

/*
 * Adds @p base with its split, or for --split all: the automatic choice plus every power-of-two
 * split that divides both rows into parts of at least one vector.
 */
static bool add_splits(variant_list *out, kvjit_variant base, skip_note *skipped) {
  const kvjit_op_info *op = base.op;
  const int fs = op_field(op, "split"), fv = op_field(op, "vec"), fk = op_field(op, "k_row_bytes"),
            fw = op_field(op, "v_row_bytes");
  if (fs < 0 || base.values[fs] != SPLIT_ALL) return add_variant(out, base, skipped);
  base.values[fs] = 0;
  if (!add_variant(out, base, skipped)) return false;
  const int64_t vec = fv >= 0 ? base.values[fv] : 16, k = base.values[fk], v = fw >= 0 ? base.values[fw] : 0;
  for (int64_t split = 1; k / split >= vec; split *= 2) {
    if (k % split != 0 || v % split != 0) break;
    if (v != 0 && v / split < vec) break;
    base.values[fs] = split;
    if (!add_variant(out, base, skipped)) return false;
  }
  return true;
}

/* @p base in each --layout preset (x --block-size for the paged ones) of its row's model shape
 * (flat: as it is). */
static bool add_layouts(const prewarm_opts *o, const row_pair *row, kvjit_variant base, variant_list *out,
                        skip_note *skipped) {
  for (size_t l = 0; l < o->layouts.count; l++)
    for (size_t b = 0; b < o->block_sizes.count; b++) {
      const int preset = o->layouts.value[l];
      if (b > 0 && !layout_preset_paged(preset)) break; /* the block size does not change it: once */
      kvjit_layout room[2];
      const kvjit_layout *layouts[4];
      const size_t count = layout_preset_layouts(preset, &base, row->rank_heads, row->head_dim, row->v_head_dim,
                                                 row->cache_elem, o->block_sizes.value[b], room, layouts);
      if (count == 0) {
        if (!add_splits(out, base, skipped)) return false;
        continue;
      }
      kvjit_variant laid = base;
      if (kvjit_variant_set_layouts(&laid, layouts, count) != KVJIT_OK) {
        if (skipped->count++ == 0) snprintf(skipped->first, sizeof skipped->first, "%s", kvjit_last_error());
        continue;
      }
      if (!add_splits(out, laid, skipped)) return false;
    }
  return true;
}

/* Every combination of archs x rows x each choice field's list (the fields with a prewarm flag). */
static bool expand_variants(const prewarm_opts *o, const row_list *rows, variant_list *out, skip_note *skipped) {
  const kvjit_op_info *op = o->op;
  const int fk = op_field(op, "k_row_bytes"), fv = op_field(op, "v_row_bytes"), fd = op_field(op, "dtype"),
            fc = op_field(op, "cache_dtype"), fsc = op_field(op, "scale"), fh = op_field(op, "num_heads");
  size_t at[KVJIT_VARIANT_MAX_FIELDS] = {0};
  for (size_t a = 0; a < o->archs.count; a++)
    for (size_t r = 0; r < rows->count; r++) {
      const row_pair *row = &rows->items[r];
      memset(at, 0, sizeof at);
      for (;;) {
        kvjit_variant v;
        if (kvjit_variant_init(&v, op) != KVJIT_OK) return false;
        v.values[0] = o->archs.value[a];
        if (fk >= 0) v.values[fk] = row->k;
        if (fv >= 0) v.values[fv] = row->v;
        if (fd >= 0 && fc >= 0) {
          v.values[fd] = row->src;
          v.values[fc] = row->cache;
        }
        if (fsc >= 0) v.values[fsc] = row->scale;
        if (fh >= 0) v.values[fh] = row->scale == KVJIT_SCALE_PER_HEAD ? row->heads : 0;
        for (size_t f = 0; f < op->num_fields; f++)
          if (o->choices[f].count) v.values[f] = o->choices[f].value[at[f]];
        if (!add_layouts(o, row, v, out, skipped)) return false;
        /* The next combination of the choice lists (an odometer over the fields). */
        size_t f = 0;
        for (; f < op->num_fields; f++) {
          if (o->choices[f].count == 0) continue;
          if (++at[f] < o->choices[f].count) break;
          at[f] = 0;
        }
        if (f == op->num_fields) break;
      }
    }
  return true;
}

/* Rows of every model x dtype x tp; exit status 2 when a tp does not fit a model's heads. */
static int model_rows(const char *cmd, const prewarm_opts *o, const model_shape *models, size_t num_models,
                      row_list *rows) {
  const bool quantizing = op_field(o->op, "cache_dtype") >= 0;
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
        row_pair *plain = &rows->items[rows->count - 1];
        plain->rank_heads = heads;
        plain->head_dim = models[m].head_dim;
        plain->v_head_dim = models[m].v_head_dim;
        plain->cache_elem = bytes;
        kvjit_dtype fp8 = DTYPE_FP8_KIND(o->dtypes.value[d]);
        if (fp8 == KVJIT_DTYPE_BYTES || !quantizing) continue;
        /* An fp8 cache fed from bf16/fp16/fp32 rows, quantized in the store. */
        for (size_t q = 0; q < o->quant_srcs.count; q++) {
          kvjit_dtype src = (kvjit_dtype)o->quant_srcs.value[q];
          if (src == KVJIT_DTYPE_BYTES) continue;
          long elem = src == KVJIT_DTYPE_F32 ? 4 : 2;
          if (k * elem > MAX_ROW_BYTES || v * elem > MAX_ROW_BYTES)
            return usage_error(cmd, "--kv-heads/--head-dim: rows of %ld bytes are too large", (k > v ? k : v) * elem);
          for (size_t sc = 0; sc < o->scales.count; sc++) {
            rows->items[rows->count++] = (row_pair){(int)(k * elem), (int)(v * elem), src, fp8,
                                                    (kvjit_scale_kind)o->scales.value[sc], heads, heads,
                                                    models[m].head_dim, models[m].v_head_dim, 1};
          }
        }
      }
    }
  return 0;
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
  for (size_t m = 0; m < num_models; m++) models[m] = *model_at((size_t)o->models.value[m]);
  if (num_models == 0) {
    models[0] = *model_find("llama-3.1-8b");
    num_models = 1;
  }
  return model_rows(cmd, o, models, num_models, rows);
}

/* ---- the op's choice fields ------------------------------------------------------------------ */

/* One item of a choice field's list: a word, a number in range, and for split "auto" / "all". */
static const char *item_field(const kvjit_op_field *f, const char *item, int *value, char *expected, size_t cap) {
  if (f->kind == KVJIT_FIELD_WORD) {
    size_t used = 0, shown = 0, total = 0;
    for (size_t i = 0; i < f->num_words; i++) total += f->words[i] != NULL;
    expected[0] = '\0';
    for (size_t i = 0; i < f->num_words; i++) {
      if (f->words[i] == NULL) continue;
      if (strcmp(f->words[i], item) == 0) {
        *value = (int)i;
        return NULL;
      }
      const char *sep = shown == 0 ? "" : shown + 1 == total ? " or " : ", ";
      if (used < cap) used += (size_t)snprintf(expected + used, cap - used, "%s%s", sep, f->words[i]);
      shown++;
    }
    return expected;
  }
  long v;
  if (strcmp(f->name, "split") == 0) {
    if (strcmp(item, "auto") == 0) {
      *value = 0;
      return NULL;
    }
    if (strcmp(item, "all") == 0) {
      *value = SPLIT_ALL;
      return NULL;
    }
    if (parse_int(item, 1, (long)f->max, &v)) {
      *value = (int)v;
      return NULL;
    }
    return "auto, all or a split count that divides the rows";
  }
  const bool pow2 = (f->flags & KVJIT_FIELD_POW2) != 0;
  if (parse_int(item, (long)f->min, (long)f->max, &v) && (!pow2 || (v & (v - 1)) == 0)) {
    *value = (int)v;
    return NULL;
  }
  if (pow2) snprintf(expected, cap, "a power of two %lld to %lld", (long long)f->min, (long long)f->max);
  else snprintf(expected, cap, "%lld to %lld", (long long)f->min, (long long)f->max);
  return expected;
}

/* Parse "a,b,c" of choice field @p f into @p out. */
static int parse_field_list(const char *cmd, const char *flag, const char *text, const kvjit_op_field *f,
                            int_list *out) {
  out->count = 0;
  const char *p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    char item[64], expected[256];
    if (len == 0) return usage_error(cmd, "%s '%s': empty item", flag, text);
    if (len >= sizeof item) return usage_error(cmd, "%s '%.*s': too long", flag, (int)len, p);
    memcpy(item, p, len);
    item[len] = '\0';
    if (out->count == MAX_LIST) return usage_error(cmd, "%s '%s': more than %d items", flag, text, MAX_LIST);
    const char *why = item_field(f, item, &out->value[out->count], expected, sizeof expected);
    if (why != NULL) return usage_error(cmd, "bad value '%s' for %s (expected %s)", item, flag, why);
    out->count++;
    if (p[len] == '\0') return 0;
    p += len + 1;
  }
}

/* The flag of a choice field: "--" and its name with '_' as '-'. */
static const char *field_flag(const char *name, char *buf, size_t capacity) {
  snprintf(buf, capacity, "--%s", name);
  for (char *c = buf + 2; *c; c++)
    if (*c == '_') *c = '-';
  return buf;
}

/* Each choice field of the op: the list its flag gave, else the field's prewarm default. */
static int resolve_choices(const char *cmd, prewarm_opts *o) {
  for (size_t i = 0; i < o->num_flags; i++) {
    if (o->flag_text[i] == NULL) continue;
    int f = op_field(o->op, o->flag_fields[i]);
    char flag[64];
    field_flag(o->flag_fields[i], flag, sizeof flag);
    if (f < 0 || o->op->fields[f].prewarm == NULL)
      return usage_error(cmd, "%s is not a field of %s (see --op and 'kvjit prewarm --help')", flag, o->op->name);
    int rc = parse_field_list(cmd, flag, o->flag_text[i], &o->op->fields[f], &o->choices[f]);
    if (rc != 0) return rc;
  }
  for (size_t f = 0; f < o->op->num_fields; f++) {
    const kvjit_op_field *field = &o->op->fields[f];
    if (field->prewarm == NULL || o->choices[f].count != 0) continue;
    char flag[64];
    int rc = parse_field_list(cmd, field_flag(field->name, flag, sizeof flag), field->prewarm, field, &o->choices[f]);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Variants of the row or model options, times the kernel choices. */
static int option_variants(const char *cmd, prewarm_opts *o, bool shape_flags, variant_list *out, skip_note *skipped) {
  row_list rows = {NULL, 0};
  int rc = option_rows(cmd, o, shape_flags, &rows);
  if (rc == 0) rc = resolve_archs(cmd, o);
  if (rc == 0 && !expand_variants(o, &rows, out, skipped)) rc = out_of_memory(cmd);
  free(rows.items);
  return rc;
}

/* The variant list the options describe, deduplicated. Bad options are reported before a GPU is looked for. */
int build_variants(const char *cmd, prewarm_opts *o, variant_list *out) {
  bool shape_flags = o->kv_heads != 0 || o->head_dim != 0 || o->v_head_dim >= 0;
  bool model_flags = o->models.count != 0 || shape_flags || o->dtypes.count != 0 || o->tps.count != 0 ||
                     o->quant_srcs.count != 0 || o->scales.count != 0;
  bool choice_flags = false;
  for (size_t i = 0; i < o->num_flags; i++) choice_flags |= o->flag_text[i] != NULL;
  if (o->manifest != NULL && (o->k_rows.count != 0 || o->have_v_rows || model_flags || choice_flags || o->op_given))
    return usage_error(cmd, "--manifest replays its lines as written: give only --arch with it");
  if (o->k_rows.count != 0 && model_flags)
    return usage_error(cmd, "--k-row-bytes cannot be combined with --model, --kv-heads, --head-dim, --dtype, --tp, "
                            "--quantize-from or --scale");
  if (o->have_v_rows && o->k_rows.count == 0) return usage_error(cmd, "--v-row-bytes needs --k-row-bytes");
  if (o->models.count != 0 && shape_flags)
    return usage_error(cmd, "--model cannot be combined with --kv-heads, --head-dim or --v-head-dim");
  if (shape_flags && (o->kv_heads == 0 || o->head_dim == 0))
    return usage_error(cmd, "a model shape needs both --kv-heads and --head-dim");
  if ((o->layouts.count != 0 || o->block_sizes.count != 0) && (o->k_rows.count != 0 || o->manifest != NULL))
    return usage_error(cmd, "--layout and --block-size need a model's shape (--model, or --kv-heads and --head-dim)");
  for (size_t l = 0; l < o->layouts.count; l++) {
    const char *for_op = layout_preset_op(o->layouts.value[l]);
    if (for_op != NULL && strcmp(for_op, o->op->name) != 0)
      return usage_error(cmd, "--layout %s is a %s preset, not one of --op %s's (see 'kvjit prewarm --help')",
                         layout_preset_name(o->layouts.value[l]), for_op, o->op->name);
  }
  if (o->layouts.count == 0) o->layouts = (int_list){{LAYOUT_FLAT}, 1};
  if (o->block_sizes.count == 0) o->block_sizes = (int_list){{16}, 1};
  if ((o->quant_srcs.count != 0 || o->scales.count != 0) && op_field(o->op, "cache_dtype") < 0)
    return usage_error(cmd, "--quantize-from and --scale are for ops that quantize; %s does not", o->op->name);

  skip_note skipped = {0, ""};
  int rc;
  if (o->manifest != NULL) {
    variant_list lines = {NULL, 0, 0};
    rc = read_manifest(cmd, o->manifest, &lines);
    if (rc == 0) rc = resolve_archs(cmd, o);
    for (size_t i = 0; rc == 0 && i < lines.count; i++)
      for (size_t a = 0; rc == 0 && a < o->archs.count; a++) {
        kvjit_variant v = lines.items[i];
        v.values[0] = o->archs.value[a];
        if (!add_variant(out, v, &skipped)) rc = out_of_memory(cmd);
      }
    free(lines.items);
  } else {
    rc = resolve_choices(cmd, o);
    if (rc == 0) rc = option_variants(cmd, o, shape_flags, out, &skipped);
  }
  if (rc != 0) return rc;
  variant_list_dedup(out);
  /* Exit 0 means "all cached": a run that builds nothing must not say so. */
  if (out->count == 0 && o->manifest != NULL) return usage_error(cmd, "--manifest '%s' lists no variant", o->manifest);
  if (out->count == 0)
    return usage_error(cmd, "nothing to build: all %zu combinations are ones the op refuses (the first: %s)",
                       skipped.count, skipped.first);
  if (skipped.count != 0)
    fprintf(stderr, "kvjit %s: note: skipped %zu combinations the op refuses (the first: %s)\n", cmd, skipped.count,
            skipped.first);
  return 0;
}

/* Parse prewarm's command line into @p o (defaults applied later, by build_variants()); exit
 * status, with *help set for -h. */
int prewarm_parse_args(const char *cmd, int argc, char **argv, prewarm_opts *o, bool *help) {
  enum {
    OPT_ARCH = 300, OPT_MODEL, OPT_KV_HEADS, OPT_HEAD_DIM, OPT_V_HEAD_DIM, OPT_DTYPE, OPT_TP,
    OPT_K_ROW, OPT_V_ROW, OPT_MANIFEST, OPT_QUANT_SRC, OPT_SCALE, OPT_OP, OPT_NVRTC, OPT_LAYOUT, OPT_BLOCK_SIZE,
    OPT_FIELD,
  };
  static const struct option fixed_options[] = {
      {"arch", required_argument, NULL, OPT_ARCH},
      {"op", required_argument, NULL, OPT_OP},
      {"model", required_argument, NULL, OPT_MODEL},
      {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
      {"head-dim", required_argument, NULL, OPT_HEAD_DIM},
      {"v-head-dim", required_argument, NULL, OPT_V_HEAD_DIM},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"tp", required_argument, NULL, OPT_TP},
      {"quantize-from", required_argument, NULL, OPT_QUANT_SRC},
      {"scale", required_argument, NULL, OPT_SCALE},
      {"layout", required_argument, NULL, OPT_LAYOUT},
      {"block-size", required_argument, NULL, OPT_BLOCK_SIZE},
      {"k-row-bytes", required_argument, NULL, OPT_K_ROW},
      {"v-row-bytes", required_argument, NULL, OPT_V_ROW},
      {"manifest", required_argument, NULL, OPT_MANIFEST},
      {"nvrtc", required_argument, NULL, OPT_NVRTC},
      {"jobs", required_argument, NULL, 'j'},
      {"dry-run", no_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'h'},
      CACHE_LONG_OPTIONS,
  };
  memset(o, 0, sizeof *o);
  o->v_head_dim = -1;
  o->jobs = sysconf(_SC_NPROCESSORS_ONLN);
  if (o->jobs < 1) o->jobs = 1;
  o->op = kvjit_op_find("store_kv_cache");

  /* The choice fields of every op, each a flag of its own (--index, --src, ...): the op's table,
   * not this file, says which there are. */
  struct option long_options[ARRAY_SIZE(fixed_options) + MAX_FIELD_FLAGS + 1];
  memcpy(long_options, fixed_options, sizeof fixed_options);
  size_t n = ARRAY_SIZE(fixed_options);
  for (size_t i = 0; i < kvjit_op_count(); i++) {
    const kvjit_op_info *op = kvjit_op_get(i);
    for (size_t f = 0; f < op->num_fields; f++) {
      if (op->fields[f].prewarm == NULL) continue;
      size_t seen = 0;
      while (seen < o->num_flags && strcmp(o->flag_fields[seen], op->fields[f].name) != 0) seen++;
      if (seen < o->num_flags || o->num_flags == MAX_FIELD_FLAGS) continue;
      o->flag_fields[o->num_flags] = op->fields[f].name;
      field_flag(op->fields[f].name, o->flag_names[o->num_flags], sizeof o->flag_names[0]);
      long_options[n++] = (struct option){o->flag_names[o->num_flags] + 2, required_argument, NULL,
                                          OPT_FIELD + (int)o->num_flags};
      o->num_flags++;
    }
  }
  long_options[n] = (struct option){NULL, 0, NULL, 0};

  int c, rc = 0;
  while (rc == 0 && (c = getopt_long(argc, argv, ":j:nh", long_options, NULL)) != -1) {
    if (c >= OPT_FIELD && c < OPT_FIELD + (int)o->num_flags) {
      o->flag_text[c - OPT_FIELD] = optarg; /* parsed once the op is known */
      continue;
    }
    switch (c) {
    case OPT_ARCH: rc = parse_list(cmd, "--arch", optarg, item_arch, &o->archs); break;
    case OPT_OP:
      o->op = kvjit_op_find(optarg);
      o->op_given = true;
      if (o->op == NULL) {
        char names[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < kvjit_op_count() && used < sizeof names; i++)
          used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", kvjit_op_get(i)->name);
        const char *ops[16] = {NULL};
        for (size_t i = 0; i < kvjit_op_count() && i < ARRAY_SIZE(ops); i++) ops[i] = kvjit_op_get(i)->name;
        const char *near = nearest_word(optarg, ops, ARRAY_SIZE(ops));
        if (near != NULL) rc = usage_error(cmd, "bad value '%s' for --op: did you mean %s?", optarg, near);
        else rc = usage_error(cmd, "bad value '%s' for --op: expected %s", optarg, names);
      }
      break;
    case OPT_MODEL: rc = parse_list(cmd, "--model", optarg, item_model, &o->models); break;
    case OPT_KV_HEADS: rc = parse_one(cmd, "--kv-heads", optarg, item_positive, &o->kv_heads); break;
    case OPT_HEAD_DIM: rc = parse_one(cmd, "--head-dim", optarg, item_positive, &o->head_dim); break;
    case OPT_V_HEAD_DIM: rc = parse_one(cmd, "--v-head-dim", optarg, item_head_dim, &o->v_head_dim); break;
    case OPT_DTYPE: rc = parse_list(cmd, "--dtype", optarg, item_dtype, &o->dtypes); break;
    case OPT_TP: rc = parse_list(cmd, "--tp", optarg, item_positive, &o->tps); break;
    case OPT_QUANT_SRC: rc = parse_list(cmd, "--quantize-from", optarg, item_quant_src, &o->quant_srcs); break;
    case OPT_SCALE: rc = parse_list(cmd, "--scale", optarg, item_scale, &o->scales); break;
    case OPT_LAYOUT: rc = parse_list(cmd, "--layout", optarg, item_layout, &o->layouts); break;
    case OPT_BLOCK_SIZE: rc = parse_list(cmd, "--block-size", optarg, item_positive, &o->block_sizes); break;
    case OPT_K_ROW: rc = parse_list(cmd, "--k-row-bytes", optarg, item_k_row_bytes, &o->k_rows); break;
    case OPT_V_ROW:
      rc = parse_list(cmd, "--v-row-bytes", optarg, item_v_row_bytes, &o->v_rows);
      o->have_v_rows = true;
      break;
    case OPT_MANIFEST: o->manifest = optarg; break;
    case OPT_NVRTC: rc = use_nvrtc(cmd, optarg); break;
    case 'j':
      if (!parse_int(optarg, 1, 1024, &o->jobs))
        rc = usage_error(cmd, "bad value '%s' for -j/--jobs (expected 1 to 1024)", optarg);
      break;
    case 'n': o->dry_run = true; break;
    case 'h': *help = true; return 0;
    default:
      if (!cache_option(c, &o->cache)) rc = getopt_error(cmd, c, argv, long_options);
      break;
    }
  }
  if (rc == 0) rc = check_no_operands(cmd, argc, argv);
  if (rc != 0) return rc;
  return 0;
}

/* The ops and their choice fields, as `kvjit prewarm --help` lists them. */
void print_ops(FILE *out) {
  for (size_t i = 0; i < kvjit_op_count(); i++) {
    const kvjit_op_info *op = kvjit_op_get(i);
    fprintf(out, "  --op %s: %s\n", op->name, op->summary);
    for (size_t f = 0; f < op->num_fields; f++) {
      const kvjit_op_field *field = &op->fields[f];
      if (field->prewarm == NULL) continue;
      char flag[64], values[256] = "";
      size_t used = 0;
      if (field->kind == KVJIT_FIELD_WORD) {
        for (size_t w = 0; w < field->num_words && used < sizeof values; w++)
          if (field->words[w] != NULL)
            used += (size_t)snprintf(values + used, sizeof values - used, "%s%s", used ? ", " : "", field->words[w]);
      } else {
        snprintf(values, sizeof values, "%s%lld..%lld", (field->flags & KVJIT_FIELD_POW2) ? "powers of two " : "",
                 (long long)field->min, (long long)field->max);
      }
      char option[80];
      snprintf(option, sizeof option, "%s LIST", field_flag(field->name, flag, sizeof flag));
      fprintf(out, "      %-19s %s (default: %s)\n%26s%s\n", option, values, field->prewarm, "", field->help);
    }
  }
}
