/* libnvrtc through dlopen + dlsym, behind pthread_once; the toolkit's header dirs found from it. */
#include "nvrtc_lib.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "status.h"

#ifndef KVJIT_NVRTC_BUILT_MAJOR
#error "meson passes KVJIT_NVRTC_BUILT_MAJOR/MINOR (the toolkit's version) and KVJIT_TOOLKIT_DIR"
#endif

#define STR2_(x) #x
#define STR_(x) STR2_(x)
#define SONAME "libnvrtc.so." STR_(KVJIT_NVRTC_BUILT_MAJOR)

/* X(field, symbol): every entry is required; NVRTC has exported all of them since CUDA 11.2. */
#define KVJIT_NVRTC_ENTRIES(X)                                                                   \
  X(GetErrorString, nvrtcGetErrorString)                                                         \
  X(Version, nvrtcVersion)                                                                       \
  X(GetNumSupportedArchs, nvrtcGetNumSupportedArchs)                                             \
  X(GetSupportedArchs, nvrtcGetSupportedArchs)                                                   \
  X(CreateProgram, nvrtcCreateProgram)                                                           \
  X(DestroyProgram, nvrtcDestroyProgram)                                                         \
  X(CompileProgram, nvrtcCompileProgram)                                                         \
  X(GetProgramLogSize, nvrtcGetProgramLogSize)                                                   \
  X(GetProgramLog, nvrtcGetProgramLog)                                                           \
  X(AddNameExpression, nvrtcAddNameExpression)                                                   \
  X(GetLoweredName, nvrtcGetLoweredName)                                                         \
  X(GetCUBINSize, nvrtcGetCUBINSize)                                                             \
  X(GetCUBIN, nvrtcGetCUBIN)                                                                     \
  X(GetPTXSize, nvrtcGetPTXSize)                                                                 \
  X(GetPTX, nvrtcGetPTX)

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static kvjit_nvrtc table;
static kvjit_status table_status = KVJIT_ERR_NO_NVRTC;
static char reason[1536];
static char loaded_path[PATH_MAX];
static char include_dir[PATH_MAX];
static char cccl_dir[PATH_MAX];
static int archs[128];
static const char *chosen_because = "";

/* Append "; what" to the reason (truncated quietly: the first candidates matter most). */
static void note(const char *fmt, ...) KVJIT_PRINTF(1, 2);
static void note(const char *fmt, ...) {
  size_t used = strlen(reason);
  if (used + 3 >= sizeof reason) return;
  if (used) {
    memcpy(reason + used, "; ", 3);
    used += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason + used, sizeof reason - used, fmt, ap);
  va_end(ap);
}

/* @p dir + @p tail into @p out; 0 when it does not fit. */
static int join(char *out, size_t capacity, const char *dir, const char *tail) {
  size_t a = strlen(dir), b = strlen(tail);
  if (a + b + 1 > capacity) return 0;
  memcpy(out, dir, a);
  memcpy(out + a, tail, b + 1);
  return 1;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Strip the last path component in place; 0 when there is none left. */
static int parent(char *path) {
  char *slash = strrchr(path, '/');
  if (slash == NULL || slash == path) return 0;
  *slash = '\0';
  return 1;
}

/*
 * Header dirs of the toolkit that @p lib belongs to: <root>/include and <root>/include/cccl, where
 * <root> is the dir above lib/ or lib64/ (a toolkit, its targets/<arch>/ dir, or the nvidia/cu13
 * wheel); the CUDA 12 split wheels keep them in nvidia/cuda_runtime/include and
 * nvidia/cuda_cccl/include beside nvidia/cuda_nvrtc.
 */
static void find_toolkit_headers(const char *lib) {
  char root[PATH_MAX], dir[PATH_MAX];
  if (realpath(lib, root) == NULL && !join(root, sizeof root, lib, "")) return;
  if (!parent(root) || !parent(root)) return; /* drop the file name and lib/ */
  const char *base = strrchr(root, '/');
  if (base && strcmp(base + 1, "cuda_nvrtc") == 0) {
    parent(root); /* .../nvidia */
    if (join(dir, sizeof dir, root, "/cuda_runtime/include") && is_dir(dir)) join(include_dir, sizeof include_dir, dir, "");
    if (join(dir, sizeof dir, root, "/cuda_cccl/include") && is_dir(dir)) join(cccl_dir, sizeof cccl_dir, dir, "");
    return;
  }
  if (!join(dir, sizeof dir, root, "/include") || !is_dir(dir)) return;
  join(include_dir, sizeof include_dir, dir, "");
  if (join(dir, sizeof dir, root, "/include/cccl") && is_dir(dir)) join(cccl_dir, sizeof cccl_dir, dir, "");
}

static void *try_open(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *why = dlerror();
    const char *colon = why ? strrchr(why, ':') : NULL;
    note("%s (%s)", path, colon ? colon + 2 : why ? why : "dlopen failed");
  }
  return h;
}

/* The wheel dirs beside the installed libkvjit (found from one of its own functions). */
static void *open_from_wheels(void) {
  Dl_info info;
  if (dladdr((void *)kvjit_nvrtc_get, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] != '/') return NULL;
  char dir[PATH_MAX];
  if (realpath(info.dli_fname, dir) == NULL) return NULL;
  if (!parent(dir)) return NULL;
  static const char *const layouts[] = {"nvidia/cu" STR_(KVJIT_NVRTC_BUILT_MAJOR) "/lib", "nvidia/cuda_nvrtc/lib"};
  for (int up = 0; up < 3; up++) {
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
      char path[PATH_MAX], tail[128];
      snprintf(tail, sizeof tail, "/%s/" SONAME, layouts[i]);
      if (!join(path, sizeof path, dir, tail) || !is_file(path)) continue;
      void *h = try_open(path);
      if (h) return h;
    }
    if (!parent(dir)) break;
  }
  return NULL;
}

static void *open_nvrtc(void) {
  const char *env = getenv("KVJIT_NVRTC");
  if (env && env[0]) {
    void *h = try_open(env);
    if (h == NULL) note("nothing else: $KVJIT_NVRTC is set");
    chosen_because = "KVJIT_NVRTC";
    return h;
  }
  void *h = open_from_wheels();
  if (h) {
    chosen_because = "a pip wheel (nvidia-cuda-nvrtc / nvidia-cu" STR_(KVJIT_NVRTC_BUILT_MAJOR) ") next to libkvjit, "
                     "preferred to the toolkit";
    return h;
  }
  static const char *const libdirs[] = {"lib64", "lib"};
  for (size_t i = 0; i < 2; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/" SONAME, KVJIT_TOOLKIT_DIR, libdirs[i]);
    if (!is_file(path)) continue;
    chosen_because = "the toolkit kvjit was built with (" KVJIT_TOOLKIT_DIR ")";
    if ((h = try_open(path)) != NULL) return h;
  }
  chosen_because = "the dynamic loader's search path (" SONAME ")";
  if ((h = try_open(SONAME)) != NULL) return h;
  return NULL;
}

/* The ELF build id of the loaded object that holds @p addr: what identifies an NVRTC build wherever
 * it is installed, read from memory (no file is opened). */
typedef struct build_id_search {
  uintptr_t addr;
  kvjit_key *out;
} build_id_search;

static int build_id_of_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  build_id_search *s = arg;
  int holds = 0;
  for (int i = 0; i < info->dlpi_phnum && !holds; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    holds = ph->p_type == PT_LOAD && s->addr >= start && s->addr - start < ph->p_memsz;
  }
  if (!holds) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
    while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
      const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)(const void *)p;
      size_t name = (n->n_namesz + 3u) & ~3u, desc = (n->n_descsz + 3u) & ~3u;
      const uint8_t *d = p + sizeof *n + name;
      if ((size_t)(end - p) < sizeof *n + name + desc) break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(p + sizeof *n, "GNU", 4) == 0) {
        kvjit_key_of_bytes(s->out, d, n->n_descsz);
        return 1;
      }
      p = d + desc;
    }
  }
  return 1;
}

static void nvrtc_load(void) {
  void *h = open_nvrtc();
  if (h == NULL) return;
  /* The handle is never closed: pointers into it live as long as the process. */
#define KVJIT_NVRTC_RESOLVE_(field, sym)                                                         \
  {                                                                                              \
    void *fn = dlsym(h, #sym);                                                                   \
    if (fn == NULL) {                                                                            \
      note("%s has no %s", loaded_path[0] ? loaded_path : "libnvrtc", #sym);                     \
      return;                                                                                    \
    }                                                                                            \
    memcpy(&table.field, &fn, sizeof fn);                                                        \
  }
  Dl_info info;
  void *probe = dlsym(h, "nvrtcVersion");
  if (probe && dladdr(probe, &info) && info.dli_fname) snprintf(loaded_path, sizeof loaded_path, "%s", info.dli_fname);
  KVJIT_NVRTC_ENTRIES(KVJIT_NVRTC_RESOLVE_)
#undef KVJIT_NVRTC_RESOLVE_
  int n = 0;
  if (table.Version(&table.major, &table.minor) != NVRTC_SUCCESS || table.GetNumSupportedArchs(&n) != NVRTC_SUCCESS ||
      n <= 0 || n > (int)(sizeof archs / sizeof archs[0]) || table.GetSupportedArchs(archs) != NVRTC_SUCCESS) {
    note("%s: %s", loaded_path, "nvrtcVersion/nvrtcGetSupportedArchs failed");
    return;
  }
  table.num_archs = n;
  table.archs = archs;
  table.path = loaded_path;
  table.why = chosen_because;
  build_id_search search = {(uintptr_t)probe, &table.identity};
  dl_iterate_phdr(build_id_of_object, &search);
  find_toolkit_headers(loaded_path);
  table.include_dir = include_dir;
  table.cccl_dir = cccl_dir;
  table_status = KVJIT_OK;
}

kvjit_status kvjit_nvrtc_get(const kvjit_nvrtc **out) {
  pthread_once(&nvrtc_once, nvrtc_load);
  if (table_status != KVJIT_OK) {
    *out = NULL;
    return kvjit_fail(KVJIT_ERR_NO_NVRTC, "no NVRTC: tried %s", reason);
  }
  *out = &table;
  return KVJIT_OK;
}

void kvjit_nvrtc_identity(kvjit_key *out) {
  pthread_once(&nvrtc_once, nvrtc_load);
  kvjit_key none = {0, 0};
  *out = table_status == KVJIT_OK ? table.identity : none;
}

void kvjit_nvrtc_key_version(int *major, int *minor) {
  pthread_once(&nvrtc_once, nvrtc_load);
  if (table_status == KVJIT_OK) {
    *major = table.major;
    *minor = table.minor;
    return;
  }
  *major = KVJIT_NVRTC_BUILT_MAJOR;
  *minor = KVJIT_NVRTC_BUILT_MINOR;
  const char *env = getenv("KVJIT_NVRTC_VERSION");
  int a, b;
  char end;
  if (env && sscanf(env, "%d.%d%c", &a, &b, &end) == 2 && a > 0 && a < 1000 && b >= 0 && b < 1000) {
    *major = a;
    *minor = b;
  }
}

kvjit_status kvjit_nvrtc_version(int *major, int *minor) {
  if (major == NULL || minor == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "major/minor is NULL");
  const kvjit_nvrtc *nv;
  kvjit_status st = kvjit_nvrtc_get(&nv);
  if (st != KVJIT_OK) return st;
  *major = nv->major;
  *minor = nv->minor;
  return KVJIT_OK;
}

kvjit_status kvjit_nvrtc_archs(int *out, size_t capacity, size_t *count) {
  if (count == NULL || (out == NULL && capacity > 0)) {
    return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "count is NULL or out is NULL with capacity %zu", capacity);
  }
  const kvjit_nvrtc *nv;
  kvjit_status st = kvjit_nvrtc_get(&nv);
  if (st != KVJIT_OK) return st;
  for (size_t i = 0; i < capacity && i < (size_t)nv->num_archs; i++) out[i] = nv->archs[i];
  *count = (size_t)nv->num_archs;
  return KVJIT_OK;
}

kvjit_status kvjit_nvrtc_info(const char **path, const char **why) {
  if (path == NULL || why == NULL) return kvjit_fail(KVJIT_ERR_INVALID_ARGUMENT, "path/why is NULL");
  const kvjit_nvrtc *nv;
  kvjit_status st = kvjit_nvrtc_get(&nv);
  *path = st == KVJIT_OK ? nv->path : NULL;
  *why = st == KVJIT_OK ? nv->why : NULL;
  return st;
}
