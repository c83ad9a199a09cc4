"""transfer_kv from Python: copy K/V rows from slots of one cache to slots of another, each cache a
CUDA tensor or a pinned host tensor (torch ``pin_memory()``), checked here (each error names the
argument), packed into kvjit_transfer_kv_args and passed to the library.

    kvjit.transfer_kv(src_k, src_v, dst_k, dst_v, src_loc, dst_loc)   # dst_k[dst_loc] = src_k[src_loc] ...

Caches are [slots, H, D], [slots, H*D] or paged [pages, page_size, H(, D)] with each slot's row
contiguous; a row is everything after the first dim unless ``row_elements`` says how many trailing
elements make one. All layers in one launch: transfer_kv_all_layers() with device tables of
per-layer cache pointers (as SGLang's hierarchical cache keeps them).
"""

import ctypes
import sys

from . import _context, _lib, _tensor
from ._store import _INDEX, _RAW_BYTES, _cache_slots, _pdl_mode, call_in_context
from ._tensor import describe


def _side(obj, name):
    """(describe() tuple, location) of a cache or index tensor: CUDA memory, or pinned host memory
    (whose pointer the GPU uses as is, through unified addressing)."""
    module = sys.modules.get("torch")
    if module is not None and isinstance(obj, module.Tensor) and obj.device.type == "cpu":
        if _tensor.torch is None:
            _tensor._init_torch(module)
        if not obj.is_pinned():
            raise ValueError(f"{name}: a CPU tensor must be pinned (tensor.pin_memory()) for the GPU to reach it")
        known = _tensor._TORCH_DTYPES.get(obj.dtype, (str(obj.dtype), obj.element_size()))
        return (obj.data_ptr(), obj.shape, obj.stride(), known[1], known[0], None, None, True), _lib.LOCATION_HOST
    return describe(obj, name), _lib.LOCATION_DEVICE


def _row_bytes(name, d, row_elements):
    shape = d[1]
    if len(shape) < 2:
        raise ValueError(f"{name}: expected [slots, ...] with at least two dims, got shape {list(shape)}")
    if row_elements is None:
        elems = 1
        for size in shape[1:]:
            elems *= size
    elif type(row_elements) is not int:
        raise TypeError(f"row_elements: expected None or an int, got {type(row_elements).__name__}")
    elif not 0 < row_elements <= 2**31:
        raise ValueError(f"row_elements: must be None or 1..2**31, got {row_elements}")
    else:
        elems = row_elements
    return elems * d[3]


def _indices(name, d, batch):
    shape = d[1]
    if len(shape) != 1:
        raise ValueError(f"{name}: expected shape [B], got {list(shape)}")
    if batch is not None and shape[0] != batch:
        raise ValueError(f"{name}: {shape[0]} slot ids, src_indices has {batch}")
    index_type = _INDEX.get(d[4])
    if index_type is None:
        raise TypeError(f"{name}: dtype must be int32 or int64, got {d[4]}")
    stride = d[2][0] if shape[0] > 1 else 1
    if stride < 1:
        raise ValueError(f"{name}: stride must be >= 1 element, got {stride}")
    return shape[0], index_type, stride


def _device_of(descs):
    for d in descs:
        if d is not None and d[5] is not None:
            return d[5]
    torch = _tensor.torch
    return torch.cuda.current_device() if torch is not None else None


def _stream(stream, dev, is_torch):
    if stream is not None:
        return _tensor.stream_handle(stream)
    if is_torch and dev is not None:
        return _tensor.torch_raw_stream(dev)
    return 0


def _run(fn, ctx, args, dev, is_torch):
    handle = ctx._handle
    if handle is None:
        raise ValueError("context: closed")
    if is_torch and dev is not None and _tensor.torch_get_device() != dev:
        with _tensor.torch_device_guard(dev):
            status = call_in_context(fn, dev, handle, args)
    else:
        status = call_in_context(fn, dev, handle, args)
    if status:
        raise ctx._lib.error(status)


_I64_MAX = 2**63 - 1


def _check_int(name, value, low, high=_I64_MAX):
    """An int in [low, high] (the C fields are int64: 2**64 + 5 must not wrap to 5)."""
    if type(value) is not int:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}: must be {low}..{high}, got {value}")


def _stream_arg(stream, dev, is_torch):
    handle = _stream(stream, dev, is_torch)
    if not 0 <= handle < 2**64:
        raise ValueError(f"stream: a CUstream handle is 0..2**64-1, got {handle}")
    return handle


def build_args(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, batch, src_num_slots, dst_num_slots, split,
               pdl, row_elements, stream):
    """Check everything and pack kvjit_transfer_kv_args for one layer: (args bytes, device, is_torch)."""
    skd, src_where = _side(src_k, "src_k")
    dkd, dst_where = _side(dst_k, "dst_k")
    if skd[4] != dkd[4] and skd[4] not in _RAW_BYTES and dkd[4] not in _RAW_BYTES:
        raise TypeError(f"dst_k: dtype {dkd[4]} differs from src_k's {skd[4]} (view both as uint8 to move raw bytes)")
    k_row = _row_bytes("src_k", skd, row_elements)
    src_slots, src_k_stride = _cache_slots("src_k", skd, k_row, "K")
    dst_slots, dst_k_stride = _cache_slots("dst_k", dkd, k_row, "K")
    if (src_v is None) != (dst_v is None):
        raise ValueError(f"{'src_v' if src_v is None else 'dst_v'}: None while the other is given (pass both, or "
                         f"neither to move K only)")
    v_row = src_v_stride = dst_v_stride = src_v_ptr = dst_v_ptr = 0
    descs = [skd, dkd]
    if src_v is not None:
        svd, where = _side(src_v, "src_v")
        if where != src_where:
            raise ValueError("src_v: on the other side of the link from src_k")
        dvd, where = _side(dst_v, "dst_v")
        if where != dst_where:
            raise ValueError("dst_v: on the other side of the link from dst_k")
        v_row = _row_bytes("src_v", svd, row_elements)
        v_src_slots, src_v_stride = _cache_slots("src_v", svd, v_row, "V")
        v_dst_slots, dst_v_stride = _cache_slots("dst_v", dvd, v_row, "V")
        src_slots = min(src_slots, v_src_slots)
        dst_slots = min(dst_slots, v_dst_slots)
        src_v_ptr, dst_v_ptr = svd[0], dvd[0]
        descs += [svd, dvd]
    sid, _ = _side(src_indices, "src_indices")
    did, _ = _side(dst_indices, "dst_indices")
    b, index_type, src_index_stride = _indices("src_indices", sid, None)
    _, dst_type, dst_index_stride = _indices("dst_indices", did, b)
    if dst_type != index_type:
        raise TypeError(f"dst_indices: dtype {did[4]} differs from src_indices' {sid[4]}")
    descs += [sid, did]
    dev = _device_of(descs)
    for name, d in zip(("src_k", "dst_k", "src_v", "dst_v"), descs[:4]):
        if d[5] is not None and dev is not None and d[5] != dev:
            raise ValueError(f"{name}: on cuda:{d[5]}, the transfer runs on cuda:{dev}")
    if src_num_slots is None:
        src_num_slots = src_slots
    else:
        _check_int("src_num_slots", src_num_slots, 1, src_slots)
    if dst_num_slots is None:
        dst_num_slots = dst_slots
    else:
        _check_int("dst_num_slots", dst_num_slots, 1, dst_slots)
    _check_int("split", split, 0, 2**31 - 1)
    is_torch = skd[7]
    args = _lib.TRANSFER_KV_PACKER.pack(
        _lib.TRANSFER_KV_ARGS_VERSION, skd[0], src_v_ptr, dkd[0], dst_v_ptr, sid[0], did[0], index_type,
        src_index_stride, dst_index_stride, b if batch is None else batch, k_row, v_row, src_k_stride, src_v_stride,
        dst_k_stride, dst_v_stride, src_num_slots, dst_num_slots, 0, src_where, dst_where, split, _pdl_mode(pdl),
        _stream_arg(stream, dev, is_torch))
    return args, dev, is_torch


def transfer_kv(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, src_num_slots=None, dst_num_slots=None,
                split=0, pdl="auto", row_elements=None, stream=None, context=None):
    """``dst_k[dst_indices] = src_k[src_indices]; dst_v[dst_indices] = src_v[src_indices]`` in one
    kernel on the current stream, between any two caches on the GPU or in pinned host memory.

    Ids < 0 are skipped; ids past either cache are skipped and counted (oob_count("transfer_kv")).
    The destination ids must be distinct. src_v and dst_v may both be None (K only). The caches'
    rows must have the same bytes; their slot strides are free.
    Raises ValueError/TypeError naming the argument, kvjit.Error for library failures.
    """
    ctx = _context.context_arg(context)
    args, dev, is_torch = build_args(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, None, src_num_slots,
                                     dst_num_slots, split, pdl, row_elements, stream)
    _run(ctx._lib.fn["kvjit_transfer_kv"], ctx, args, dev, is_torch)


def transfer_kv_prepare(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, batch=None, src_num_slots=None,
                        dst_num_slots=None, split=0, pdl="auto", row_elements=None, stream=None, context=None):
    """Load the kernel transfer_kv() uses for these arguments without launching (before CUDA graph
    capture). batch: None for the indices' batch, 0 for every size class."""
    ctx = _context.context_arg(context)
    if batch is not None:
        _check_int("batch", batch, 0)
    args, dev, is_torch = build_args(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, batch, src_num_slots,
                                     dst_num_slots, split, pdl, row_elements, stream)
    _run(ctx._lib.fn["kvjit_transfer_kv_prepare"], ctx, args, dev, is_torch)


_LOCATIONS = {"device": _lib.LOCATION_DEVICE, "host": _lib.LOCATION_HOST}


def _table(name, t, layers):
    d = describe(t, name)
    if d[4] not in ("i64", "u64") or len(d[1]) != 1:
        raise TypeError(f"{name}: expected a 1-d int64 or uint64 CUDA tensor of layer pointers, got {d[4]} "
                        f"{list(d[1])}")
    if layers is not None and d[1][0] != layers:
        raise ValueError(f"{name}: {d[1][0]} layers, src_k_ptrs has {layers}")
    if d[1][0] > 1 and d[2][0] != 1:
        raise ValueError(f"{name}: the layer pointers must be contiguous")
    return d


def transfer_kv_all_layers(src_k_ptrs, src_v_ptrs, dst_k_ptrs, dst_v_ptrs, src_indices, dst_indices, *, k_row_bytes,
                           v_row_bytes=None, src_stride=None, dst_stride=None, src_num_slots, dst_num_slots,
                           src="device", dst="host", split=0, pdl="auto", stream=None, context=None, prepare=False):
    """Every layer in one launch: the *_ptrs are [L] int64 CUDA tensors holding each layer's cache
    pointer (a layer's caches are not visible here, so rows, strides in bytes, slot counts and the
    sides, "device" or "host", are given). A NULL or misaligned layer pointer is skipped and counted.
    src_v_ptrs and dst_v_ptrs may both be None (K only). prepare=True loads without launching."""
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
        _check_int(name, value, 1)
    if v_row_bytes is None:
        v_row_bytes = k_row_bytes if svd is not None else 0
    _check_int("v_row_bytes", v_row_bytes, 0)
    src_stride = 0 if src_stride is None else src_stride
    dst_stride = 0 if dst_stride is None else dst_stride
    _check_int("src_stride", src_stride, 0)
    _check_int("dst_stride", dst_stride, 0)
    _check_int("split", split, 0, 2**31 - 1)
    if type(prepare) is not bool:
        raise TypeError(f"prepare: expected a bool, got {type(prepare).__name__}")
    for name, side in (("src", src), ("dst", dst)):
        if not isinstance(side, str) or side not in _LOCATIONS:
            raise ValueError(f"{name}: must be 'device' or 'host', got {side!r}")
    sid = describe(src_indices, "src_indices")
    did = describe(dst_indices, "dst_indices")
    b, index_type, src_index_stride = _indices("src_indices", sid, None)
    _, dst_type, dst_index_stride = _indices("dst_indices", did, b)
    if dst_type != index_type:
        raise TypeError(f"dst_indices: dtype {did[4]} differs from src_indices' {sid[4]}")
    dev = _device_of([skd, dkd, sid, did])
    is_torch = skd[7]
    v_stride_src = src_stride if svd is not None and src_stride else 0
    v_stride_dst = dst_stride if svd is not None and dst_stride else 0
    args = _lib.TRANSFER_KV_PACKER.pack(
        _lib.TRANSFER_KV_ARGS_VERSION, skd[0], svd[0] if svd else 0, dkd[0], dvd[0] if dvd else 0, sid[0], did[0],
        index_type, src_index_stride, dst_index_stride, b, k_row_bytes, v_row_bytes, src_stride, v_stride_src,
        dst_stride, v_stride_dst, src_num_slots, dst_num_slots, layers, _LOCATIONS[src], _LOCATIONS[dst], split,
        _pdl_mode(pdl), _stream_arg(stream, dev, is_torch))
    fn = ctx._lib.fn["kvjit_transfer_kv_prepare" if prepare else "kvjit_transfer_kv"]
    _run(fn, ctx, args, dev, is_torch)


def prewarm_line(line, *, context=None):
    """Compile every kernel of one manifest line of any op (cache/MANIFEST.md), e.g.
    "transfer_kv arch=90 k_row_bytes=2048 ...". Returns {"compiled": n, "cached": m}."""
    if not isinstance(line, str):
        raise TypeError(f"line: expected a str, got {type(line).__name__}")
    if "\0" in line:
        raise ValueError("line: contains a NUL character")
    ctx = _context.context_arg(context)
    compiled = ctypes.c_uint()
    cached = ctypes.c_uint()
    ctx._require_open()
    ctx._lib.check(ctx._lib.fn["kvjit_prewarm_line"](ctx._handle, line.encode(), ctypes.byref(compiled),
                                                     ctypes.byref(cached)))
    return {"compiled": compiled.value, "cached": cached.value}


def transfer_kv_oob_count(reset=False, context=None):
    """Slot ids past either cache (and unusable layer pointers) seen by this context's
    transfer_kv kernels in the current CUDA context since the last reset. Synchronises."""
    if type(reset) is not bool and reset not in (0, 1):
        raise TypeError(f"reset: expected a bool, got {type(reset).__name__}")
    ctx = _context.context_arg(context)
    ctx._require_open()
    count = ctypes.c_uint64()
    ctx._lib.check(ctx._lib.fn["kvjit_transfer_kv_oob_count"](ctx._handle, ctypes.byref(count), 1 if reset else 0))
    return count.value
