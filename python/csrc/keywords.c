/* A vectorcall's arguments bound to parameter names (keywords.h). */
#include "keywords.h"

#include <string.h>

static int intern_spec(kvjit_call_spec *spec) {
  if (spec->interned[spec->num_names - 1] != NULL) return 0;
  for (int i = 0; i < spec->num_names; i++)
    if (spec->interned[i] == NULL && (spec->interned[i] = PyUnicode_InternFromString(spec->names[i])) == NULL)
      return -1;
  return 0;
}

/* The parameter @p key names: by pointer first (a keyword in the caller's source is interned, as
 * are ours), then by value; -1 for none. */
static int find_name(const kvjit_call_spec *spec, PyObject *key) {
  for (int i = 0; i < spec->num_names; i++)
    if (spec->interned[i] == key) return i;
  for (int i = 0; i < spec->num_names; i++)
    if (PyUnicode_Compare(spec->interned[i], key) == 0) return i;
  PyErr_Clear(); /* a key that is not a str cannot match */
  return -1;
}

int kvjit_call_bind(kvjit_call_spec *spec, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    PyObject **out) {
  if (nargs > spec->positional) {
    PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments but %zd were given", spec->function,
                 spec->positional, nargs);
    return -1;
  }
  Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
  if (nargs > 0) memcpy(out, args, (size_t)nargs * sizeof *out); /* args may be NULL when nargs is 0 */
  memset(out + nargs, 0, (size_t)(spec->num_names - nargs) * sizeof *out);
  if (nkw == 0 && nargs >= spec->required) return 0; /* the common call: positional tensors, defaults */
  if (nkw > 0 && intern_spec(spec)) return -1;
  for (Py_ssize_t j = 0; j < nkw; j++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, j);
    int i = find_name(spec, key);
    if (i < 0) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%S'", spec->function, key);
      return -1;
    }
    if (out[i] != NULL) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", spec->function, spec->names[i]);
      return -1;
    }
    out[i] = args[nargs + j];
  }
  for (int i = 0; i < spec->required; i++) {
    if (out[i] == NULL) {
      PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", spec->function, spec->names[i],
                   i + 1);
      return -1;
    }
  }
  return 0;
}
