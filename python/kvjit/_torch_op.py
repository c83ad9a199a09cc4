"""torch.ops.kvjit.store_kv_cache: kvjit's store as a PyTorch operator.

The schema, the fake (meta) implementation and a CPU implementation (PyTorch indexing) are
registered here; the CUDA kernel is C (libkvjit_torch, src/torch/op.cpp), registered through
PyTorch's stable C ABI, so it runs without Python on the dispatcher's path: eagerly, inside
torch.compile graphs (the mutated caches are declared, so Dynamo traces it with no graph break)
and inside torch.cuda.graph capture, always on torch's current stream.

Registration needs torch already imported: it happens at `import kvjit` when torch is, else on
register() (also called by kvjit.store_kv_cache() the first time it sees a torch tensor).
"""

import ctypes
import os
import re
import sys
import threading

from . import _context, _lib

NAMESPACE = "kvjit"
SCHEMA = ("store_kv_cache(Tensor k, Tensor? v, Tensor(a!) k_cache, Tensor(b!)? v_cache, Tensor indices, "
          "int num_slots=-1, int skip_slot=-1, int split=0, int pdl=0, Tensor? k_scale=None, Tensor? v_scale=None, "
          "int cache_dtype=0) -> ()")

store_op = None  # torch.ops.kvjit.store_kv_cache.default once registered
fast_store = None  # _kvjit_ext.store once loaded: the eager path for torch tensors
_is_compiling = None  # torch.compiler.is_compiling
Tensor = None    # torch.Tensor once registered (the friendly entry point's isinstance test)
_error = None    # why registration failed, once it has
_lock = threading.Lock()
_keep = []       # torch.library.Library objects: dropping one would unregister what it holds
_glue = None     # the loaded libkvjit_torch


# ---- the C glue --------------------------------------------------------------------------------


class _TorchSetup(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("libkvjit", ctypes.c_char_p),
        ("libtorch_cpu", ctypes.c_char_p),
        ("libtorch_cuda", ctypes.c_char_p),
        ("ns", ctypes.c_char_p),
        ("dispatch_key", ctypes.c_char_p),
        ("context", ctypes.c_void_p),
    ]


class _TensorView(ctypes.Structure):
    _fields_ = [
        ("present", ctypes.c_int),
        ("data", ctypes.c_size_t),
        ("ndim", ctypes.c_int64),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("itemsize", ctypes.c_int64),
        ("kind", ctypes.c_int),
        ("code", ctypes.c_int32),
        ("device_type", ctypes.c_int32),
        ("device_index", ctypes.c_int32),
    ]


_REQUEST_TENSORS = ("k", "v", "k_cache", "v_cache", "indices", "k_scale", "v_scale")


class _StoreRequest(ctypes.Structure):
    _fields_ = [(name, _TensorView) for name in _REQUEST_TENSORS] + [
        (name, ctypes.c_int64) for name in ("num_slots", "skip_slot", "split", "pdl", "cache_dtype")]


_TORCH_SETUP_VERSION = 1
_REQUEST_VALUE_ERROR = 1
_REQUEST_TYPE_ERROR = 2


def glue_path(lib):
    """libkvjit_torch sits beside the libkvjit it belongs to (the wheel's kvjit/, a build's src/)."""
    return os.path.join(os.path.dirname(os.path.realpath(lib.path)), "libkvjit_torch.so")


def _load_glue(lib):
    global _glue
    if _glue is None:
        path = glue_path(lib)
        if not os.path.exists(path):
            raise _lib.LibraryNotFoundError(f"kvjit: {path} is missing (the torch op's kernel is built with libkvjit "
                                            f"when a C++ compiler is found)")
        glue = ctypes.CDLL(path)
        glue.kvjit_torch_register.restype = ctypes.c_int
        glue.kvjit_torch_register.argtypes = [ctypes.POINTER(_TorchSetup), ctypes.c_char_p, ctypes.c_size_t]
        glue.kvjit_torch_store_request_args.restype = ctypes.c_int
        glue.kvjit_torch_store_request_args.argtypes = [ctypes.POINTER(_StoreRequest),
                                                        ctypes.POINTER(_lib.StoreKvArgs), ctypes.c_char_p,
                                                        ctypes.c_size_t]
        _glue = glue
    return _glue


def register_kernel(torch, ns, dispatch_key):
    """Register the C kernel for @p ns::store_kv_cache (schema already defined) on a dispatch key."""
    lib = _lib.load()
    glue = _load_glue(lib)
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    cuda = os.path.join(torch_lib, "libtorch_cuda.so")
    setup = _TorchSetup(_TORCH_SETUP_VERSION, os.fsencode(lib.path), os.fsencode(os.path.join(torch_lib, "libtorch_cpu.so")),
                        os.fsencode(cuda) if os.path.exists(cuda) else None, ns.encode(), dispatch_key.encode(),
                        _context.default_context().handle)
    err = ctypes.create_string_buffer(512)
    if glue.kvjit_torch_register(ctypes.byref(setup), err, len(err)) != 0:
        raise RuntimeError(err.value.decode(errors="replace"))


def define(torch, ns):
    """A FRAGMENT library of @p ns with store_kv_cache's schema and fake implementation."""
    library = torch.library.Library(ns, "FRAGMENT")
    library.define(SCHEMA, tags=(torch.Tag.needs_fixed_stride_order,))
    library._register_fake("store_kv_cache", _fake)
    _keep.append(library)
    return library


# ---- registration ------------------------------------------------------------------------------


def register():
    """Register torch.ops.kvjit.store_kv_cache (needs torch imported); returns the op overload.
    Idempotent; raises RuntimeError (or LibraryNotFoundError) saying why it cannot."""
    global store_op, Tensor, _error
    if store_op is not None:
        return store_op
    with _lock:
        if store_op is not None:
            return store_op
        torch = sys.modules.get("torch")
        if torch is None:
            import torch
        try:
            if not _keep:
                library = define(torch, NAMESPACE)
                library.impl("store_kv_cache", _store_cpu, "CPU")
            if torch.version.cuda is not None:
                register_kernel(torch, NAMESPACE, "CUDA")
        except Exception as e:
            _error = f"{type(e).__name__}: {e}"
            raise
        _error = None
        _load_fast_path(torch)
        Tensor = torch.Tensor
        store_op = torch.ops.kvjit.store_kv_cache.default
        return store_op


def ext_path(lib):
    """_kvjit_ext sits beside libkvjit too (built for this Python: its suffix names the ABI)."""
    import importlib.machinery

    return os.path.join(os.path.dirname(os.path.realpath(lib.path)),
                        "_kvjit_ext" + importlib.machinery.EXTENSION_SUFFIXES[0])


def _load_fast_path(torch):
    """Load and set up _kvjit_ext when it is there and this torch has the DLPack exchange API
    (2.10+); without it every eager call takes the op's path, which is only slower."""
    global fast_store, _is_compiling
    import importlib.machinery
    import importlib.util

    lib = _lib.load()
    path = ext_path(lib)
    if not os.path.exists(path) or not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        return
    loader = importlib.machinery.ExtensionFileLoader("kvjit._kvjit_ext", path)
    spec = importlib.util.spec_from_file_location("kvjit._kvjit_ext", path, loader=loader)
    ext = importlib.util.module_from_spec(spec)
    loader.exec_module(ext)
    try:
        cuda = ctypes.CDLL(os.environ.get("KVJIT_LIBCUDA") or "libcuda.so.1")
        get_device = ctypes.cast(cuda.cuCtxGetDevice, ctypes.c_void_p).value
    except (OSError, AttributeError):
        get_device = None  # no driver: CUDA tensors cannot exist, the op's path says so
    address = lambda name: ctypes.cast(lib.fn[name], ctypes.c_void_p).value  # noqa: E731
    ext.init(_context.default_context().handle, address("kvjit_store_kv_cache"), address("kvjit_last_error"),
             address("kvjit_status_name"), get_device, torch.Tensor)
    _is_compiling = torch.compiler.is_compiling
    fast_store = ext.store


def try_register():
    """register() when torch is imported and no earlier attempt failed; else None."""
    if store_op is not None:
        return store_op
    if _error is not None or "torch" not in sys.modules:
        return None
    try:
        return register()
    except Exception:
        return None


def registration_error():
    """Why the op could not be registered (None when it was, or was not tried)."""
    return _error


# ---- errors ------------------------------------------------------------------------------------

_ERROR_PREFIXES = (("kvjit ValueError: ", ValueError), ("kvjit TypeError: ", TypeError))


def translate(error):
    """The exception kvjit.store_kv_cache() raises for a RuntimeError from the op's kernel: the
    ValueError/TypeError or kvjit.Error it describes; None when the error is not the kernel's."""
    text = str(error)
    for prefix, cls in _ERROR_PREFIXES:
        at = text.find(prefix)
        if at >= 0:
            return cls(text[at + len(prefix):].split("\n", 1)[0])
    # The dispatcher's own refusal of an argument's type (a str where a Tensor goes, ...).
    m = re.search(r"Expected a value of type '([^']+)' for argument '(\w+)' but instead found type '([^']+)'", text)
    if m:
        return TypeError(f"{m.group(2)}: expected {m.group(1)}, got {m.group(3)}")
    at = text.find("kvjit ERR_")
    if at >= 0:
        line = text[at + len("kvjit "):].split("\n", 1)[0]
        name, _, message = line.partition(": ")
        status = next((s for s, n in _lib.STATUS_NAMES.items() if n == name), None)
        if status is not None:
            return _lib._error_class(status)(status, message, name)
    return None


# ---- fake and CPU implementations --------------------------------------------------------------


def _fake(k, v, k_cache, v_cache, indices, num_slots=-1, skip_slot=-1, split=0, pdl=0, k_scale=None, v_scale=None,
          cache_dtype=0):
    """Shapes only: the op mutates its caches in place and returns nothing."""
    return None


_KINDS = {
    "float16": 1, "bfloat16": 2, "float32": 3, "float8_e4m3fn": 4, "float8_e5m2": 5, "uint8": 6, "int8": 7,
    "int32": 8, "int64": 9,
}
_codes = {}


def _view(t, keep):
    view = _TensorView()
    if t is None:
        return view
    sizes = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
    strides = (ctypes.c_int64 * max(t.dim(), 1))(*t.stride())
    keep.append((sizes, strides))
    name = str(t.dtype).replace("torch.", "")
    code = _codes.setdefault(t.dtype, len(_codes) + 1)
    view.present = 1
    view.data = t.data_ptr()
    view.ndim = t.dim()
    view.sizes = sizes
    view.strides = strides
    view.itemsize = t.element_size()
    view.kind = _KINDS.get(name, 0)
    view.code = code
    view.device_type = 0 if t.device.type == "cpu" else 1
    view.device_index = -1 if t.device.index is None else t.device.index
    return view


def request_args(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale, cache_dtype):
    """The kvjit_store_kv_args the op's kernel derives from these tensors (the C rules, so the CPU
    implementation reads the same layouts as the CUDA one); ValueError/TypeError otherwise."""
    keep = []
    req = _StoreRequest()
    for name, t in zip(_REQUEST_TENSORS, (k, v, k_cache, v_cache, indices, k_scale, v_scale)):
        setattr(req, name, _view(t, keep))
    req.num_slots, req.skip_slot, req.split, req.pdl, req.cache_dtype = num_slots, skip_slot, split, pdl, cache_dtype
    args = _lib.StoreKvArgs()
    msg = ctypes.create_string_buffer(512)
    kind = _load_glue(_lib.load()).kvjit_torch_store_request_args(ctypes.byref(req), ctypes.byref(args), msg,
                                                                  len(msg))
    if kind:
        raise (TypeError if kind == _REQUEST_TYPE_ERROR else ValueError)(msg.value.decode(errors="replace"))
    return args


def _bytes(torch, t, base, count, row_bytes, stride_bytes):
    """[count, row_bytes] uint8 view of @p t's storage at byte address @p base."""
    storage = t.untyped_storage()
    offset = base - storage.data_ptr()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, offset, (count, row_bytes),
                                                                   (stride_bytes, 1))


_FP8_MAX = {_lib.DTYPE_FP8_E4M3: 448.0, _lib.DTYPE_FP8_E5M2: 57344.0}


def _store_rows(torch, src, dst_bytes, sel, slots, a, row_bytes, scale, src_stride):
    """dst rows[slots] = src rows[sel], copied or quantized."""
    if a.cache_dtype == _lib.DTYPE_BYTES:
        src_bytes = _bytes(torch, src, src.data_ptr(), a.batch, row_bytes, src_stride)
        dst_bytes[slots] = src_bytes[sel]
        return
    elems = row_bytes // src.element_size()
    rows = torch.as_strided(src, (a.batch, elems), (src_stride // src.element_size(), 1), src.storage_offset())
    x = rows[sel].float()
    if a.scale_kind == _lib.SCALE_PER_TENSOR:
        x = x / scale.reshape(1).float()
    elif a.scale_kind == _lib.SCALE_PER_HEAD:
        x = (x.view(x.shape[0], a.num_heads, -1) / scale.reshape(a.num_heads, 1).float()).view(x.shape[0], elems)
    fp8 = torch.float8_e4m3fn if a.cache_dtype == _lib.DTYPE_FP8_E4M3 else torch.float8_e5m2
    fmax = _FP8_MAX[a.cache_dtype]
    # Clamping first makes PyTorch's cast saturate like kvjit's (NaN stays NaN).
    dst_bytes[slots] = x.clamp(-fmax, fmax).to(fp8).view(torch.uint8)


def _store_cpu(k, v, k_cache, v_cache, indices, num_slots=-1, skip_slot=-1, split=0, pdl=0, k_scale=None,
               v_scale=None, cache_dtype=0):
    """The op on CPU tensors, with PyTorch indexing: the same layouts, skips and conversion."""
    torch = sys.modules["torch"]
    a = request_args(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale, v_scale,
                     cache_dtype)
    if a.batch == 0:
        return
    ids = torch.as_strided(indices, (a.batch,), (a.index_stride,), indices.storage_offset()).to(torch.int64)
    keep = (ids >= 0) & (ids < a.num_slots)
    if a.skip_slot != _lib.NO_SKIP_SLOT:
        keep &= ids != a.skip_slot
    sel = keep.nonzero().flatten()
    slots = ids[sel]
    quant = a.cache_dtype != _lib.DTYPE_BYTES
    k_cache_row = a.k_row_bytes // k.element_size() if quant else a.k_row_bytes
    kc = _bytes(torch, k_cache, a.k_cache, a.num_slots, k_cache_row, a.k_cache_stride)
    _store_rows(torch, k, kc, sel, slots, a, a.k_row_bytes, k_scale, a.k_stride)
    if a.v:
        v_cache_row = a.v_row_bytes // v.element_size() if quant else a.v_row_bytes
        vc = _bytes(torch, v_cache, a.v_cache, a.num_slots, v_cache_row, a.v_cache_stride)
        _store_rows(torch, v, vc, sel, slots, a, a.v_row_bytes, v_scale, a.v_stride)


# ---- the friendly entry point ------------------------------------------------------------------

_PDL_CODES = {"auto": _lib.PDL_AUTO, "on": _lib.PDL_ON, "off": _lib.PDL_OFF, None: _lib.PDL_AUTO, True: _lib.PDL_ON,
              False: _lib.PDL_OFF}
_CACHE_DTYPE_CODES = {None: 0, "fp8_e4m3": _lib.DTYPE_FP8_E4M3, "e4m3": _lib.DTYPE_FP8_E4M3,
                      "float8_e4m3fn": _lib.DTYPE_FP8_E4M3, "fp8_e4m3fn": _lib.DTYPE_FP8_E4M3,
                      "fp8_e5m2": _lib.DTYPE_FP8_E5M2, "e5m2": _lib.DTYPE_FP8_E5M2, "float8_e5m2": _lib.DTYPE_FP8_E5M2}


def _op_int(value, name, default, low):
    """@p value as the op's int argument (@p default for None); ValueError naming @p name otherwise."""
    if value is None:
        return default
    if type(value) is not int or not low <= value < 2**63:
        raise ValueError(f"{name}: must be None or an int {low}..2**63-1, got {value!r}")
    return value


def op_arguments(num_slots, skip_slot, split, pdl, cache_dtype):
    """The op's scalar arguments from the friendly keywords, checked (each error names its argument)."""
    mode = _PDL_CODES.get(pdl) if type(pdl) in (str, bool) or pdl is None else None
    if mode is None:
        raise ValueError(f"pdl: expected 'auto', 'on', 'off', True or False, got {pdl!r}")
    if cache_dtype is None:
        code = 0
    else:
        from ._store import dtype_name

        code = _CACHE_DTYPE_CODES.get(dtype_name(cache_dtype, "cache_dtype"))
        if code is None:
            raise ValueError(f"cache_dtype: must be 'fp8_e4m3' or 'fp8_e5m2', got {cache_dtype!r}")
    return (_op_int(num_slots, "num_slots", -1, 1), _op_int(skip_slot, "skip_slot", -1, 0),
            _op_int(split, "split", 0, 0), mode, code)


def store_kv_cache(k, v, k_cache, v_cache, indices, *, num_slots=None, skip_slot=None, split=0, pdl="auto",
                   k_scale=None, v_scale=None, cache_dtype=None, stream=None, context=None):
    """``k_cache[indices] = k; v_cache[indices] = v`` in one kernel, on the current stream.

    k, v: [B, H, D] or [B, H*D] CUDA tensors (torch, __cuda_array_interface__ or DLPack), each
    token's row contiguous. k_cache, v_cache: [slots, H, D], [slots, H*D] or paged
    [pages, page_size, H(, D)]. v and v_cache may both be None (K only). indices: [B] int32 or
    int64; ids < 0 and == skip_slot are skipped, ids >= num_slots are skipped and counted
    (oob_count()). num_slots defaults to the caches' slot count.

    An fp8 cache (torch.float8_e4m3fn / float8_e5m2, or uint8 with cache_dtype="fp8_e4m3" /
    "fp8_e5m2") fed from float16/bfloat16/float32 stores fp8(x / scale): k_scale, v_scale are
    float32 CUDA tensors of 1 element (per tensor) or H elements (per head), or None (no scale).

    split: 0 automatic, else the parts each row is split into; pdl: "auto", "on", "off".
    stream: default torch.cuda.current_stream() for torch tensors, else the
    __cuda_array_interface__ stream of k, else the legacy default stream.

    torch tensors go through kvjit's C extension in eager (no Python argument handling) and
    through torch.ops.kvjit.store_kv_cache inside torch.compile (no graph break), unless
    stream= or context= is given.
    Raises ValueError/TypeError naming the argument, kvjit.Error for library failures.
    """
    if context is not None:
        context = _context.context_arg(context)
    op = store_op or try_register()
    if op is not None and stream is None and context is None and isinstance(k, Tensor):
        ns, skip, sp, mode, cd = op_arguments(num_slots, skip_slot, split, pdl, cache_dtype)
        try:
            fast = fast_store
            # _kvjit_ext in eager (answers NotImplemented for what it leaves to the op); the op
            # itself where Dynamo traces (it cannot trace into an extension).
            if fast is not None and not _is_compiling() and \
                    fast(k, v, k_cache, v_cache, indices, ns, skip, sp, mode, k_scale, v_scale, cd) is None:
                return
            op(k, v, k_cache, v_cache, indices, ns, skip, sp, mode, k_scale, v_scale, cd)
            return
        except RuntimeError as e:
            mapped = translate(e)
            if mapped is None:
                raise
            raise mapped from None
    from . import _store

    _store.store_kv_cache(k, v, k_cache, v_cache, indices, num_slots=num_slots, skip_slot=skip_slot, split=split,
                          pdl=pdl, k_scale=k_scale, v_scale=v_scale, cache_dtype=cache_dtype, stream=stream,
                          context=context)
