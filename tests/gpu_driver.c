/* The tests' and benchmarks' own driver entries (see gpu_driver.h). */
#include "gpu_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static pthread_once_t once = PTHREAD_ONCE_INIT;
static gpu_driver table;
static kvjit_status table_status = KVJIT_ERR_NO_DRIVER;
static char table_reason[256];

/* Through the public API only (the benchmarks link the shared library): kvjit_driver_version()
 * loads and initialises libcuda, then its entries are resolved from that very copy. */
static void load_table(void) {
  table_status = kvjit_driver_version(&table.version);
  if (table_status != KVJIT_OK) {
    snprintf(table_reason, sizeof table_reason, "%s", kvjit_last_error());
    return;
  }
  /* The copy kvjit loaded (KVJIT_LIBCUDA may name another file: it is already in the process). */
  const char *name = getenv("KVJIT_LIBCUDA");
  void *lib = dlopen(name && name[0] ? name : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  void *sym = lib ? dlsym(lib, "cuGetProcAddress_v2") : NULL;
  PFN_cuGetProcAddress_v12000 get_proc = NULL;
  memcpy(&get_proc, &sym, sizeof get_proc);
  if (get_proc == NULL) {
    table_status = KVJIT_ERR_NO_DRIVER;
    snprintf(table_reason, sizeof table_reason, "libcuda is not loaded or has no cuGetProcAddress_v2");
    return;
  }
  CUdriverProcAddressQueryResult found;
#define GPU_DRIVER_RESOLVE_(entry, ver)                                                           \
  if (get_proc(#entry, (void **)&table.entry, ver, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || \
      table.entry == NULL) {                                                                     \
    table_status = KVJIT_ERR_UNSUPPORTED;                                                        \
    snprintf(table_reason, sizeof table_reason, "cuGetProcAddress could not resolve %s (ABI %d)", #entry, ver); \
    return;                                                                                      \
  }
  GPU_DRIVER_ENTRIES(GPU_DRIVER_RESOLVE_)
#undef GPU_DRIVER_RESOLVE_
  table_status = KVJIT_OK;
}

const char *gpu_driver_error(void) {
  pthread_once(&once, load_table);
  return table_reason;
}

kvjit_status gpu_driver_get(const gpu_driver **out) {
  pthread_once(&once, load_table);
  if (table_status != KVJIT_OK) {
    *out = NULL;
    return table_status;
  }
  *out = &table;
  return KVJIT_OK;
}
