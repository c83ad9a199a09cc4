/* Entries as older kvjits wrote them, for the tests that read them (entry, miss). */
#ifndef KVJIT_TEST_ENTRY_UTIL_H
#define KVJIT_TEST_ENTRY_UTIL_H

#include <stddef.h>
#include <stdint.h>

/** Recompute the header checksum of an edited entry, as a forger would. */
void entry_reseal(uint8_t *buf);

/** The version-3 entry @p buf as a kvjit before digests wrote it: no digests block, version 2
 *  (malloc'd, *out_len bytes). */
uint8_t *entry_as_version_2(const uint8_t *buf, size_t len, size_t *out_len);

#endif
