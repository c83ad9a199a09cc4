"""Filling the disk cache ahead of use (no GPU needed when the arch is given): store_kv_cache's
variants from keywords, and any op's manifest line."""

import ctypes

from . import _context, _lib
from ._ops import FP8_DTYPES, INDEX_TYPES, SOURCE_DTYPES, dtype_name, int_arg, pdl_mode


def _arch(arch, lib):
    if isinstance(arch, int) and not isinstance(arch, bool):
        return int_arg(arch, "arch", -2**31, 2**31 - 1)
    if isinstance(arch, str):
        if "\0" in arch:
            raise ValueError("arch: contains a NUL character")
        sm = ctypes.c_int()
        lib.check(lib.fn["kvjit_parse_arch"](arch.encode(), ctypes.byref(sm)))
        return sm.value
    raise TypeError(f"arch: expected an int (90) or a string ('sm_90'), got {type(arch).__name__}")


def variant(k_row_bytes, v_row_bytes, *, arch, index, pdl, split, vector_bytes, dtype, cache_dtype, num_heads,
            scaled, lib):
    """A store_kv_cache kvjit_variant (the prewarm and manifest unit) from prewarm()'s keywords."""
    index_key = dtype_name(index, "index")
    if index_key not in INDEX_TYPES:
        raise ValueError(f"index: must be int32 or int64, got {index!r}")
    src = cache = scale_kind = 0
    if dtype is not None or cache_dtype is not None:
        if dtype is None or cache_dtype is None:
            raise ValueError(f"{'dtype' if dtype is None else 'cache_dtype'}: quantizing needs both dtype and "
                             f"cache_dtype")
        src_key, cache_key = dtype_name(dtype, "dtype"), dtype_name(cache_dtype, "cache_dtype")
        if src_key not in SOURCE_DTYPES:
            raise ValueError(f"dtype: must be float16, bfloat16 or float32, got {dtype!r}")
        if cache_key not in FP8_DTYPES:
            raise ValueError(f"cache_dtype: must be fp8_e4m3 or fp8_e5m2, got {cache_dtype!r}")
        src, cache = SOURCE_DTYPES[src_key], FP8_DTYPES[cache_key]
        scale_kind = _lib.SCALE_PER_HEAD if num_heads else _lib.SCALE_PER_TENSOR if scaled else _lib.SCALE_NONE
    elif num_heads or scaled:
        raise ValueError("num_heads: scales need dtype and cache_dtype (quantize on store)")
    # The variant's fields: int64 rows and heads, 32-bit split and vector width; a wrong type is a
    # ValueError here, as for every row keyword.
    for name, value, bound in (("k_row_bytes", k_row_bytes, 2**63), ("v_row_bytes", v_row_bytes, 2**63),
                               ("split", split, 2**31), ("vector_bytes", vector_bytes, 2**31),
                               ("num_heads", num_heads, 2**63)):
        if type(value) is not int or not 0 <= value < bound:
            raise ValueError(f"{name}: must be an int 0..{bound - 1}, got {value!r}")
    values = {"arch": _arch(arch, lib), "k_row_bytes": k_row_bytes, "v_row_bytes": v_row_bytes,
              "index": INDEX_TYPES[index_key], "pdl": pdl_mode(pdl), "split": split, "dtype": src,
              "cache_dtype": cache, "scale": scale_kind, "num_heads": num_heads}
    if vector_bytes:  # 0: the op's default (the widest access)
        values["vec"] = vector_bytes
    return _variant_of(lib, "store_kv_cache", values)


def _variant_of(lib, op_name, values):
    """kvjit_variant_init() of op ``op_name`` (its defaults: the library's), then ``values`` by
    field name, as the op's field table names them."""
    op = lib.fn["kvjit_op_find"](op_name.encode())
    var = _lib.Variant()
    lib.check(lib.fn["kvjit_variant_init"](ctypes.byref(var), op))
    fields = {op.contents.fields[i].name.decode(): i for i in range(op.contents.num_fields)}
    for name, value in values.items():
        var.values[fields[name]] = value
    return var


def prewarm(k_row_bytes, v_row_bytes=None, *, arch=0, index=None, pdl="auto", split=0, vector_bytes=0, dtype=None,
            cache_dtype=None, num_heads=0, scaled=False, context=None):
    """Compile into the disk cache every kernel a store of this variant may use.

    The defaults are the CLI's (``kvjit prewarm --k-row-bytes N``): V rows as wide as K rows and
    both index types.

    Args:
        k_row_bytes: bytes of one K row (source bytes when quantizing).
        v_row_bytes: bytes of one V row; None: ``k_row_bytes``; 0: K only.
        arch: 90 or "sm_90" (no GPU needed); 0: the current device's.
        index: "int32" or "int64"; None: both.
        pdl, split, vector_bytes: kernel choices ("auto", 0: automatic, 0: automatic).
        dtype, cache_dtype: quantizing: the rows' dtype and the fp8 cache's, with ``scaled=True``
            (per-tensor scales) or ``num_heads=H`` (per head).
        context: a :class:`Context` (default: the shared one).

    Returns:
        ``{"compiled": n, "cached": m}`` over every variant built.
    """
    ctx = _context.context_arg(context)
    lib = ctx._lib
    if v_row_bytes is None:
        v_row_bytes = k_row_bytes
    variants = [variant(k_row_bytes, v_row_bytes, arch=arch, index=i, pdl=pdl, split=split,
                        vector_bytes=vector_bytes, dtype=dtype, cache_dtype=cache_dtype, num_heads=num_heads,
                        scaled=scaled, lib=lib)
                for i in (("int32", "int64") if index is None else (index,))]
    total = {"compiled": 0, "cached": 0}
    for var in variants:
        compiled, cached = ctypes.c_uint(), ctypes.c_uint()
        lib.check(lib.fn["kvjit_variant_prewarm"](ctx.handle, ctypes.byref(var), ctypes.byref(compiled),
                                                   ctypes.byref(cached)))
        total["compiled"] += compiled.value
        total["cached"] += cached.value
    return total


def prewarm_line(line, *, context=None):
    """Compile every kernel of one manifest line of any op (cache/MANIFEST.md), e.g.
    ``"transfer_kv arch=90 k_row_bytes=2048 ..."``. Returns ``{"compiled": n, "cached": m}``."""
    if not isinstance(line, str):
        raise TypeError(f"line: expected a str, got {type(line).__name__}")
    if "\0" in line:
        raise ValueError("line: contains a NUL character")
    ctx = _context.context_arg(context)
    compiled, cached = ctypes.c_uint(), ctypes.c_uint()
    ctx._lib.check(ctx._lib.fn["kvjit_prewarm_line"](ctx.handle, line.encode(), ctypes.byref(compiled),
                                                     ctypes.byref(cached)))
    return {"compiled": compiled.value, "cached": cached.value}
