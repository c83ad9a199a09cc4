/*
 * Does an entry's payload hold what its header claims? The checksums only prove that the bytes are
 * the ones that were written; this proves that they are a binary of the header's arch that
 * defines each kernel under the lowered name the loader will ask the driver for, so that a forged
 * name is a corrupt entry (quarantined, rebuilt) instead of a permanent driver error.
 *
 * Cubin: an ELF64 little-endian CUDA object (e_machine 190). The walk goes from the section header
 * table to the symbol table and the string table it links; every offset and size is checked against
 * the payload before it is read. A kernel is a defined STT_FUNC symbol flagged as an entry
 * (STO_CUDA_ENTRY in st_other), the way the driver finds kernels. The arch is in e_flags; its
 * layout is known (and checked) for CUDA ELF ABI version 8, the one NVRTC 12.8+ writes.
 * PTX: text with a `.target sm_XY` directive and a `.entry NAME` per kernel.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "payload.h"

#include "entry.h"
#include "status.h"

#define ELF_EHDR_BYTES 64u
#define ELF_SHDR_BYTES 64u
#define ELF_SYM_BYTES 24u
#define EM_CUDA 190u
#define ELFOSABI_CUDA 0x41u
#define SHT_SYMTAB 2u
#define SHT_STRTAB 3u
#define STT_FUNC 2u
#define STO_CUDA_ENTRY 0x10u

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static kvjit_status bad(const char *why) { return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: %s", why); }

/* [offset, offset + size) lies inside a buffer of @p len bytes (no overflow). */
static int within(uint64_t offset, uint64_t size, uint64_t len) { return offset <= len && size <= len - offset; }

/* The entry's lowered names, sorted, each marked when the payload defines it. */
typedef struct wanted_name {
  const char *text;
  size_t len;
  int found;
} wanted_name;

static int name_cmp(const char *a, size_t al, const char *b, size_t bl) {
  int c = memcmp(a, b, al < bl ? al : bl);
  return c != 0 ? c : (al > bl) - (al < bl);
}

static int wanted_cmp(const void *pa, const void *pb) {
  const wanted_name *a = pa, *b = pb;
  return name_cmp(a->text, a->len, b->text, b->len);
}

/* Mark the wanted name equal to [text, text + len), if any (binary search). */
static void mark(wanted_name *names, size_t count, const char *text, size_t len) {
  size_t lo = 0, hi = count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = name_cmp(text, len, names[mid].text, names[mid].len);
    if (c == 0) {
      /* Duplicates sit next to each other: mark them all. */
      for (size_t i = mid; i < count && name_cmp(text, len, names[i].text, names[i].len) == 0; i++) names[i].found = 1;
      for (size_t i = mid; i-- > 0 && name_cmp(text, len, names[i].text, names[i].len) == 0;) names[i].found = 1;
      return;
    }
    if (c < 0) hi = mid;
    else lo = mid + 1;
  }
}

static kvjit_status check_cubin(const kvjit_entry_view *v, wanted_name *names, size_t count) {
  const uint8_t *elf = v->payload;
  uint64_t len = v->payload_len;
  if (len < ELF_EHDR_BYTES || memcmp(elf, "\x7f" "ELF", 4) != 0) return bad("cubin payload is not an ELF file");
  if (elf[4] != 2 || elf[5] != 1) return bad("cubin payload is not a 64-bit little-endian ELF file");
  if (le16(elf + 18) != EM_CUDA) return bad("cubin payload is not a CUDA ELF object (e_machine)");
  if (elf[7] == ELFOSABI_CUDA && elf[8] == 8) {
    unsigned sm = (le32(elf + 48) >> 8) & 0xffu;
    if ((int)sm != v->target.arch) {
      return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: the payload is a cubin for sm_%u, the header says sm_%d", sm,
                        v->target.arch);
    }
  }
  uint64_t shoff = le64(elf + 40);
  uint64_t shentsize = le16(elf + 58), shnum = le16(elf + 60);
  if (shentsize != ELF_SHDR_BYTES || shoff == 0) return bad("cubin payload has no section header table");
  if (!within(shoff, ELF_SHDR_BYTES, len)) return bad("cubin section headers lie outside the payload");
  if (shnum == 0) shnum = le64(elf + shoff + 32); /* extended numbering: the count is in section 0 */
  if (shnum > len / ELF_SHDR_BYTES || !within(shoff, shnum * ELF_SHDR_BYTES, len)) {
    return bad("cubin section headers lie outside the payload");
  }
  const uint8_t *symtab = NULL;
  for (uint64_t i = 0; i < shnum && symtab == NULL; i++) {
    const uint8_t *sh = elf + shoff + i * ELF_SHDR_BYTES;
    if (le32(sh + 4) == SHT_SYMTAB) symtab = sh;
  }
  if (symtab == NULL) return bad("cubin payload has no symbol table");
  uint64_t sym_off = le64(symtab + 24), sym_size = le64(symtab + 32), sym_ent = le64(symtab + 56);
  uint32_t link = le32(symtab + 40);
  if (sym_ent != ELF_SYM_BYTES || sym_size % ELF_SYM_BYTES != 0 || !within(sym_off, sym_size, len)) {
    return bad("cubin symbol table lies outside the payload or is malformed");
  }
  if (link == 0 || link >= shnum) return bad("cubin symbol table links no string table");
  const uint8_t *strsh = elf + shoff + (uint64_t)link * ELF_SHDR_BYTES;
  uint64_t str_off = le64(strsh + 24), str_size = le64(strsh + 32);
  if (le32(strsh + 4) != SHT_STRTAB || !within(str_off, str_size, len)) {
    return bad("cubin string table lies outside the payload or is malformed");
  }
  const char *strtab = (const char *)elf + str_off;
  for (uint64_t s = 0; s < sym_size / ELF_SYM_BYTES; s++) {
    const uint8_t *sym = elf + sym_off + s * ELF_SYM_BYTES;
    uint32_t name = le32(sym);
    if ((sym[4] & 0xfu) != STT_FUNC || !(sym[5] & STO_CUDA_ENTRY) || le16(sym + 6) == 0) continue;
    if (name >= str_size) return bad("cubin symbol name lies outside the string table");
    const char *text = strtab + name;
    const char *end = memchr(text, '\0', (size_t)(str_size - name));
    if (end == NULL) return bad("cubin symbol name is not terminated inside the string table");
    mark(names, count, text, (size_t)(end - text));
  }
  return KVJIT_OK;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The PTX directive @p word (".target", ".entry") at @p p: preceded by a blank or the start and
 * followed by a blank. */
static int directive_at(const char *text, size_t len, size_t p, const char *word) {
  size_t n = strlen(word);
  return p + n < len && memcmp(text + p, word, n) == 0 && (p == 0 || is_space(text[p - 1])) && is_space(text[p + n]);
}

static kvjit_status check_ptx(const kvjit_entry_view *v, wanted_name *names, size_t count) {
  const char *text = (const char *)v->payload;
  size_t len = (size_t)v->payload_len;
  int target = -1;
  for (size_t p = 0; p < len; p++) {
    if (text[p] != '.') continue;
    if (target < 0 && directive_at(text, len, p, ".target")) {
      size_t q = p + 7;
      while (q < len && is_space(text[q])) q++;
      if (q + 3 > len || memcmp(text + q, "sm_", 3) != 0) return bad("PTX payload has a .target that is not sm_XY");
      q += 3;
      target = 0;
      while (q < len && text[q] >= '0' && text[q] <= '9' && target < 100000) target = target * 10 + (text[q++] - '0');
    } else if (directive_at(text, len, p, ".entry")) {
      size_t q = p + 6;
      while (q < len && is_space(text[q])) q++;
      size_t start = q;
      while (q < len && !is_space(text[q]) && text[q] != '(' && text[q] != '\0') q++;
      mark(names, count, text + start, q - start);
      p = q - 1;
    }
  }
  if (target < 0) return bad("PTX payload has no .target directive");
  if (target != v->target.arch) {
    return kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: the payload is PTX for sm_%d, the header says sm_%d", target,
                      v->target.arch);
  }
  return KVJIT_OK;
}

kvjit_status kvjit_entry_check_payload(const kvjit_entry_view *v) {
  if (v->payload == NULL) return bad("payload not read");
  /* An alias holds no code: kvjit_entry_parse() checked its form, and its kernel is checked in
   * its bundle (whose own payload this checks) when the alias is used (bundle.c). */
  if (v->target.kind == KVJIT_PAYLOAD_ALIAS) return KVJIT_OK;
  wanted_name *names = calloc(v->num_kernels, sizeof *names);
  if (names == NULL) return kvjit_fail(KVJIT_ERR_OUT_OF_MEMORY, "cache entry: out of memory");
  for (uint32_t i = 0; i < v->num_kernels; i++) {
    const char *name;
    size_t name_len;
    kvjit_entry_kernel(v, i, &name, &name_len, &names[i].text, &names[i].len);
  }
  qsort(names, v->num_kernels, sizeof *names, wanted_cmp);
  kvjit_status st = v->target.kind == KVJIT_PAYLOAD_PTX ? check_ptx(v, names, v->num_kernels)
                                                        : check_cubin(v, names, v->num_kernels);
  for (uint32_t i = 0; st == KVJIT_OK && i < v->num_kernels; i++) {
    if (!names[i].found) {
      st = kvjit_fail(KVJIT_ERR_CORRUPT, "cache entry: lowered name \"%.*s\" is not a kernel of the payload",
                      (int)(names[i].len > 200 ? 200 : names[i].len), names[i].text);
    }
  }
  free(names);
  return st;
}
