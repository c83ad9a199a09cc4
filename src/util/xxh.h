/* xxHash, header-only (XXH_INLINE_ALL), so the library has no run-time dependency on libxxhash. */
#ifndef KVJIT_XXH_H
#define KVJIT_XXH_H

#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#endif
