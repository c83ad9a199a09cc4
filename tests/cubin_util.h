/*
 * The code inside a cubin, for tests that prove a change of how kernels are compiled (grouped in
 * one program, a speed option) leaves their instructions alone: each function's instructions are
 * its ELF section ".text.<lowered name>", compared byte for byte.
 */
#ifndef KVJIT_CUBIN_UTIL_H
#define KVJIT_CUBIN_UTIL_H

#include <stddef.h>
#include <stdint.h>

/** The bytes of ELF64 section @p name of a cubin (NULL when absent or malformed). */
const uint8_t *cubin_section(const uint8_t *elf, size_t len, const char *name, size_t *size);

/** Called with each section's name and bytes; return non-zero to stop. */
typedef int (*cubin_section_fn)(const char *name, const uint8_t *bytes, size_t size, void *user);

/** Visit every section whose name starts with @p prefix. @return the sections visited, -1 if malformed. */
int cubin_sections(const uint8_t *elf, size_t len, const char *prefix, cubin_section_fn fn, void *user);

/**
 * Compare every ".text.*" section of cubin @p a with the same-named one of cubin @p b: 0 when
 * each exists in @p b with the same bytes, else 1 with a line naming the first difference in
 * @p why (also when @p a has no code at all, or either is malformed).
 */
int cubin_text_differs(const uint8_t *a, size_t a_len, const uint8_t *b, size_t b_len, char *why, size_t why_cap);

#endif
