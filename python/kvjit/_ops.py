"""kvjit's ops from Python: store_kv_cache, transfer_kv and their prepare calls.

The keywords are normalised here, once, into the op's arguments; the native module (kvjit._C)
reads the tensors of any framework, applies the one copy of the layout rules and calls the
library, raising ValueError/TypeError naming the argument or kvjit.Error. Under torch.compile the
same arguments go to torch.ops.kvjit.* (registered by _torch.py), which Dynamo traces.
"""

import ctypes
import importlib.machinery
import importlib.util
import os
import threading

from . import _context, _lib

_I64_MAX = 2**63 - 1

# ---- keywords ------------------------------------------------------------------------------------

# Spellings accepted for dtype keywords (cache_dtype=, prewarm's dtype=, cache_dtype=, index=).
_DTYPE_ALIASES = {
    "f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
    "fp8_e4m3": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "i32": "i32", "int32": "i32", "i64": "i64", "int64": "i64",
}
SOURCE_DTYPES = {"f16": _lib.DTYPE_F16, "bf16": _lib.DTYPE_BF16, "f32": _lib.DTYPE_F32}
FP8_DTYPES = {"fp8_e4m3": _lib.DTYPE_FP8_E4M3, "fp8_e5m2": _lib.DTYPE_FP8_E5M2}
INDEX_TYPES = {"i32": _lib.INDEX_INT32, "i64": _lib.INDEX_INT64}
_PDL = {"auto": _lib.PDL_AUTO, "on": _lib.PDL_ON, "off": _lib.PDL_OFF}


def dtype_name(value, name):
    """A dtype given as a string or a torch dtype ("torch.float16") as its short name."""
    text = str(value)
    if text.startswith("torch."):
        text = text[6:]
    key = _DTYPE_ALIASES.get(text.lower())
    if key is None:
        raise ValueError(f"{name}: unknown dtype {value!r}")
    return key


def pdl_mode(pdl):
    """pdl: "auto", "on", "off", True, False (None: "auto") as a kvjit_pdl_mode."""
    if pdl is None:
        return _lib.PDL_AUTO
    if pdl is True or pdl is False:
        return _lib.PDL_ON if pdl else _lib.PDL_OFF
    mode = _PDL.get(pdl) if type(pdl) is str else None
    if mode is None:
        raise ValueError(f"pdl: expected 'auto', 'on', 'off', True or False, got {pdl!r}")
    return mode


def int_arg(value, name, low, high=_I64_MAX, none=None):
    """``value`` as an int in [low, high] (``none`` for None, when given): TypeError for another
    type, ValueError out of range (never a silent wrap: 2**64 + 5 is not 5)."""
    if value is None and none is not None:
        return none
    if type(value) is not int:
        raise TypeError(f"{name}: expected {'None or ' if none is not None else ''}an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: must be {low}..{high}, got {value}")
    return value


def cache_dtype_code(cache_dtype):
    """cache_dtype: None (the caches' own) or an fp8 spelling, as the op's int."""
    if cache_dtype is None:
        return 0
    code = FP8_DTYPES.get(dtype_name(cache_dtype, "cache_dtype"))
    if code is None:
        raise ValueError(f"cache_dtype: must be 'fp8_e4m3' or 'fp8_e5m2', got {cache_dtype!r}")
    return code


def stream_handle(stream):
    """A CUstream handle as an int from an int, a torch/CuPy stream, a __cuda_stream__ object or a
    ctypes pointer; None stays None (the framework's current stream)."""
    if stream is None or type(stream) is int:
        return None if stream is None else int_arg(stream, "stream", 0, 2**64 - 1)
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if type(h) is int:
            return int_arg(h, "stream", 0, 2**64 - 1)
        if isinstance(h, ctypes.c_void_p):
            return h.value or 0
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int_arg(int(proto()[1]), "stream", 0, 2**64 - 1)
    if isinstance(stream, ctypes.c_void_p):
        return stream.value or 0
    raise TypeError(f"stream: expected an int CUstream handle or a stream object (torch.cuda.Stream, "
                    f"__cuda_stream__), got {type(stream).__name__}")


def context_handle(context):
    """None (the default context, which the module holds) or an open kvjit.Context's handle."""
    return None if context is None else _context.context_arg(context).handle


# store_kv_cache's layout= (python/csrc/store_args.h's kvjit_store_layout_kind).
_LAYOUTS = {"auto": 0, "vllm_paged": 1}


def layout_code(layout):
    """layout: None or "auto" (from the tensors) or "vllm_paged", as the op's int."""
    if layout is None:
        return 0
    code = _LAYOUTS.get(layout) if type(layout) is str else None
    if code is None:
        raise ValueError(f"layout: expected None, 'auto' or 'vllm_paged', got {layout!r}")
    return code


def store_arguments(num_slots, skip_slot, split, pdl, cache_dtype, layout=None):
    """The op's scalar arguments from store_kv_cache()'s keywords: num_slots, skip_slot, split,
    pdl (the op's ints before k_scale, v_scale), then cache_dtype and layout (after them)."""
    return (int_arg(num_slots, "num_slots", 1, none=-1), int_arg(skip_slot, "skip_slot", 0, none=-1),
            int_arg(split, "split", 0, 2**31 - 1), pdl_mode(pdl), cache_dtype_code(cache_dtype),
            layout_code(layout))


def transfer_arguments(src_num_slots, dst_num_slots, split, pdl, row_elements, k_scale=None, v_scale=None,
                       max_ctas=0):
    """The op's arguments after the six tensors, from transfer_kv()'s keywords (max_ctas: its
    range is the native module's rule, python/csrc/transfer_args.c)."""
    return (int_arg(src_num_slots, "src_num_slots", 1, none=-1), int_arg(dst_num_slots, "dst_num_slots", 1, none=-1),
            int_arg(split, "split", 0, 2**31 - 1), pdl_mode(pdl), int_arg(row_elements, "row_elements", 1, 2**31,
                                                                          none=-1),
            k_scale, v_scale, int_arg(max_ctas, "max_ctas", -2**63, 2**63 - 1))


# ---- the native module ---------------------------------------------------------------------------

_native = None
_native_lock = threading.Lock()


def native_path(lib):
    """kvjit._C sits beside libkvjit (the wheel's kvjit/) or in a build's python/csrc/."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    here = os.path.dirname(os.path.realpath(lib.path))
    for folder in (here, os.path.join(here, "..", "python", "csrc")):
        path = os.path.normpath(os.path.join(folder, "_C" + suffix))
        if os.path.exists(path):
            return path
    raise _lib.LibraryNotFoundError(f"kvjit: no _C{suffix} beside {lib.path} (the native module is built with "
                                    f"libkvjit where Python's headers and a C++ compiler are found)")


def native():
    """kvjit._C, loaded and bound to the loaded libkvjit and the default context on first use."""
    global _native
    if _native is not None:
        return _native
    with _native_lock:
        if _native is None:
            lib = _lib.load()
            path = native_path(lib)
            loader = importlib.machinery.ExtensionFileLoader("kvjit._C", path)
            module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("kvjit._C", path,
                                                                                             loader=loader))
            loader.exec_module(module)
            module.init(lib.path, _context.default_context().handle,
                        lambda status, name, message: _lib.error_for(status, message, name))
            _bind(module)
            _native = module
    return _native


def _bind(module):
    """From now on the entry points call the module directly."""
    global _store, _transfer
    _store = module.store_kv_cache
    _transfer = module.transfer_kv


def _store(*args):
    return native().store_kv_cache(*args)


def _transfer(*args):
    return native().transfer_kv(*args)


def _compiling():
    """False in eager; torch.compiler.is_dynamo_compiling once the op is registered (_torch.py),
    which Dynamo folds to True while it traces."""
    return False


def _traced_store(*args):  # replaced by _torch.py: the op, which Dynamo traces
    return _store(*args)


def _traced_transfer(*args):  # replaced by _torch.py
    return _transfer(*args)


# ---- the ops ---------------------------------------------------------------------------------------

# The defaults' objects: a keyword left out is the very object (0 and "auto" are shared), so
# `is` tells a call that needs no normalising; split=False is not 0 here and is refused later.
_ZERO = 0
_AUTO = "auto"
# The canonical spellings of cache_dtype= and layout=, mapped without normalising: an fp8 or a
# laid-out store skips store_arguments() (0.4-0.8 us); any other spelling takes the long way.
_FAST_CACHE_DTYPE = {"fp8_e4m3": _lib.DTYPE_FP8_E4M3, "fp8_e5m2": _lib.DTYPE_FP8_E5M2}
_FAST_LAYOUT = {"vllm_paged": 1}


def store_kv_cache(k, v, k_cache, v_cache, indices, *, num_slots=None, skip_slot=None, split=0, pdl="auto",
                   k_scale=None, v_scale=None, cache_dtype=None, layout=None, stream=None, context=None):
    """``k_cache[indices] = k; v_cache[indices] = v`` in one kernel, on the current stream.

    Args:
        k, v: ``[B, H, D]`` or ``[B, H*D]`` CUDA tensors (torch, or anything with
            ``__cuda_array_interface__`` or ``__dlpack__``), each token's row contiguous.
            ``v`` and ``v_cache`` may both be None (K only).
        k_cache, v_cache: the caches as views, any strides; the layout comes from them:
            ``[slots, H, D]`` or ``[slots, H*D]`` (SGLang's pools: flat slots); paged
            ``[pages, page_size, H, D]``, whose page and slot strides need not flatten into one
            slot index and whose heads may be strided (vLLM's NHD caches, and its HND and
            FlashAttention ``[blocks, H, block_size, 2*D]`` caches as the NHD-shaped views vLLM
            passes, ``transpose(1, 2)`` and ``[..., :D]`` / ``[..., D:]``); vLLM's older K cache
            ``[blocks, H, D/x, block_size, x]``. Slot ``s`` is page ``s // page_size``, position
            ``s % page_size``. Views whose rows could share bytes are refused.
        indices: ``[B]`` int32 or int64. Ids < 0 and == ``skip_slot`` are skipped; ids >=
            ``num_slots`` are skipped and counted (:func:`oob_count`).
        num_slots: default the caches' slot count.
        skip_slot: a slot id never written (None: none).
        split: 0 automatic, else the parts each row is split into.
        pdl: "auto", "on" or "off" (programmatic dependent launch).
        k_scale, v_scale: float32 CUDA tensors of 1 (per tensor) or H (per head) elements, or
            None: an fp8 cache (``torch.float8_e4m3fn`` / ``float8_e5m2``, or uint8 with
            ``cache_dtype="fp8_e4m3"`` / ``"fp8_e5m2"``) fed from float16/bfloat16/float32 rows
            stores ``fp8(x / scale)``.
        cache_dtype: None (the caches' own dtype) or an fp8 type for uint8 caches.
        layout: None (from the tensors) or ``"vllm_paged"``: vLLM's older paged caches, K
            ``[blocks, H, D/x, block_size, x]`` and V ``[blocks, H, D, block_size]``. Needed only
            there: a 4-D V of that layout has the rank of an NHD ``[blocks, block_size, H, D]``
            cache, so its shape alone cannot say which it is (a 5-D K with a V cache and no
            ``layout`` is refused, naming this keyword).
        stream: default torch's current stream for torch tensors, else the
            ``__cuda_array_interface__`` stream of k, else the legacy default stream.
        context: a :class:`Context` (default: the shared one).

    Raises:
        ValueError, TypeError: a bad argument, named first in the message.
        Error: the library failed (``.status``, ``.name``, ``.message``).

    Under torch.compile torch tensors go through ``torch.ops.kvjit.store_kv_cache`` (no graph
    break) unless ``stream`` or ``context`` is given.
    """
    if (num_slots is None and skip_slot is None and split is _ZERO and pdl is _AUTO and cache_dtype is None
            and layout is None and stream is None and context is None):
        # The common call, its keywords the defaults (the very objects: 0.2 us cheaper than
        # comparing): nothing to normalise.
        if _compiling():
            return _traced_store(k, v, k_cache, v_cache, indices, -1, -1, 0, 0, k_scale, v_scale, 0, 0)
        return _store(k, v, k_cache, v_cache, indices, -1, -1, 0, 0, k_scale, v_scale, 0, 0)  # pdl 0: auto
    if (num_slots is None and skip_slot is None and split is _ZERO and pdl is _AUTO and stream is None
            and context is None):
        dtype_code = 0 if cache_dtype is None else _FAST_CACHE_DTYPE.get(cache_dtype) if type(cache_dtype) is str \
            else None
        layout_int = 0 if layout is None else _FAST_LAYOUT.get(layout) if type(layout) is str else None
        if dtype_code is not None and layout_int is not None:
            if _compiling():
                return _traced_store(k, v, k_cache, v_cache, indices, -1, -1, 0, 0, k_scale, v_scale, dtype_code,
                                     layout_int)
            return _store(k, v, k_cache, v_cache, indices, -1, -1, 0, 0, k_scale, v_scale, dtype_code, layout_int)
    scalars = store_arguments(num_slots, skip_slot, split, pdl, cache_dtype, layout)
    if stream is None and context is None:
        if _compiling():
            return _traced_store(k, v, k_cache, v_cache, indices, *scalars[:4], k_scale, v_scale, *scalars[4:])
        return _store(k, v, k_cache, v_cache, indices, *scalars[:4], k_scale, v_scale, *scalars[4:])
    return _store(k, v, k_cache, v_cache, indices, *scalars[:4], k_scale, v_scale, *scalars[4:],
                  stream_handle(stream), context_handle(context))


def prepare(k, v, k_cache, v_cache, indices, *, batch=None, num_slots=None, skip_slot=None, split=0, pdl="auto",
            k_scale=None, v_scale=None, cache_dtype=None, layout=None, stream=None, context=None):
    """Load the kernel :func:`store_kv_cache` uses for these arguments, without launching: call it
    before CUDA graph capture. ``batch``: None for k's batch, another size for its size class, 0
    for every size class. Pointers are not dereferenced, but their alignment counts."""
    scalars = store_arguments(num_slots, skip_slot, split, pdl, cache_dtype, layout)
    batch = int_arg(batch, "batch", 0, none=-1)
    native().store_kv_cache_prepare(k, v, k_cache, v_cache, indices, *scalars[:4], k_scale, v_scale, *scalars[4:],
                                    stream_handle(stream), context_handle(context), None if batch < 0 else batch)


def transfer_kv(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, src_num_slots=None, dst_num_slots=None,
                split=0, pdl="auto", row_elements=None, k_scale=None, v_scale=None, max_ctas=0, stream=None,
                context=None):
    """``dst_k[dst_indices] = src_k[src_indices]; dst_v[dst_indices] = src_v[src_indices]`` in one
    kernel on the current stream, between any two caches on the GPU or in pinned host memory.

    Ids < 0 are skipped; ids past either cache are skipped and counted
    (:func:`transfer_kv_oob_count`). The destination ids must be distinct. ``src_v`` and
    ``dst_v`` may both be None (K only). The caches' rows must have the same bytes; a row is
    everything after the source's first dim (or the destination's, when it has less there)
    unless ``row_elements`` says how many trailing elements make one. Caches are views with any
    strides, their layout read from the tensors as store_kv_cache reads it: flat slots, or
    ``[pages, page_size, H, D]`` whose slot dims do not flatten (SGLang's page_first_direct host
    layout sliced per layer, ``host[0, :, layer]``; page_head's ``host[0, :, :, :,
    layer].transpose(1, 2)``), heads strided; between CPU tensors only flat caches.

    Converting on the way: an fp8 (float8_e4m3fn / float8_e5m2) source into a float16, bfloat16
    or float32 destination writes ``x * scale``; the other way ``fp8(x / scale)`` as
    :func:`store_kv_cache` quantizes. ``k_scale`` / ``v_scale``: float32 CUDA tensors of 1 (per
    tensor) or H (per head) scales, read when the kernel runs (graph-capturable); None: no scale.

    ``max_ctas``: 0 the plan's budget (at most 4 CTAs over the host link, the model keeps its
    SMs), N at most N CTAs, -1 every SM the batch can use.

    Raises:
        ValueError, TypeError: a bad argument, named first in the message.
        Error: the library failed.

    Under torch.compile torch tensors go through ``torch.ops.kvjit.transfer_kv`` (no graph
    break) unless ``stream`` or ``context`` is given.
    """
    if (src_num_slots is None and dst_num_slots is None and split is _ZERO and pdl is _AUTO and row_elements is None
            and k_scale is None and v_scale is None and max_ctas is _ZERO and stream is None and context is None):
        if _compiling():
            return _traced_transfer(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, -1, -1, 0, 0, -1, None, None,
                                    0)
        # pdl 0: auto
        return _transfer(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, -1, -1, 0, 0, -1, None, None, 0)
    scalars = transfer_arguments(src_num_slots, dst_num_slots, split, pdl, row_elements, k_scale, v_scale, max_ctas)
    if stream is None and context is None:
        if _compiling():
            return _traced_transfer(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *scalars)
        return _transfer(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *scalars)
    return _transfer(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *scalars, stream_handle(stream),
                     context_handle(context))


def transfer_kv_prepare(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, batch=None, src_num_slots=None,
                        dst_num_slots=None, split=0, pdl="auto", row_elements=None, k_scale=None, v_scale=None,
                        max_ctas=0, stream=None, context=None):
    """Load the kernel :func:`transfer_kv` uses for these arguments without launching (before CUDA
    graph capture). ``batch``: None for the indices' batch, 0 for every size class."""
    scalars = transfer_arguments(src_num_slots, dst_num_slots, split, pdl, row_elements, k_scale, v_scale, max_ctas)
    batch = int_arg(batch, "batch", 0, none=-1)
    native().transfer_kv_prepare(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *scalars,
                                 stream_handle(stream), context_handle(context), None if batch < 0 else batch)


def store_kv_args(k, v, k_cache, v_cache, indices, **keywords):
    """The kvjit_store_kv_args the rules make of these arguments (a _lib.StoreKvArgs), without
    calling the library: what tests and benchmarks read. Its ``k_layout`` and ``v_layout`` are
    the caches' inferred layouts (_lib.Layout), or None for flat caches."""
    scalars = store_arguments(keywords.get("num_slots"), keywords.get("skip_slot"), keywords.get("split", 0),
                              keywords.get("pdl", "auto"), keywords.get("cache_dtype"), keywords.get("layout"))
    raw = native().store_kv_args(k, v, k_cache, v_cache, indices, *scalars[:4], keywords.get("k_scale"),
                                 keywords.get("v_scale"), *scalars[4:], stream_handle(keywords.get("stream")))
    args = _lib.StoreKvArgs.from_buffer_copy(raw)
    layouts = raw[ctypes.sizeof(_lib.StoreKvArgs):]
    size = ctypes.sizeof(_lib.Layout)
    args.k_layout = _lib.Layout.from_buffer_copy(layouts[:size]) if args.k_cache_layout else None
    args.v_layout = _lib.Layout.from_buffer_copy(layouts[size:2 * size]) if args.v_cache_layout else None
    return args


# ---- every layer in one launch (tables of layer pointers) -------------------------------------------

_LOCATIONS = {"device": _lib.LOCATION_DEVICE, "host": _lib.LOCATION_HOST}


def _table(name, t, layers):
    d = native().describe(t, name)
    if d[4] not in ("i64", "u64") or len(d[1]) != 1:
        raise TypeError(f"{name}: expected a 1-d int64 or uint64 CUDA tensor of layer pointers, got {d[4]} "
                        f"{list(d[1])}")
    if layers is not None and d[1][0] != layers:
        raise ValueError(f"{name}: {d[1][0]} layers, src_k_ptrs has {layers}")
    if d[1][0] > 1 and d[2][0] != 1:
        raise ValueError(f"{name}: the layer pointers must be contiguous")
    return d


def _indices(name, d, batch):
    if len(d[1]) != 1:
        raise ValueError(f"{name}: expected shape [B], got {list(d[1])}")
    if batch is not None and d[1][0] != batch:
        raise ValueError(f"{name}: {d[1][0]} slot ids, src_indices has {batch}")
    index_type = INDEX_TYPES.get(d[4])
    if index_type is None:
        raise TypeError(f"{name}: dtype must be int32 or int64, got {d[4]}")
    stride = d[2][0] if d[1][0] > 1 else 1
    if stride < 1:
        raise ValueError(f"{name}: stride must be >= 1 element, got {stride}")
    return d[1][0], index_type, stride


def transfer_kv_all_layers(src_k_ptrs, src_v_ptrs, dst_k_ptrs, dst_v_ptrs, src_indices, dst_indices, *, k_row_bytes,
                           v_row_bytes=None, src_stride=None, dst_stride=None, src_num_slots, dst_num_slots,
                           src="device", dst="host", split=0, pdl="auto", max_ctas=0, stream=None, context=None,
                           prepare=False):
    """Every layer in one launch: the ``*_ptrs`` are ``[L]`` int64 CUDA tensors holding each
    layer's cache pointer (a layer's caches are not visible here, so rows, strides in bytes, slot
    counts and the sides, "device" or "host", are given). A NULL or misaligned layer pointer is
    skipped and counted. ``src_v_ptrs`` and ``dst_v_ptrs`` may both be None (K only).
    ``max_ctas`` as for :func:`transfer_kv` (checked by the library). ``prepare=True`` loads
    without launching."""
    ctx = _context.context_arg(context)
    skd = _table("src_k_ptrs", src_k_ptrs, None)
    layers = skd[1][0]
    if not 1 <= layers <= _lib.TRANSFER_KV_MAX_LAYERS:
        raise ValueError(f"src_k_ptrs: 1..{_lib.TRANSFER_KV_MAX_LAYERS} layers, got {layers}")
    dkd = _table("dst_k_ptrs", dst_k_ptrs, layers)
    if (src_v_ptrs is None) != (dst_v_ptrs is None):
        raise ValueError("src_v_ptrs, dst_v_ptrs: both or neither")
    svd = _table("src_v_ptrs", src_v_ptrs, layers) if src_v_ptrs is not None else None
    dvd = _table("dst_v_ptrs", dst_v_ptrs, layers) if dst_v_ptrs is not None else None
    for name, value in (("k_row_bytes", k_row_bytes), ("src_num_slots", src_num_slots),
                        ("dst_num_slots", dst_num_slots)):
        int_arg(value, name, 1)
    v_row_bytes = int_arg(v_row_bytes, "v_row_bytes", 0, none=k_row_bytes if svd is not None else 0)
    src_stride = int_arg(src_stride, "src_stride", 0, none=0)
    dst_stride = int_arg(dst_stride, "dst_stride", 0, none=0)
    int_arg(split, "split", 0, 2**31 - 1)
    if type(prepare) is not bool:
        raise TypeError(f"prepare: expected a bool, got {type(prepare).__name__}")
    for name, side in (("src", src), ("dst", dst)):
        if not isinstance(side, str) or side not in _LOCATIONS:
            raise ValueError(f"{name}: must be 'device' or 'host', got {side!r}")
    sid = native().describe(src_indices, "src_indices")
    did = native().describe(dst_indices, "dst_indices")
    b, index_type, src_index_stride = _indices("src_indices", sid, None)
    _, dst_type, dst_index_stride = _indices("dst_indices", did, b)
    if dst_type != index_type:
        raise TypeError(f"dst_indices: dtype {did[4]} differs from src_indices' {sid[4]}")
    handle = stream_handle(stream)
    args = _lib.TRANSFER_KV_PACKER.pack(
        _lib.TRANSFER_KV_ARGS_VERSION, skd[0], svd[0] if svd else 0, dkd[0], dvd[0] if dvd else 0, sid[0], did[0],
        index_type, src_index_stride, dst_index_stride, b, k_row_bytes, v_row_bytes, src_stride,
        src_stride if svd is not None else 0, dst_stride, dst_stride if svd is not None else 0, src_num_slots,
        dst_num_slots, layers, _LOCATIONS[src], _LOCATIONS[dst], split, pdl_mode(pdl),
        skd[7] if handle is None else handle, _lib.DTYPE_BYTES, _lib.DTYPE_BYTES, _lib.SCALE_NONE, 0, 0, 0,
        int_arg(max_ctas, "max_ctas", -2**31, 2**31 - 1), 0, 0, 0, 0)
    ctx._lib.check(ctx._lib.fn["kvjit_transfer_kv_prepare" if prepare else "kvjit_transfer_kv"](ctx.handle, args))


def transfer_kv_args(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, layouts=False, **keywords):
    """The kvjit_transfer_kv_args the rules make of these arguments (bytes, _lib.TRANSFER_KV_PACKER's
    layout), without calling the library. ``layouts=True``: (those bytes, {"src_k": _lib.Layout or
    None (flat), "src_v": ..., "dst_k": ..., "dst_v": ...}), the caches' inferred layouts."""
    scalars = transfer_arguments(keywords.get("src_num_slots"), keywords.get("dst_num_slots"),
                                 keywords.get("split", 0), keywords.get("pdl", "auto"), keywords.get("row_elements"),
                                 keywords.get("k_scale"), keywords.get("v_scale"), keywords.get("max_ctas", 0))
    raw = native().transfer_kv_args(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *scalars,
                                    stream_handle(keywords.get("stream")))
    packed, rest = raw[:_lib.TRANSFER_KV_PACKER.size], raw[_lib.TRANSFER_KV_PACKER.size:]
    if not layouts:
        return packed
    pointers = _lib.TRANSFER_KV_PACKER.unpack(packed)[-4:]  # src_k, src_v, dst_k, dst_v layout pointers
    size = ctypes.sizeof(_lib.Layout)
    found = {}
    for i, name in enumerate(("src_k", "src_v", "dst_k", "dst_v")):
        found[name] = _lib.Layout.from_buffer_copy(rest[i * size:(i + 1) * size]) if pointers[i] else None
    return packed, found
