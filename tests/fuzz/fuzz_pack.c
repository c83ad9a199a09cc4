/*
 * libFuzzer harness over the pack reader (src/pack.c, `kvjit cache import`): any bytes a pack
 * file can hold, imported into a real cache dir (a temp dir with a 1 MiB budget).
 *  - the input as a pack: never a crash, a read outside a buffer or an allocation beyond what the
 *    file's size allows; a pack it accepts accounts for every entry it declares;
 *  - the input as the one entry of a well-formed pack (right lengths and checksum), so that the
 *    fuzzer reaches each entry's own checks: the pack is accepted, and its entry is imported,
 *    found already cached, or counted bad, exactly one of the three.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache.h"
#include "pack.h"
#include "xxh.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) __builtin_trap();                                                               \
  } while (0)

static kvjit_cache *cache;
static char dir[] = "/tmp/kvjit-fuzz-pack-XXXXXX";

static void remove_dir(void) {
  char cmd[sizeof dir + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "fuzz_pack: could not remove %s\n", dir);
}

static void open_cache(void) {
  CHECK(mkdtemp(dir) != NULL);
  atexit(remove_dir);
  kvjit_cache_config cc = {.write_dir = dir, .read_dirs = "", .max_bytes = 1 << 20, .lock_timeout_ms = 1000, .log = 0};
  CHECK(kvjit_cache_open(&cache, &cc) == KVJIT_OK);
}

/* Import @p len bytes as a pack file (a memfd: a regular file with no path on disk). */
static kvjit_status import_bytes(const uint8_t *bytes, size_t len, uint64_t *imported, uint64_t *present,
                                 uint64_t *bad) {
  int fd = memfd_create("kvjit-fuzz-pack", MFD_CLOEXEC);
  CHECK(fd >= 0);
  CHECK(len == 0 || write(fd, bytes, len) == (ssize_t)len);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  kvjit_status st = kvjit_pack_import(cache, path, imported, present, bad);
  close(fd);
  return st;
}

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (cache == NULL) open_cache();
  uint64_t imported = 0, present = 0, bad = 0;
  kvjit_status st = import_bytes(data, size, &imported, &present, &bad);
  if (st == KVJIT_OK) {
    CHECK(size >= 24);
    uint32_t count = (uint32_t)data[12] | (uint32_t)data[13] << 8 | (uint32_t)data[14] << 16 | (uint32_t)data[15] << 24;
    CHECK(imported + present + bad <= count);
  }
  /* The input as the single entry of a pack that is right as a pack. */
  size_t len = 16 + 8 + size + 8;
  uint8_t *pack = malloc(len);
  CHECK(pack != NULL);
  memcpy(pack, "KVJITPAK", 8);
  put32(pack + 8, 1);
  put32(pack + 12, 1);
  put64(pack + 16, size);
  if (size) memcpy(pack + 24, data, size);
  put64(pack + 24 + size, XXH3_64bits(pack, 24 + size));
  imported = present = bad = 0;
  st = import_bytes(pack, len, &imported, &present, &bad);
  free(pack);
  /* Too short to be an entry: refused as a pack (lengths are checked before reading); else
   * accepted, and the entry is one of imported, present or bad (or failed to be written: I/O). */
  if (size < 88) {
    CHECK(st == KVJIT_ERR_CORRUPT);
  } else if (st == KVJIT_OK) {
    CHECK(imported + present + bad <= 1);
  } else {
    CHECK(st == KVJIT_ERR_IO);
  }
  return 0;
}
