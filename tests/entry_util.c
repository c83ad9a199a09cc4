#include "entry_util.h"

#include <stdlib.h>
#include <string.h>

#include "entry.h"
#include "xxh.h"

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

void entry_reseal(uint8_t *buf) {
  uint32_t header = rd32(buf + 12);
  uint64_t sum = XXH3_64bits(buf, header - 8);
  for (int i = 0; i < 8; i++) buf[header - 8 + i] = (uint8_t)(sum >> (8 * i));
}

uint8_t *entry_as_version_2(const uint8_t *buf, size_t len, size_t *out_len) {
  uint32_t header = rd32(buf + 12), block = 4 + KVJIT_ENTRY_DIGESTS_BYTES;
  uint8_t *old = malloc(len - block);
  if (old == NULL) return NULL;
  memcpy(old, buf, header - 8 - block);
  memcpy(old + header - block, buf + header, len - header);
  old[8] = 2;
  uint32_t h = header - block;
  for (int i = 0; i < 4; i++) old[12 + i] = (uint8_t)(h >> (8 * i));
  entry_reseal(old);
  *out_len = len - block;
  return old;
}
