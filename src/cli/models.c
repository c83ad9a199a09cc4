/* kvjit prewarm's model presets, and the names people type for them (a Hugging Face id, any case). */
#include "models.h"

#include <string.h>

#include "cli.h"

static const model_shape model_presets[] = {
    {"llama-3.1-8b", 8, 128, 128},   {"llama-3.1-70b", 8, 128, 128}, {"llama-3.1-405b", 8, 128, 128},
    {"qwen2.5-7b", 4, 128, 128},     {"qwen2.5-72b", 8, 128, 128},   {"qwen3-32b", 8, 128, 128},
    {"mistral-7b", 8, 128, 128},     {"mixtral-8x7b", 8, 128, 128},  {"gemma-2-9b", 8, 256, 256},
    {"gemma-2-27b", 16, 128, 128},   {"gpt-oss-120b", 8, 64, 64},
    /* MLA: kv_lora_rank 512 + rope 64 = 576 elements, K only, not split across ranks. */
    {"deepseek-v3", 1, 576, 0},      {"deepseek-r1", 1, 576, 0},
};

static int ends_with(const char *s, size_t len, const char *end) {
  size_t n = strlen(end);
  return len >= n && memcmp(s + len - n, end, n) == 0;
}

/* @p typed as a preset would spell it: lower case, no organization, no "meta-", no tuning suffix
 * ("-instruct", "-instruct-v0.3", "-chat", "-it", "-base", "-hf"). */
static void normalize(const char *typed, char *out, size_t capacity) {
  const char *slash = strrchr(typed, '/');
  const char *p = slash != NULL ? slash + 1 : typed;
  size_t len = 0;
  for (; *p != '\0' && len + 1 < capacity; p++) out[len++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
  out[len] = '\0';
  if (strncmp(out, "meta-", 5) == 0) {
    memmove(out, out + 5, len - 4);
    len -= 5;
  }
  /* "mistral-7b-instruct-v0.3": a version after -instruct goes with it. */
  char *instruct = strstr(out, "-instruct");
  if (instruct != NULL) {
    const char *rest = instruct + strlen("-instruct");
    int version = rest[0] == '\0' || (rest[0] == '-' && rest[1] == 'v' && rest[2] != '\0' &&
                                      strspn(rest + 2, "0123456789.") == strlen(rest + 2));
    if (version) {
      *instruct = '\0';
      len = (size_t)(instruct - out);
    }
  }
  static const char *const endings[] = {"-chat", "-it", "-base", "-hf"};
  for (size_t i = 0; i < ARRAY_SIZE(endings); i++) {
    if (ends_with(out, len, endings[i])) {
      len -= strlen(endings[i]);
      out[len] = '\0';
    }
  }
}

const model_shape *model_find(const char *typed) {
  char name[128];
  normalize(typed, name, sizeof name);
  for (size_t i = 0; i < ARRAY_SIZE(model_presets); i++)
    if (strcmp(model_presets[i].name, name) == 0) return &model_presets[i];
  return NULL;
}

const char *model_nearest(const char *typed) {
  char name[128];
  normalize(typed, name, sizeof name);
  const char *names[ARRAY_SIZE(model_presets)];
  for (size_t i = 0; i < ARRAY_SIZE(model_presets); i++) names[i] = model_presets[i].name;
  return nearest_word(name, names, ARRAY_SIZE(names));
}

size_t model_index(const model_shape *model) { return (size_t)(model - model_presets); }

const model_shape *model_at(size_t index) { return index < ARRAY_SIZE(model_presets) ? &model_presets[index] : NULL; }

void print_model_presets(FILE *out) {
  for (size_t i = 0; i < ARRAY_SIZE(model_presets); i++) {
    const model_shape *m = &model_presets[i];
    if (m->v_head_dim == 0)
      fprintf(out, "  %-16s MLA latent, %d elements, K only, same on every rank\n", m->name, m->head_dim);
    else
      fprintf(out, "  %-16s %d x %d\n", m->name, m->kv_heads, m->head_dim);
  }
  fputs("  (any case; a Hugging Face id such as meta-llama/Llama-3.1-8B-Instruct names its preset)\n", out);
}
