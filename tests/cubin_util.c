/* ELF64 sections of a cubin (see cubin_util.h): bounds-checked, little-endian. */
#include "cubin_util.h"

#include <stdio.h>
#include <string.h>

static uint64_t u64_at(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static unsigned u16_at(const uint8_t *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }

static unsigned u32_at(const uint8_t *p) { return u16_at(p) | (unsigned)u16_at(p + 2) << 16; }

int cubin_sections(const uint8_t *elf, size_t len, const char *prefix, cubin_section_fn fn, void *user) {
  if (len < 64 || memcmp(elf, "\177ELF", 4) != 0 || elf[4] != 2) return -1;
  uint64_t shoff = u64_at(elf + 0x28);
  unsigned shentsize = u16_at(elf + 0x3a), shnum = u16_at(elf + 0x3c), shstrndx = u16_at(elf + 0x3e);
  if (shentsize < 64 || shstrndx >= shnum || shoff > len || (uint64_t)shnum * shentsize > len - shoff) return -1;
  const uint8_t *strtab_hdr = elf + shoff + (uint64_t)shstrndx * shentsize;
  uint64_t stroff = u64_at(strtab_hdr + 0x18), strsize = u64_at(strtab_hdr + 0x20);
  if (stroff > len || strsize > len - stroff) return -1;
  size_t plen = strlen(prefix);
  int visited = 0;
  for (unsigned i = 0; i < shnum; i++) {
    const uint8_t *h = elf + shoff + (uint64_t)i * shentsize;
    unsigned name_off = u32_at(h);
    uint64_t off = u64_at(h + 0x18), sz = u64_at(h + 0x20);
    if (name_off >= strsize || off > len || sz > len - off) continue;
    const char *n = (const char *)elf + stroff + name_off;
    if (strnlen(n, strsize - name_off) == strsize - name_off || strncmp(n, prefix, plen) != 0) continue;
    visited++;
    if (fn && fn(n, elf + off, sz, user)) break;
  }
  return visited;
}

typedef struct find_one {
  const char *name;
  const uint8_t *bytes;
  size_t size;
} find_one;

static int match_name(const char *name, const uint8_t *bytes, size_t size, void *user) {
  find_one *f = user;
  if (strcmp(name, f->name) != 0) return 0;
  f->bytes = bytes;
  f->size = size;
  return 1;
}

const uint8_t *cubin_section(const uint8_t *elf, size_t len, const char *name, size_t *size) {
  find_one f = {name, NULL, 0};
  if (cubin_sections(elf, len, name, match_name, &f) < 0 || f.bytes == NULL) return NULL;
  *size = f.size;
  return f.bytes;
}

typedef struct compare {
  const uint8_t *other;
  size_t other_len;
  char *why;
  size_t why_cap;
  int differs;
} compare;

static int compare_one(const char *name, const uint8_t *bytes, size_t size, void *user) {
  compare *c = user;
  size_t other_size = 0;
  const uint8_t *other = cubin_section(c->other, c->other_len, name, &other_size);
  if (other == NULL) {
    snprintf(c->why, c->why_cap, "%s: absent from the other cubin", name);
  } else if (other_size != size) {
    snprintf(c->why, c->why_cap, "%s: %zu bytes, the other %zu", name, size, other_size);
  } else {
    for (size_t i = 0; i < size; i++) {
      if (bytes[i] != other[i]) {
        snprintf(c->why, c->why_cap, "%s: byte %zu of %zu differs", name, i, size);
        break;
      }
    }
    if (memcmp(bytes, other, size) == 0) return 0;
  }
  c->differs = 1;
  return 1;
}

int cubin_text_differs(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len, char *why, size_t why_cap) {
  compare c = {b, b_len, why, why_cap, 0};
  if (why_cap) why[0] = '\0';
  int n = cubin_sections(a, a_len, ".text.", compare_one, &c);
  if (n <= 0) {
    snprintf(why, why_cap, n < 0 ? "malformed cubin" : "no .text section");
    return 1;
  }
  return c.differs;
}
