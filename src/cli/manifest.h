/* kvjit prewarm --manifest (manifest.c): the lines of a manifest file, any op's, as variants. */
#ifndef KVJIT_CLI_MANIFEST_H
#define KVJIT_CLI_MANIFEST_H

#include "cli.h"
#include "variant_list.h"

/* Append the variants of manifest @p path to @p out; exit status (usage errors name FILE:LINE). */
int read_manifest(const char *cmd, const char *path, variant_list *out);

#endif
