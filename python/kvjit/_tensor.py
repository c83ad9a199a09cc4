"""What kvjit needs to know about a device tensor, read from a torch.Tensor, an object with
``__cuda_array_interface__`` (CuPy, Numba, ...) or one with ``__dlpack__``; streams; devices.

A tensor is described by the tuple

    (ptr, shape, strides, itemsize, dtype, device, stream, is_torch)

with strides in elements, dtype a short name ("f16", "bf16", "f32", "fp8_e4m3", "fp8_e5m2", "u8",
"i32", "i64", ... or the producer's own spelling for anything else), device the CUDA ordinal or
None when the protocol does not say (CAI), stream the producer's stream hint (CAI) or None.
"""

import ctypes
import os
import sys

DESCRIBE_ERRORS = (TypeError, ValueError)

# ---- torch -------------------------------------------------------------------------------------

torch = None  # the torch module, once a torch tensor was seen (kvjit never imports torch itself)
_TORCH_DTYPES = {}  # torch dtype -> (short name, element size)
# Set by _init_torch: the current device ordinal and the raw current stream of a device; both
# are cheap C calls (no Stream object is built).
torch_get_device = None
torch_raw_stream = None


def _init_torch(module):
    global torch, torch_get_device, torch_raw_stream
    names = {
        "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
        "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
        "uint8": "u8", "int8": "i8", "int16": "i16", "uint16": "u16", "int32": "i32", "uint32": "u32",
        "int64": "i64", "uint64": "u64", "bool": "bool",
    }
    for attr, key in names.items():
        dt = getattr(module, attr, None)
        if dt is not None:
            size = getattr(dt, "itemsize", None)  # torch >= 2.1
            if size is None:
                size = module.empty(0, dtype=dt).element_size()
            _TORCH_DTYPES[dt] = (key, size)
    c = getattr(module, "_C", None)
    get_device = getattr(c, "_cuda_getDevice", None)
    raw_stream = getattr(c, "_cuda_getCurrentRawStream", None)
    torch_get_device = get_device or module.cuda.current_device
    torch_raw_stream = raw_stream or (lambda dev: module.cuda.current_stream(dev).cuda_stream)
    torch = module


def _describe_torch(t, name):
    dev = t.get_device()
    if dev < 0:
        raise ValueError(f"{name}: must be a CUDA tensor, got one on {t.device}")
    known = _TORCH_DTYPES.get(t.dtype) or torch_dtype(t)
    return (t.data_ptr(), t.shape, t.stride(), known[1], known[0], dev, None, True)


def torch_dtype(t):
    """(short name, element size) of @p t's dtype; a dtype with no short name is called as torch
    calls it, without "torch." ("complex64"), as the C paths call it (src/torch/store_args.c)."""
    known = _TORCH_DTYPES.get(t.dtype)
    if known is None:
        known = (str(t.dtype).replace("torch.", "", 1), t.element_size())
    return known


# ---- __cuda_array_interface__ ------------------------------------------------------------------

_CAI_DTYPES = {
    "f2": "f16", "f4": "f32", "f8": "f64", "u1": "u8", "i1": "i8", "b1": "bool", "i2": "i16",
    "u2": "u16", "i4": "i32", "u4": "u32", "i8": "i64", "u8": "u64",
}


def contiguous_strides(shape):
    n = len(shape)
    if n == 3:
        return (shape[1] * shape[2], shape[2], 1)
    if n == 2:
        return (shape[1], 1)
    if n == 1:
        return (1,)
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


_cai_types = {}  # typestr -> (itemsize, dtype name), filled as typestrs are seen


def _cai_type(typestr, name):
    if typestr[:1] == ">":
        raise TypeError(f"{name}: big-endian data ({typestr!r}) is not supported")
    try:
        itemsize = int(typestr[2:])
    except (TypeError, ValueError):
        raise TypeError(f"{name}: unknown typestr {typestr!r} in __cuda_array_interface__") from None
    entry = (itemsize, _CAI_DTYPES.get(typestr[1:], typestr))
    _cai_types[typestr] = entry
    return entry


def _describe_cai(obj, name):
    cai = obj.__cuda_array_interface__
    try:
        shape = cai["shape"]
        typestr = cai["typestr"]
        ptr = cai["data"][0] or 0
    except (KeyError, TypeError, IndexError) as e:
        raise TypeError(f"{name}: malformed __cuda_array_interface__ ({e!r})") from None
    if type(shape) is not tuple:
        shape = tuple(shape)
    if type(ptr) is not int or not 0 <= ptr < 2**64:
        raise ValueError(f"{name}: data pointer must be an int 0..2**64-1, got {ptr!r}")
    for size in shape:
        if type(size) is not int or not 0 <= size < 2**63:
            raise ValueError(f"{name}: shape {list(shape)}: each size must be an int 0..2**63-1")
    itemsize, dtype = _cai_types.get(typestr) or _cai_type(typestr, name)
    get = cai.get
    if get("mask") is not None:
        raise TypeError(f"{name}: masked arrays are not supported")
    byte_strides = get("strides")
    if byte_strides is None:
        strides = contiguous_strides(shape)
    else:
        if len(byte_strides) != len(shape):
            raise TypeError(f"{name}: {len(byte_strides)} strides for {len(shape)} dims")
        for s in byte_strides:
            if type(s) is not int or not -2**63 <= s < 2**63:
                raise ValueError(f"{name}: strides {list(byte_strides)}: each must be an int of 64 bits")
        strides = tuple([s // itemsize for s in byte_strides])
        for s in byte_strides:
            if s % itemsize:
                raise ValueError(f"{name}: stride {s} bytes is not a multiple of the {itemsize}-byte element")
    return (ptr, shape, strides, itemsize, dtype, None, get("stream"), False)


# ---- DLPack ------------------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_DL_CUDA = 2
_DL_CUDA_MANAGED = 13
# (code, bits) -> name; codes: 0 int, 1 uint, 2 float, 4 bfloat, 10 float8_e4m3fn, 12 float8_e5m2.
_DL_DTYPES = {
    (0, 8): "i8", (0, 16): "i16", (0, 32): "i32", (0, 64): "i64",
    (1, 8): "u8", (1, 16): "u16", (1, 32): "u32", (1, 64): "u64",
    (2, 16): "f16", (2, 32): "f32", (2, 64): "f64", (4, 16): "bf16", (6, 8): "bool",
    (10, 8): "fp8_e4m3", (12, 8): "fp8_e5m2",
    # No rule, named as torch names them (and as the C paths do, src/torch/dlpack_view.h).
    (5, 32): "complex32", (5, 64): "complex64", (5, 128): "complex128", (11, 8): "float8_e4m3fnuz",
    (13, 8): "float8_e5m2fnuz", (14, 8): "float8_e8m0fnu",
}
_capsule_pointer = None


def _describe_dlpack(obj, name):
    global _capsule_pointer
    if _capsule_pointer is None:
        f = ctypes.pythonapi.PyCapsule_GetPointer
        f.restype = ctypes.c_void_p
        f.argtypes = [ctypes.py_object, ctypes.c_char_p]
        _capsule_pointer = f
    capsule = obj.__dlpack__()
    # The capsule is not consumed (not renamed "used_dltensor"): dropping it calls the producer's
    # deleter, while obj itself keeps the memory alive for the call.
    managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    t = managed.dl_tensor
    if t.device.device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise ValueError(f"{name}: must be CUDA memory, got DLPack device type {t.device.device_type}")
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if lanes != 1 or bits % 8:
        raise TypeError(f"{name}: DLPack dtype code {code} bits {bits} lanes {lanes} is not supported")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else contiguous_strides(shape)
    ptr = (t.data or 0) + t.byte_offset
    dtype = _DL_DTYPES.get((code, bits), f"dlpack:{code}:{bits}")
    return (ptr, shape, strides, bits // 8, dtype, t.device.device_id, None, False)


# ---- dispatch ----------------------------------------------------------------------------------

_describers = {}  # type -> describer: one dict lookup per tensor on the hot path


def describe(obj, name):
    """The description tuple of a device tensor; TypeError/ValueError naming @p name otherwise."""
    f = _describers.get(type(obj))
    if f is None:
        f = _describer_for(obj, name)
    return f(obj, name)


def _describer_for(obj, name):
    tp = type(obj)
    module = sys.modules.get("torch")
    if module is not None and isinstance(obj, module.Tensor):
        if torch is None:
            _init_torch(module)
        f = _describe_torch
    elif hasattr(tp, "__cuda_array_interface__"):
        f = _describe_cai
    elif hasattr(tp, "__dlpack__"):
        f = _describe_dlpack
    elif "__cuda_array_interface__" in getattr(obj, "__dict__", ()):
        return _describe_cai  # set per instance: not a property of the type, so not cached by type
    else:
        raise TypeError(f"{name}: expected a CUDA tensor (torch.Tensor, or an object with "
                        f"__cuda_array_interface__ or __dlpack__), got {tp.__name__}")
    _describers[tp] = f
    return f


def is_tensor(obj):
    """True for anything describe() accepts the type of (without looking at the device)."""
    if type(obj) in _describers:
        return True
    module = sys.modules.get("torch")
    if module is not None and isinstance(obj, module.Tensor):
        return True
    tp = type(obj)
    return (hasattr(tp, "__cuda_array_interface__") or hasattr(tp, "__dlpack__")
            or "__cuda_array_interface__" in getattr(obj, "__dict__", ()))


# ---- streams and devices -----------------------------------------------------------------------


def stream_handle(stream):
    """A CUstream handle as an int from an int, a torch/CuPy stream, a __cuda_stream__ object or
    a ctypes pointer; 0 (the legacy default stream) for None."""
    if stream is None:
        return 0
    if type(stream) is int:
        if not 0 <= stream < 2**64:
            raise ValueError(f"stream: a CUstream handle is 0..2**64-1, got {stream}")
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if type(h) is int:
            return h
        if isinstance(h, ctypes.c_void_p):
            return h.value or 0
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        pair = proto()
        return int(pair[1])
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream_handle(int(stream))
    raise TypeError(f"stream: expected an int CUstream handle or a stream object (torch.cuda.Stream, "
                    f"__cuda_stream__), got {type(stream).__name__}")


def torch_device_guard(dev):
    """`with torch.cuda.device(dev)` (only called when dev is not already current)."""
    return torch.cuda.device(dev)


_libcuda = None


def make_primary_context_current(ordinal):
    """Make device @p ordinal's primary context (the one the CUDA runtime, hence torch, uses)
    current on this thread. kvjit launches in the thread's current context; a thread that has
    made no runtime call yet has none. Returns False when that cannot be done."""
    global _libcuda
    try:
        if _libcuda is None:
            _libcuda = ctypes.CDLL(os.environ.get("KVJIT_LIBCUDA") or "libcuda.so.1")
        lib = _libcuda
        dev = ctypes.c_int()
        ctx = ctypes.c_void_p()
        return (lib.cuInit(0) == 0 and lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(ordinal)) == 0
                and lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
                and lib.cuCtxSetCurrent(ctx) == 0)
    except (OSError, AttributeError):
        return False
