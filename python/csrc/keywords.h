/*
 * A vectorcall's arguments matched to a function's parameter names, the way Python binds a def's
 * (positional first, then keywords; too many, unknown, repeated or missing ones are TypeErrors
 * worded as Python words them), without building a tuple or a dict: the public entry points
 * (kvjit.store_kv_cache, kvjit.transfer_kv) are C functions, so that a call costs no Python frame.
 */
#ifndef KVJIT_KEYWORDS_H
#define KVJIT_KEYWORDS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { KVJIT_CALL_MAX_NAMES = 16 };

/** A function's parameters: the first @p positional may be passed by position, the first
 *  @p required must be passed; the rest are keyword-only with a default (NULL in the result). */
typedef struct kvjit_call_spec {
  const char *function;
  const char *names[KVJIT_CALL_MAX_NAMES];
  int num_names, positional, required;
  PyObject *interned[KVJIT_CALL_MAX_NAMES]; /* made on first use, under the GIL */
} kvjit_call_spec;

/**
 * Bind @p args / @p nargs / @p kwnames (METH_FASTCALL | METH_KEYWORDS) to @p spec's names: out[i]
 * is the argument named names[i] (borrowed) or NULL when left to its default. 0, or -1 with a
 * TypeError set.
 */
int kvjit_call_bind(kvjit_call_spec *spec, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    PyObject **out);

#endif
