/*
 * Does an entry's payload hold what its header claims (payload.c): a binary of the header's arch
 * defining each kernel under the lowered name the loader will ask the driver for.
 */
#ifndef KVJIT_PAYLOAD_H
#define KVJIT_PAYLOAD_H

#include "entry.h"
#include "kvjit_tools.h"

/**
 * Check that the payload of a parsed entry (whole file) is what its header says: for a cubin, a
 * well-formed ELF64 CUDA object for the header's arch in which every lowered name is a defined
 * kernel entry symbol (walked through the section headers to .symtab and its string table, every
 * offset bounds-checked); for PTX, a `.target sm_XY` of the header's arch and an `.entry NAME` for
 * every lowered name. An entry whose names were forged to match checksums is caught here instead
 * of failing in the driver.
 * @return KVJIT_OK, or KVJIT_ERR_CORRUPT with the reason in the last error.
 */
kvjit_status kvjit_entry_check_payload(const kvjit_entry_view *view);

#endif
