/*
 * NVRTC, loaded at run time: dlopen on first need, behind pthread_once, like driver.c does libcuda.
 * libkvjit never links libnvrtc, so a process whose programs all hit the cache needs no NVRTC.
 *
 * Where it looks, in order (the first that loads wins):
 *   1. $KVJIT_NVRTC (a path); when set, nothing else is tried;
 *   2. the nvidia-cuda-nvrtc / nvidia-cu13 wheel dirs next to the installed libkvjit
 *      (<dir of libkvjit>[/..[/..]]/nvidia/{cuMAJOR,cuda_nvrtc}/lib/libnvrtc.so.MAJOR);
 *   3. the toolkit the library was built with (<toolkit>/lib64, <toolkit>/lib);
 *   4. libnvrtc.so.MAJOR through the dynamic loader's path.
 */
#ifndef KVJIT_NVRTC_LIB_H
#define KVJIT_NVRTC_LIB_H

#include <nvrtc.h>

#include "key.h"
#include "kvjit_tools.h"

typedef struct kvjit_nvrtc {
  int major, minor; /* nvrtcVersion */
  const char *path; /* the file that was loaded (as dladdr reports it) */
  const char *why;  /* why that one: "KVJIT_NVRTC", "a pip wheel next to libkvjit", ... */
  /* The build, wherever it is installed: XXH3-128 of its ELF build id (zero when it has none). */
  kvjit_key identity;
  /* The toolkit's header dirs found from that file, "" when none exists: NVRTC's default search
   * path (NVRTC itself has none). */
  const char *include_dir;
  const char *cccl_dir;
  int num_archs;
  const int *archs; /* nvrtcGetSupportedArchs, ascending */
  const char *(*GetErrorString)(nvrtcResult);
  nvrtcResult (*Version)(int *, int *);
  nvrtcResult (*GetNumSupportedArchs)(int *);
  nvrtcResult (*GetSupportedArchs)(int *);
  nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
  nvrtcResult (*DestroyProgram)(nvrtcProgram *);
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*AddNameExpression)(nvrtcProgram, const char *);
  nvrtcResult (*GetLoweredName)(nvrtcProgram, const char *, const char **);
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
  nvrtcResult (*GetPTX)(nvrtcProgram, char *);
} kvjit_nvrtc;

/**
 * The process-wide NVRTC table, loaded on first use, thread-safely.
 * @return KVJIT_ERR_NO_NVRTC (the last error names every place tried) when none could be loaded.
 */
kvjit_status kvjit_nvrtc_get(const kvjit_nvrtc **out);

/** The loaded NVRTC's build identity (kvjit_nvrtc.identity); zero when none is loaded. */
void kvjit_nvrtc_identity(kvjit_key *out);

/**
 * The NVRTC version that keys are computed for: the loaded NVRTC's; without one,
 * $KVJIT_NVRTC_VERSION (MAJOR.MINOR) or else the version the library was built for, so that a
 * process without NVRTC still finds the entries a build machine made. Never fails.
 */
void kvjit_nvrtc_key_version(int *major, int *minor);

#endif
