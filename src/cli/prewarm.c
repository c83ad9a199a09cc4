/* kvjit prewarm and kvjit cache check: the variant list compiled in shares (prewarm_pool.c runs
 * them, shares.c reports them), in bundles; or located in the caches. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "models.h"
#include "prewarm_pool.h"
#include "shares.h"
#include "layouts.h"
#include "variants.h"

/* Longest manifest line kvjit_variant_format() is given room for. */
#define LINE_CAPACITY 512

/* One share per worker when that is few variants each, so that `-j 2` over the default set is two
 * bundles; beyond VARIANTS_PER_SHARE variants a worker, more shares than workers, taken from a
 * queue, so the progress moves and a slow share does not hold the others back. */
#define VARIANTS_PER_SHARE 16

/* One line per variant that failed (and, @p each, one per variant); the counts of the summary line. */
static size_t report_variants(const prewarm_run *run, bool each, size_t *compiled, size_t *cached,
                              uint64_t *kernels_compiled, uint64_t *kernels_cached) {
  size_t failed = 0;
  *compiled = *cached = 0;
  *kernels_compiled = *kernels_cached = 0;
  for (size_t i = 0; i < run->variants->count; i++) {
    const kvjit_prewarm_result *t = &run->totals[i];
    if (t->status != KVJIT_OK) {
      char name[LINE_CAPACITY];
      describe_variant(&run->variants->items[i], name, sizeof name);
      fprintf(stderr, "[%zu/%zu] %s: FAILED: %s [%s]\n", i + 1, run->variants->count, name,
              t->error[0] ? t->error : kvjit_status_string(t->status), kvjit_status_name(t->status));
      failed++;
      continue;
    }
    if (each) {
      char name[LINE_CAPACITY];
      describe_variant(&run->variants->items[i], name, sizeof name);
      fprintf(stderr, "[%zu/%zu] %s: %u compiled, %u cached\n", i + 1, run->variants->count, name, t->compiled,
              t->cached);
    }
    *kernels_compiled += t->compiled;
    *kernels_cached += t->cached;
    if (t->compiled != 0) ++*compiled;
    else ++*cached;
  }
  return failed;
}

/* Where the kernels of @p v are cached, as a manifest comment: "cached", "cached (remote)" or
 * "missing 2 of 4 kernels"; "" when it cannot be told. */
static void locate_note(kvjit_context *ctx, const kvjit_variant *v, char *note, size_t capacity, unsigned *missing) {
  unsigned local = 0, remote = 0;
  *missing = 0;
  note[0] = '\0';
  if (ctx == NULL || kvjit_variant_locate(ctx, v, &local, &remote, missing) != KVJIT_OK) return;
  if (*missing != 0) snprintf(note, capacity, "  # missing %u of %u kernels", *missing, local + remote + *missing);
  else if (remote != 0) snprintf(note, capacity, "  # cached (%u of %u on the remote)", remote, local + remote);
  else snprintf(note, capacity, "  # cached");
}

/* --dry-run: the variants as manifest lines, each marked with where it is cached (a read-only
 * look at the local dirs and the remote: nothing is created, fetched or compiled). */
static int print_dry_run(const char *cmd, const prewarm_opts *o, const variant_list *variants) {
  kvjit_context *ctx = NULL;
  if (open_context_mode(cmd, &o->cache, true, &ctx) != 0) ctx = NULL; /* lines without marks, then */
  printf("# kvjit prewarm --dry-run: %zu variant%s (one manifest line each)\n", variants->count, plural(variants->count));
  for (size_t i = 0; i < variants->count; i++) {
    char line[LINE_CAPACITY], note[64];
    unsigned missing;
    if (kvjit_variant_format(&variants->items[i], line, sizeof line) != KVJIT_OK)
      describe_variant(&variants->items[i], line, sizeof line);
    locate_note(ctx, &variants->items[i], note, sizeof note, &missing);
    printf("%s%s\n", line, note);
  }
  kvjit_context_destroy(ctx);
  return 0;
}

int cmd_check(int argc, char **argv) {
  static const char cmd[] = "cache check";
  prewarm_opts o;
  bool help = false;
  int rc = prewarm_parse_args(cmd, argc, argv, &o, &help);
  if (rc != 0) return rc;
  if (help) {
    puts("Usage: kvjit cache check [--op NAME] [prewarm's variant options] [--arch LIST | --manifest FILE]\n"
         "Would a server hit? Each variant prewarm would build is looked up - in the read-only dirs,\n"
         "the writable dir and the remote tier ($KVJIT_REMOTE_CACHE) - with this NVRTC's keys, compiling\n"
         "and fetching nothing. Lists each variant with kernels that would miss, and why: the entry of\n"
         "the same kernel nearest to it and the key input that differs (NVRTC, target, toolkit,\n"
         "options, source).\n"
         "\n"
         "Options: those of 'kvjit prewarm' (see 'kvjit prewarm --help'), the same variants:\n"
         "      --arch LIST, --op NAME, --model LIST, --kv-heads N, --head-dim N, --v-head-dim N,\n"
         "      --dtype LIST, --quantize-from LIST, --scale LIST, --tp LIST, --k-row-bytes LIST,\n"
         "      --v-row-bytes LIST, each op's kernel choices (--index, --pdl, --split, ...),\n"
         "      --manifest FILE\n"
         "      --nvrtc PATH        check with the keys of this libnvrtc.so (as $KVJIT_NVRTC)\n" CACHE_OPTIONS_HELP
         "  -h, --help              this help\n"
         "\n"
         "Exit status: 0 every kernel cached, 1 some would miss (or a lookup failed), 2 bad command line.");
    return 0;
  }
  variant_list variants = {NULL, 0, 0};
  rc = build_variants(cmd, &o, &variants);
  kvjit_context *ctx = NULL;
  if (rc == 0) rc = open_context_mode(cmd, &o.cache, true, &ctx);
  unsigned total_local = 0, total_remote = 0, total_missing = 0;
  size_t variants_missing = 0, failed = 0;
  for (size_t i = 0; rc == 0 && i < variants.count; i++) {
    unsigned local = 0, remote = 0, missing = 0;
    char line[LINE_CAPACITY];
    if (kvjit_variant_format(&variants.items[i], line, sizeof line) != KVJIT_OK)
      describe_variant(&variants.items[i], line, sizeof line);
    kvjit_status status = kvjit_variant_locate(ctx, &variants.items[i], &local, &remote, &missing);
    if (status != KVJIT_OK) {
      const char *detail = kvjit_last_error();
      fprintf(stderr, "kvjit %s: %s: %s [%s]\n", cmd, line, detail[0] ? detail : kvjit_status_string(status),
              kvjit_status_name(status));
      failed++;
      continue;
    }
    total_local += local;
    total_remote += remote;
    total_missing += missing;
    if (missing != 0) {
      variants_missing++;
      printf("miss: %s  # %u of %u kernels\n", line, missing, local + remote + missing);
      kvjit_miss_info why;
      if (kvjit_variant_explain(ctx, &variants.items[i], &why) == KVJIT_OK && why.cause != KVJIT_MISS_NONE)
        printf("  why (%s): %s\n", kvjit_miss_cause_name(why.cause), why.message);
    }
  }
  if (rc == 0) {
    unsigned kernels = total_local + total_remote + total_missing;
    printf("check: %zu variant%s, %u kernel%s: %u cached locally, %u on the remote, %u would miss (%zu variant%s)%s\n",
           variants.count, plural(variants.count), kernels, plural(kernels), total_local, total_remote, total_missing,
           variants_missing, plural(variants_missing), failed ? "; some lookups failed" : "");
    if (total_missing != 0 || failed != 0) rc = EXIT_FAILURE;
  }
  kvjit_context_destroy(ctx);
  free(variants.items);
  return rc;
}

/* The remote tier's line of the summary; true when pushes to a read-write remote may be missing. */
static bool report_remote(kvjit_context *ctx, const prewarm_run *run) {
  const char *urls = "";
  int read_write = 0;
  if (kvjit_context_remote(ctx, &urls, &read_write, 0, NULL) != KVJIT_OK || urls[0] == '\0') return false;
  if (!read_write) {
    if (run->remote_failures != 0)
      printf("prewarm: remote %s (read-only): %" PRIu64 " request%s failed or skipped\n", urls, run->remote_failures,
             plural(run->remote_failures));
    return false;
  }
  printf("prewarm: remote %s (read-write): %" PRIu64 " entr%s pushed, %" PRIu64 " request%s failed or skipped\n",
         urls, run->remote_writes, run->remote_writes == 1 ? "y" : "ies", run->remote_failures,
         plural(run->remote_failures));
  if (run->remote_failures == 0) return false;
  fprintf(stderr, "kvjit prewarm: pushing to %s failed: the remote may lack entries this run has (its warning "
                  "says why unless KVJIT_LOG=0; run again once it answers)\n", urls);
  return true;
}

static const char prewarm_help[] =
    "Usage: kvjit prewarm [--op NAME] [options]\n"
    "Compile an op's variants (store_kv_cache, transfer_kv: --op) into the cache, for archs that\n"
    "need not be present (no GPU or driver needed). Without any variant option: store_kv_cache for\n"
    "llama-3.1-8b, bf16 and fp8, tp 1,2,4,8, int32 and int64 indices, pdl auto.\n"
    "\n"
    "Targets:\n"
    "      --arch LIST         archs to build for: sm_90,sm_100, 90, 9.0 or GPU names (h100, b200)\n"
    "                          (default: the local GPU's; ops build plain sm_XY cubins, so no\n"
    "                          sm_90a / sm_100f / compute_90: those are the generic loader's)\n"
    "      --op NAME           the op (default store_kv_cache); its kernel choices are below\n"
    "Variants from a model (lists are comma-separated; every combination is built, duplicates once):\n"
    "      --model LIST        presets (below), or their Hugging Face ids\n"
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
    "      --layout LIST       the caches' layout (default: flat), presets below: store_kv_cache's\n"
    "                          into vLLM's paged caches, transfer_kv's to and from SGLang's host\n"
    "                          pool (--hicache-mem-layout) on the side(s) in host memory\n"
    "      --block-size LIST   slots per block (page) of the paged layouts (default: 16); for\n"
    "                          page_first_direct and page_head, SGLang's --page-size\n"
    "Variants from row sizes:\n"
    "      --k-row-bytes LIST  bytes of one token's K row\n"
    "      --v-row-bytes LIST  bytes of one V row (default: same as K; 0: K only)\n"
    "Kernel choices (with either), per op (combinations an op refuses, such as pdl=on before\n"
    "sm_90, are skipped; --split also takes auto and all: auto plus every power-of-two split\n"
    "leaving parts of >= vec bytes):\n"
    "%s"
    "Or:\n"
    "      --manifest FILE     replay the variants a run recorded ($KVJIT_MANIFEST; format in\n"
    "                          cache/MANIFEST.md; lines of any op), each line once per --arch\n"
    "\n"
    "      --nvrtc PATH        key and compile for this libnvrtc.so (as $KVJIT_NVRTC): a build machine\n"
    "                          prewarms for the NVRTC its servers use (`kvjit info` names theirs)\n"
    "  -j, --jobs N            worker processes compiling at once (default: the number of cores).\n"
    "                          The kernels are cut into shares of about equal compile time; a\n"
    "                          worker takes one share at a time and compiles it as one NVRTC\n"
    "                          program per op and arch (a bundle): progress counts the shares\n"
    "  -n, --dry-run           print the variants as manifest lines, each marked cached or\n"
    "                          missing (local dirs and the remote); compile nothing\n" CACHE_OPTIONS_HELP
    "  -h, --help              this help\n"
    "\n"
    "Model presets (KV heads x head dim):\n";

static void print_prewarm_help(void) {
  const char *split = strstr(prewarm_help, "%s");
  fwrite(prewarm_help, 1, (size_t)(split - prewarm_help), stdout);
  print_ops(stdout);
  fputs(split + 2, stdout);
  print_model_presets(stdout);
  puts("\nLayout presets (--layout; H = heads per rank, D = head dim):");
  print_layout_presets(stdout);
  puts("\nWith a read-write remote ($KVJIT_REMOTE_CACHE, $KVJIT_REMOTE_CACHE_MODE=rw) every entry is also\n"
       "pushed; the summary says how many.\n"
       "Exit status: 0 all variants cached (and pushed), 1 some failed (or a push to a read-write\n"
       "remote failed), 2 bad command line.");
}

int cmd_prewarm(int argc, char **argv) {
  static const char cmd[] = "prewarm";
  prewarm_opts o;
  bool help = false;
  int rc = prewarm_parse_args(cmd, argc, argv, &o, &help);
  if (rc != 0) return rc;
  if (help) {
    print_prewarm_help();
    return 0;
  }

  variant_list variants = {NULL, 0, 0};
  rc = build_variants(cmd, &o, &variants);
  if (rc == 0 && o.dry_run) rc = print_dry_run(cmd, &o, &variants);
  if (rc != 0 || o.dry_run) {
    free(variants.items);
    return rc;
  }

  size_t per_job = (variants.count + (size_t)o.jobs - 1) / (size_t)o.jobs;
  size_t shares = per_job <= VARIANTS_PER_SHARE ? (size_t)o.jobs
                                                : (variants.count + VARIANTS_PER_SHARE - 1) / VARIANTS_PER_SHARE;
  if (shares > variants.count) shares = variants.count ? variants.count : 1;
  const bool progress_bar = isatty(STDERR_FILENO) != 0;
  /* Worker processes (each with its own context) print what the library warns about; this one
   * then stays quiet, or every warning would show twice. */
  const bool workers = progress_bar || (o.jobs > 1 && shares > 1);
  kvjit_context *ctx = NULL;
  rc = workers ? open_context_quiet(cmd, &o.cache, &ctx) : open_context(cmd, &o.cache, &ctx);
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
      .cmd = cmd,
      .cache = &o.cache,
      .variants = &variants,
      .progress_bar = progress_bar,
      .start = now_seconds(),
      .shares = (unsigned)shares,
      .totals = calloc(variants.count ? variants.count : 1, sizeof *run.totals),
  };
  if (run.totals == NULL) {
    kvjit_context_destroy(ctx);
    free(variants.items);
    return out_of_memory(cmd);
  }
  prewarm_progress(&run, true); /* at once, not when the first share is done */
  prewarm_run_shares(&run, ctx, o.jobs);
  if (run.progress_bar) fputc('\n', stderr);

  size_t compiled, cached;
  uint64_t kernels_compiled, kernels_cached;
  size_t failed = report_variants(&run, !run.progress_bar, &compiled, &cached, &kernels_compiled, &kernels_cached);
  printf("prewarm: %zu variant%s: %zu compiled, %zu already cached, %zu failed; kernels: %" PRIu64
         " compiled, %" PRIu64 " already cached; %.2f s with -j %ld\n",
         variants.count, plural(variants.count), compiled, cached, failed, kernels_compiled, kernels_cached,
         now_seconds() - run.start, o.jobs);
  printf("prewarm: cache dir %s\n", info.write_dir);
  bool push_failed = report_remote(ctx, &run);
  free(run.totals);
  kvjit_context_destroy(ctx);
  free(variants.items);
  return failed != 0 || push_failed ? EXIT_FAILURE : 0;
}
