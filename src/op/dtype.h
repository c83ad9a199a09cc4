/* Element types (kvjit_dtype): names, sizes, parsing. Public (kvjit_tools.h: kvjit_dtype_name(),
 * kvjit_dtype_bytes(), kvjit_dtype_parse()), so that the CLI and the bindings read the one table. */
#ifndef KVJIT_DTYPE_H
#define KVJIT_DTYPE_H

#include "kvjit_tools.h"

#endif
