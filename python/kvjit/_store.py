"""store_kv_cache from Python: shapes, strides and dtypes read from the tensors, checked here
(each error names the argument), packed into kvjit_store_kv_args and passed to the library.

Shapes: k, v are [B, H, D] or [B, H*D] with each token's row contiguous (the token stride is
free). A cache is any tensor whose trailing dims make one row and whose leading dims flatten into
slots: [slots, H, D], [slots, H*D], [pages, page_size, H, D], [pages, page_size, H*D].
"""

import ctypes

from . import _context, _lib, _tensor
from ._tensor import _describer_for, _describers, describe

_PDL = {"auto": _lib.PDL_AUTO, "on": _lib.PDL_ON, "off": _lib.PDL_OFF}
_INDEX = {"i32": _lib.INDEX_INT32, "i64": _lib.INDEX_INT64}
_SOURCE = {"f16": _lib.DTYPE_F16, "bf16": _lib.DTYPE_BF16, "f32": _lib.DTYPE_F32}
_FP8 = {"fp8_e4m3": _lib.DTYPE_FP8_E4M3, "fp8_e5m2": _lib.DTYPE_FP8_E5M2}
_RAW_BYTES = ("u8", "i8")
# Spellings accepted for dtype keywords (cache_dtype=, prewarm's dtype=/cache_dtype=/index=).
_DTYPE_ALIASES = {
    "f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
    "fp8_e4m3": "fp8_e4m3", "e4m3": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "i32": "i32", "int32": "i32", "i64": "i64", "int64": "i64",
}


def dtype_name(value, name):
    """Normalise a dtype given as a string or a torch dtype ("torch.float16") to a short name."""
    text = str(value)
    if text.startswith("torch."):
        text = text[6:]
    key = _DTYPE_ALIASES.get(text.lower())
    if key is None:
        raise ValueError(f"{name}: unknown dtype {value!r}")
    return key


def _pdl_mode(pdl):
    if type(pdl) is str:
        mode = _PDL.get(pdl)
        if mode is not None:
            return mode
    elif pdl is None:
        return _lib.PDL_AUTO
    elif pdl is True:
        return _lib.PDL_ON
    elif pdl is False:
        return _lib.PDL_OFF
    raise ValueError(f"pdl: expected 'auto', 'on', 'off', True or False, got {pdl!r}")


def _input_rows(name, d):
    """(batch, row elements, token stride in elements, heads or None) of k or v."""
    shape = d[1]
    strides = d[2]
    n = len(shape)
    if n == 3:
        b, h, w = shape
        if (w != 1 and strides[2] != 1) or (h != 1 and strides[1] != w):
            raise ValueError(f"{name}: each token's [H, D] = {list(shape[1:])} must be contiguous (strides "
                             f"{list(strides[1:])}, expected [{w}, 1]); only the token stride may differ")
        row = h * w
        heads = h
    elif n == 2:
        b, row = shape
        if row != 1 and strides[1] != 1:
            raise ValueError(f"{name}: each token's row must be contiguous (element stride {strides[1]}, expected 1)")
        heads = None
    else:
        raise ValueError(f"{name}: expected shape [B, H, D] or [B, H*D], got {list(shape)}")
    if row == 0:
        raise ValueError(f"{name}: empty rows (shape {list(shape)})")
    if b <= 1:
        return b, row, row, heads
    stride = strides[0]
    if stride < row:
        raise ValueError(f"{name}: token stride {stride} elements is less than a row ({row} elements); rows may not "
                         f"overlap or broadcast")
    return b, row, stride, heads


def _cache_slots(name, d, row_bytes, source):
    """(slots, slot stride in bytes) of a cache whose rows must be @p row_bytes bytes (the rows of
    @p source, "k" or "v", copied or quantized)."""
    shape = d[1]
    strides = d[2]
    itemsize = d[3]
    n = len(shape)
    # The usual layouts first: [slots, H, D] and [slots, H*D], rows contiguous.
    if n == 3:
        slots, h, w = shape
        if h * w * itemsize == row_bytes and (w == 1 or strides[2] == 1) and (h == 1 or strides[1] == w) and \
                slots > 1 and strides[0] >= h * w:
            return slots, strides[0] * itemsize
    elif n == 2:
        slots, w = shape
        if w * itemsize == row_bytes and (w == 1 or strides[1] == 1) and slots > 1 and strides[0] >= w:
            return slots, strides[0] * itemsize
    if not 2 <= n <= 4:
        raise ValueError(f"{name}: expected [slots, H, D], [slots, H*D] or [pages, page_size, H, D], got shape "
                         f"{list(shape)}")
    # The row: the fewest trailing dims that hold row_bytes.
    i = n
    elems = 1
    while i > 1:
        i -= 1
        elems *= shape[i]
        if elems * itemsize >= row_bytes:
            break
    if elems * itemsize != row_bytes:
        raise ValueError(f"{name}: no trailing dims of shape {list(shape)} ({d[4]}) make one row of {row_bytes} bytes "
                         f"(one {source} row)")
    expected = 1
    for j in range(n - 1, i - 1, -1):
        if shape[j] != 1 and strides[j] != expected:
            raise ValueError(f"{name}: each slot's row (shape {list(shape[i:])}) must be contiguous, got strides "
                             f"{list(strides[i:])}")
        expected *= shape[j]
    # The slot dims must flatten into one index with one stride.
    slots = 1
    slot_stride = None
    for j in range(i - 1, -1, -1):
        size = shape[j]
        slots *= size
        if size == 1:
            continue
        if slot_stride is None:
            slot_stride = strides[j]
            expected = slot_stride * size
        elif strides[j] != expected:
            raise ValueError(f"{name}: the slot dims {list(shape[:i])} (strides {list(strides[:i])}) do not flatten "
                             f"into one slot index")
        else:
            expected *= size
    if slots == 0:
        raise ValueError(f"{name}: no slots (shape {list(shape)})")
    if slot_stride is None:
        slot_stride = elems
    if slots > 1 and slot_stride < elems:
        raise ValueError(f"{name}: slot stride {slot_stride} elements is less than a row ({elems}); slots may not "
                         f"overlap")
    return slots, slot_stride * itemsize


def _same_device(name, d, dev):
    other = d[5]
    if other is not None and dev is not None and other != dev:
        raise ValueError(f"{name}: on cuda:{other}, k is on cuda:{dev}")


def _scale(name, scale, dev):
    """(pointer, elements) of an fp32 scale tensor."""
    d = describe(scale, name)
    if d[4] != "f32":
        raise TypeError(f"{name}: dtype must be float32, got {d[4]}")
    _same_device(name, d, dev)
    count = 1
    for size in d[1]:
        count *= size
    if count == 0:
        raise ValueError(f"{name}: empty")
    expected = 1
    for size, stride in zip(reversed(d[1]), reversed(d[2])):
        if size != 1 and stride != expected:
            raise ValueError(f"{name}: the {count} scales must be contiguous (shape {list(d[1])}, strides "
                             f"{list(d[2])})")
        expected *= size
    if d[0] % 4:
        raise ValueError(f"{name}: pointer {d[0]:#x} is not 4-byte aligned")
    return d[0], count


def build_args(k, v, k_cache, v_cache, indices, batch, num_slots, skip_slot, split, pdl, k_scale, v_scale,
               cache_dtype, stream, version):
    """Check everything and pack kvjit_store_kv_args. Returns (args bytes, device, is_torch)."""
    # describe(), inlined: the type's describer is one dict lookup.
    describers = _describers
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale is not None and not _tensor.is_tensor(scale):
            raise TypeError(f"{name}: expected a float32 CUDA tensor or None, got {type(scale).__name__}")
    kd = (describers.get(type(k)) or _describer_for(k, "k"))(k, "k")
    kcd = (describers.get(type(k_cache)) or _describer_for(k_cache, "k_cache"))(k_cache, "k_cache")
    idd = (describers.get(type(indices)) or _describer_for(indices, "indices"))(indices, "indices")
    b, k_row, k_stride, heads = _input_rows("k", kd)
    dev = kd[5]
    k_size = kd[3]
    k_dtype = kd[4]

    # Quantize on store: an fp8 cache fed from F16/BF16/F32.
    cache_key = kcd[4]
    if cache_dtype is not None:
        wanted = dtype_name(cache_dtype, "cache_dtype")
        if wanted not in _FP8:
            raise ValueError(f"cache_dtype: must be 'fp8_e4m3' or 'fp8_e5m2', got {cache_dtype!r}")
        if cache_key != wanted and cache_key not in _RAW_BYTES:
            raise TypeError(f"k_cache: dtype {cache_key} does not hold cache_dtype {wanted} (use a uint8 or {wanted} "
                            f"cache)")
        cache_key = wanted
    quant = cache_key in _FP8 and k_dtype in _SOURCE
    if cache_key in _FP8 and not quant and k_dtype != cache_key and k_dtype not in _RAW_BYTES:
        raise TypeError(f"k: dtype {k_dtype} cannot be stored into an {cache_key} cache (float16, bfloat16 or "
                        f"float32 are quantized; {cache_key} or uint8 rows are copied)")
    if not quant and k_dtype != kcd[4] and k_dtype not in _RAW_BYTES and kcd[4] not in _RAW_BYTES:
        raise TypeError(f"k_cache: dtype {kcd[4]} differs from k's {k_dtype} (kvjit copies bytes; view both as "
                        f"uint8 to store raw bytes)")
    k_row_bytes = k_row * k_size
    if dev is not None:
        _same_device("k_cache", kcd, dev)
    slots, k_cache_stride = _cache_slots("k_cache", kcd, k_row if quant else k_row_bytes, "k")

    has_v = v is not None
    if not has_v or v_cache is None:
        if has_v or v_cache is not None:
            missing = "v_cache" if v_cache is None else "v"
            raise ValueError(f"{missing}: None while {'v' if missing == 'v_cache' else 'v_cache'} is given (pass "
                             f"both, or neither to store K only)")
        v_ptr = v_cache_ptr = v_row_bytes = v_stride = v_cache_stride = 0
    else:
        vd = (describers.get(type(v)) or _describer_for(v, "v"))(v, "v")
        vcd = (describers.get(type(v_cache)) or _describer_for(v_cache, "v_cache"))(v_cache, "v_cache")
        vb, v_row, v_stride_el, v_heads = _input_rows("v", vd)
        if vb != b:
            raise ValueError(f"v: {vb} tokens, k has {b}")
        if dev is not None:
            _same_device("v", vd, dev)
            _same_device("v_cache", vcd, dev)
        v_cache_key = vcd[4]
        if quant:
            if vd[4] != k_dtype:
                raise TypeError(f"v: dtype {vd[4]} differs from k's {k_dtype} (quantizing, both need the same)")
            if v_cache_key != cache_key and not (cache_dtype is not None and v_cache_key in _RAW_BYTES):
                raise TypeError(f"v_cache: dtype {v_cache_key} differs from k_cache's {cache_key}")
        elif vd[4] != v_cache_key and vd[4] not in _RAW_BYTES and v_cache_key not in _RAW_BYTES:
            raise TypeError(f"v_cache: dtype {v_cache_key} differs from v's {vd[4]} (kvjit copies bytes; view both "
                            f"as uint8 to store raw bytes)")
        v_row_bytes = v_row * vd[3]
        v_stride = v_stride_el * vd[3]
        v_slots, v_cache_stride = _cache_slots("v_cache", vcd, v_row if quant else v_row_bytes, "v")
        if v_slots < slots:
            slots = v_slots
        v_ptr = vd[0]
        v_cache_ptr = vcd[0]
        v_row_elems = v_row
        if not v_ptr and b == 0:
            # An empty tensor may have a NULL pointer, which would read as "K only": any aligned
            # stand-in does (with no rows nothing is read; prepare only looks at alignment).
            v_ptr = 256

    ishape = idd[1]
    if len(ishape) != 1:
        raise ValueError(f"indices: expected shape [B], got {list(ishape)}")
    if ishape[0] != b:
        raise ValueError(f"indices: {ishape[0]} slot ids for {b} tokens of k")
    index_type = _INDEX.get(idd[4])
    if index_type is None:
        raise TypeError(f"indices: dtype must be int32 or int64, got {idd[4]}")
    index_stride = idd[2][0] if b > 1 else 1
    if index_stride < 1:
        raise ValueError(f"indices: stride must be >= 1 element, got {index_stride}")
    if idd[0] % idd[3]:
        raise ValueError(f"indices: pointer {idd[0]:#x} is not aligned to its {idd[3]}-byte elements")
    if dev is not None:
        _same_device("indices", idd, dev)

    if num_slots is None:
        num_slots = slots
    elif type(num_slots) is not int or not 0 < num_slots <= slots:
        raise ValueError(f"num_slots: must be 1..{slots} (the cache's slots), got {num_slots!r}")
    if skip_slot is None:
        skip_slot = _lib.NO_SKIP_SLOT
    elif type(skip_slot) is not int or not 0 <= skip_slot < num_slots:
        raise ValueError(f"skip_slot: must be None or a slot 0..{num_slots - 1}, got {skip_slot!r}")
    if type(split) is not int or not 0 <= split < 2**31:
        raise ValueError(f"split: must be an int >= 0 (0: automatic), got {split!r}")
    pdl_mode = _pdl_mode(pdl)

    dtype = cache_dtype_code = scale_kind = 0
    k_scale_ptr = v_scale_ptr = num_heads = 0
    if quant:
        if version < 2:
            raise _lib.Error(_lib.ERR_UNSUPPORTED, "quantize on store: the loaded libkvjit predates it (args version 1)")
        dtype = _SOURCE[k_dtype]
        cache_dtype_code = _FP8[cache_key]
        if k_scale is None:
            if v_scale is not None:
                raise ValueError("k_scale: None while v_scale is given (pass both or neither)")
            scale_kind = _lib.SCALE_NONE
        else:
            k_scale_ptr, count = _scale("k_scale", k_scale, dev)
            if has_v:
                if v_scale is None:
                    raise ValueError("v_scale: None while k_scale is given (pass both or neither)")
                v_scale_ptr, v_count = _scale("v_scale", v_scale, dev)
                if v_count != count:
                    raise ValueError(f"v_scale: {v_count} scales, k_scale has {count} (both per tensor or both per head)")
            elif v_scale is not None:
                raise ValueError("v_scale: given without v")
            if count == 1:
                scale_kind = _lib.SCALE_PER_TENSOR
            else:
                if heads is not None and count != heads:
                    raise ValueError(f"k_scale: {count} scales for k's {heads} heads (1 per tensor or H per head)")
                if k_row % count:
                    raise ValueError(f"k_scale: {count} heads do not divide k's rows of {k_row} elements")
                if has_v and v_row_elems % count:
                    raise ValueError(f"v_scale: {count} heads do not divide v's rows of {v_row_elems} elements")
                scale_kind = _lib.SCALE_PER_HEAD
                num_heads = count
    elif k_scale is not None or v_scale is not None:
        raise ValueError(f"{'k_scale' if k_scale is not None else 'v_scale'}: scales need an fp8 cache (float8 "
                         f"k_cache, or cache_dtype= with a uint8 one) fed from float16, bfloat16 or float32")

    is_torch = kd[7]
    if stream is not None:
        stream = _tensor.stream_handle(stream)
    elif is_torch:
        stream = _tensor.torch_raw_stream(dev)
    else:
        stream = kd[6] or 0
    if batch is None:
        batch = b
    args = _lib.STORE_KV_PACKER.pack(
        version, kd[0], v_ptr, kcd[0], v_cache_ptr, idd[0], index_type, index_stride, batch, k_row_bytes,
        v_row_bytes, k_stride * k_size, v_stride, k_cache_stride, v_cache_stride, num_slots, skip_slot, split,
        pdl_mode, stream, dtype, cache_dtype_code, scale_kind, k_scale_ptr, v_scale_ptr, num_heads)
    return args, dev, is_torch


def run(fn, ctx, args, dev, is_torch):
    """Call @p fn (store or prepare) in @p dev's CUDA context; raise on failure."""
    handle = ctx._handle
    if handle is None:
        raise ValueError("context: closed")
    if is_torch and _tensor.torch_get_device() != dev:
        with _tensor.torch_device_guard(dev):
            status = call_in_context(fn, dev, handle, args)
    else:
        status = call_in_context(fn, dev, handle, args)
    if status:
        raise ctx._lib.error(status)


def call_in_context(fn, dev, *args):
    """fn(*args); when it finds no current CUDA context (a thread that has made no CUDA runtime
    call has none), make @p dev's primary context (the runtime's, so torch's) current and retry."""
    status = fn(*args)
    if status == _lib.ERR_NO_DEVICE and dev is not None and _tensor.make_primary_context_current(dev):
        status = fn(*args)
    return status


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
    Raises ValueError/TypeError naming the argument, kvjit.Error for library failures.
    """
    ctx = _context.context_arg(context)
    lib = ctx._lib
    args, dev, is_torch = build_args(k, v, k_cache, v_cache, indices, None, num_slots, skip_slot, split, pdl, k_scale,
                                     v_scale, cache_dtype, stream, lib.store_args_version)
    run(lib.store, ctx, args, dev, is_torch)


def prepare(k, v, k_cache, v_cache, indices, *, batch=None, num_slots=None, skip_slot=None, split=0, pdl="auto",
            k_scale=None, v_scale=None, cache_dtype=None, stream=None, context=None):
    """Load the kernel store_kv_cache() will use for these arguments, without launching: call it
    before CUDA graph capture. batch: None for k's batch, another size for its size class, 0 for
    every size class. Pointers are not dereferenced, but their alignment counts."""
    ctx = _context.context_arg(context)
    lib = ctx._lib
    if batch is not None and (type(batch) is not int or not 0 <= batch < 2**63):
        raise ValueError(f"batch: must be None or an int 0..2**63-1, got {batch!r}")
    args, dev, is_torch = build_args(k, v, k_cache, v_cache, indices, batch, num_slots, skip_slot, split, pdl, k_scale,
                                     v_scale, cache_dtype, stream, lib.store_args_version)
    run(lib.prepare, ctx, args, dev, is_torch)


def _arch(arch, lib):
    if isinstance(arch, int) and not isinstance(arch, bool):
        if not -2**31 <= arch < 2**31:
            raise ValueError(f"arch: a compute capability or target code of 32 bits, got {arch}")
        return arch
    if isinstance(arch, str):
        if "\0" in arch:
            raise ValueError("arch: contains a NUL character")
        sm = ctypes.c_int()
        lib.check(lib.fn["kvjit_parse_arch"](arch.encode(), ctypes.byref(sm)))
        return sm.value
    raise TypeError(f"arch: expected an int (90) or a string ('sm_90'), got {type(arch).__name__}")


def variant(k_row_bytes, v_row_bytes=0, *, arch=0, index="int64", pdl="auto", split=0, vector_bytes=0, dtype=None,
            cache_dtype=None, num_heads=0, scaled=False, _lib_override=None):
    """A kvjit_store_kv_variant (the prewarm/manifest unit) from keywords."""
    lib = _lib_override or _lib.load()
    index_key = dtype_name(index, "index")
    if index_key not in _INDEX:
        raise ValueError(f"index: must be int32 or int64, got {index!r}")
    src = cache = scale_kind = 0
    if dtype is not None or cache_dtype is not None:
        if dtype is None or cache_dtype is None:
            raise ValueError(f"{'dtype' if dtype is None else 'cache_dtype'}: quantizing needs both dtype and cache_dtype")
        src_key = dtype_name(dtype, "dtype")
        cache_key = dtype_name(cache_dtype, "cache_dtype")
        if src_key not in _SOURCE:
            raise ValueError(f"dtype: must be float16, bfloat16 or float32, got {dtype!r}")
        if cache_key not in _FP8:
            raise ValueError(f"cache_dtype: must be fp8_e4m3 or fp8_e5m2, got {cache_dtype!r}")
        src, cache = _SOURCE[src_key], _FP8[cache_key]
        scale_kind = _lib.SCALE_PER_HEAD if num_heads else _lib.SCALE_PER_TENSOR if scaled else _lib.SCALE_NONE
    elif num_heads or scaled:
        raise ValueError("num_heads: scales need dtype and cache_dtype (quantize on store)")
    # The variant's fields: int64 rows and heads, 32-bit split and vector width.
    for name, value, bound in (("k_row_bytes", k_row_bytes, 2**63), ("v_row_bytes", v_row_bytes, 2**63),
                               ("split", split, 2**31), ("vector_bytes", vector_bytes, 2**31),
                               ("num_heads", num_heads, 2**63)):
        if type(value) is not int or not 0 <= value < bound:
            raise ValueError(f"{name}: must be an int 0..{bound - 1}, got {value!r}")
    return _lib.StoreKvVariant(_lib.STORE_KV_VARIANT_VERSION, _arch(arch, lib), k_row_bytes, v_row_bytes,
                               _INDEX[index_key], _pdl_mode(pdl), split, vector_bytes, src, cache, scale_kind,
                               num_heads)


def prewarm(k_row_bytes, v_row_bytes=0, *, arch=0, index="int64", pdl="auto", split=0, vector_bytes=0, dtype=None,
            cache_dtype=None, num_heads=0, scaled=False, context=None):
    """Compile into the disk cache every kernel a store of this variant may use (no GPU needed
    when arch is given: 90 or "sm_90"). Row bytes count source bytes. Quantizing: dtype and
    cache_dtype, with scaled=True (per tensor) or num_heads=H (per head).
    Returns {"compiled": n, "cached": m}."""
    ctx = _context.context_arg(context)
    lib = ctx._lib
    var = variant(k_row_bytes, v_row_bytes, arch=arch, index=index, pdl=pdl, split=split, vector_bytes=vector_bytes,
                  dtype=dtype, cache_dtype=cache_dtype, num_heads=num_heads, scaled=scaled, _lib_override=lib)
    compiled = ctypes.c_uint()
    cached = ctypes.c_uint()
    ctx._require_open()
    lib.check(lib.fn["kvjit_store_kv_cache_prewarm"](ctx._handle, ctypes.byref(var), ctypes.byref(compiled),
                                                      ctypes.byref(cached)))
    return {"compiled": compiled.value, "cached": cached.value}
