"""Helpers shared by the test files; the same under pytest and under run.py's built-in runner.

Tests are plain `test_*` functions without fixtures. parametrize() and skip() map to pytest's when
pytest is importable; raises() is our own so both runners behave alike.
"""

import contextlib
import ctypes
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# Test the source tree's package unless told to test an installed one.
if os.environ.get("KVJIT_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.dirname(HERE))

try:
    import pytest
except ImportError:
    pytest = None

import kvjit  # noqa: E402


# A program for the generic loader's tests: a template kernel (a name expression) and a plain one.
LOADER_SRC = """
template <int N, typename T>
__global__ void scale(T *x, T factor, int n) {
  int i = blockIdx.x * N + threadIdx.x;
  if (i < n) x[i] *= factor;
}
extern "C" __global__ void fill(int *x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}
"""


class SkipTest(Exception):
    """Raised by skip() without pytest; run.py counts it as a skip."""


def skip(reason):
    if pytest is not None:
        pytest.skip(reason)
    raise SkipTest(reason)


def skip_exceptions():
    """Exception types that mean "skipped" (for the built-in runner)."""
    import unittest

    types = [SkipTest, unittest.SkipTest]
    if pytest is not None:
        types.append(pytest.skip.Exception)
    return tuple(types)


def parametrize(argnames, values):
    """pytest.mark.parametrize, also recorded for the built-in runner (outermost first)."""
    values = list(values)

    def mark(f):
        f.__dict__.setdefault("kvjit_params", []).insert(0, (argnames, values))
        if pytest is not None:
            return pytest.mark.parametrize(argnames, values)(f)
        return f

    return mark


class raises:
    """`with raises(ValueError, match="k_cache"):` -- the exception must be raised, be an instance
    of @p exc, and its message must match @p match (re.search). The exception is in .value."""

    def __init__(self, exc, match=None):
        self.exc = exc
        self.match = match
        self.value = None

    def __enter__(self):
        return self

    def __exit__(self, tp, value, tb):
        if tp is None:
            raise AssertionError(f"did not raise {self.exc}")
        if not issubclass(tp, self.exc):
            return False
        if self.match is not None and not re.search(self.match, str(value)):
            raise AssertionError(f"{tp.__name__}({str(value)!r}) does not match {self.match!r}")
        self.value = value
        return True


@contextlib.contextmanager
def tempdir():
    with tempfile.TemporaryDirectory(prefix="kvjit-py-") as d:
        yield d


_driver = None


def has_driver():
    """True when libkvjit found a CUDA driver (then batch > 0 stores really launch)."""
    global _driver
    if _driver is None:
        try:
            kvjit.driver_version()
            _driver = True
        except kvjit.Error:
            _driver = False
    return _driver


def need_gpu():
    """torch, when it is importable and sees a CUDA device and kvjit sees a driver; else skip."""
    try:
        import torch
    except ImportError:
        skip("no torch")
    if not torch.cuda.is_available():
        skip("torch sees no CUDA device")
    if not has_driver():
        skip("kvjit finds no CUDA driver")
    return torch


class FakeCAI:
    """A device tensor that exists only as a __cuda_array_interface__ (fake pointers)."""

    def __init__(self, shape, typestr, ptr=0x7F0000000000, strides=None, stream=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr, "data": (ptr, False), "strides": strides,
            "version": 3, "stream": stream,
        }


# ---- DLPack without a framework -----------------------------------------------------------------


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeDLPack:
    """A CUDA tensor exported only through __dlpack__ (a hand-built DLManagedTensor capsule). Its
    fields may lie: ndim need not match the shape array (the hostile-producer tests)."""

    def __init__(self, shape, code, bits, ptr, strides=None, device_type=2, device_id=0, byte_offset=0,
                 ndim=None):
        n = len(shape)
        self._shape = (ctypes.c_int64 * max(n, 1))(*shape)
        self._strides = (ctypes.c_int64 * n)(*strides) if strides else None
        self._managed = _DLManagedTensor(_DLTensor(
            ptr, device_type, device_id, n if ndim is None else ndim, code, bits, 1, ctypes.addressof(self._shape),
            ctypes.addressof(self._strides) if self._strides else None, byte_offset), None, None)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)
