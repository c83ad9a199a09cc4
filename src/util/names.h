/*
 * Canonical name expressions: "scale<256,float>", "scale<256, float>" and "scale< 256 , float >"
 * are one kernel, one key and one lookup. Whitespace goes except where C++ needs it to keep two
 * tokens apart ("unsigned int", "- -1"); "> >" closes two templates as ">>" does since C++11.
 */
#ifndef KVJIT_NAMES_H
#define KVJIT_NAMES_H

#include <stddef.h>

/**
 * Write the canonical form of @p name (a leading '&' dropped) into @p out, which needs at most
 * strlen(name) + 1 bytes: the form is never longer. Character and string literals are kept as
 * they are.
 * @return its length.
 */
size_t kvjit_name_canonical(const char *name, char *out);

/** The canonical form in a new malloc'd string (NULL when out of memory). */
char *kvjit_name_canonical_dup(const char *name);

#endif
