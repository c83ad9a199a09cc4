"""The binding without a GPU: library loading, struct layouts, errors, contexts, prewarm, the
loader's compile-only path, and store_kv_cache's argument checks on fake device tensors.

Fake tensors carry made-up pointers: every store here either fails before the library is called,
fails in the library's validation (before any driver call), or has batch 0 (validated, nothing
launched). Stores with rows run only where kvjit finds no driver.
"""

import ctypes
import os
import shutil
import subprocess
import sys

from _support import LOADER_SRC, FakeCAI, has_driver, parametrize, raises, skip, tempdir

import kvjit
from kvjit import _lib, _ops

B, H, D = 16, 8, 128
K, V, KC, VC, LOC = 0x10000000, 0x20000000, 0x30000000, 0x40000000, 0x50000000


def tensors(batch=B, heads=H, dim=D, typestr="<f2", slots=1000, index="<i8", **over):
    """k, v, k_cache, v_cache, indices as fakes; keywords replace any of them."""
    t = {
        "k": FakeCAI((batch, heads, dim), typestr, K),
        "v": FakeCAI((batch, heads, dim), typestr, V),
        "k_cache": FakeCAI((slots, heads, dim), typestr, KC),
        "v_cache": FakeCAI((slots, heads, dim), typestr, VC),
        "indices": FakeCAI((batch,), index, LOC),
    }
    t.update(over)
    return t


def packed(t, **kw):
    """The kvjit_store_kv_args the binding would pass, as a ctypes struct."""
    return _ops.store_kv_args(t["k"], t["v"], t["k_cache"], t["v_cache"], t["indices"], **kw)


def store(t, **kw):
    kvjit.store_kv_cache(t["k"], t["v"], t["k_cache"], t["v_cache"], t["indices"], **kw)


# ---- the library -------------------------------------------------------------------------------


def test_library_loads_and_reports_its_version():
    path = kvjit.library_path()
    assert os.path.exists(path), path
    # One version source: meson.build's project version is the package's and the library's.
    assert kvjit.version() == kvjit.__version__ == _lib.PACKAGE_VERSION
    major_, minor_, patch_ = (int(p) for p in kvjit.__version__.split("."))
    assert kvjit.version_number() == major_ * 10000 + minor_ * 100 + patch_
    major, minor = kvjit.nvrtc_version()
    assert major >= 11
    assert 90 in kvjit.nvrtc_archs()
    assert kvjit.parse_arch("sm_90") == 90 and kvjit.parse_arch("8.9") == 89


def test_library_lookup_order():
    """$KVJIT_LIB, then a copy next to the package, else a clear error naming what was tried."""
    lib = os.path.realpath(kvjit.library_path())
    package = os.path.dirname(kvjit.__file__)
    with tempdir() as d:
        shutil.copytree(package, os.path.join(d, "kvjit"), ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
        # What an installed package has: the version meson wrote.
        with open(os.path.join(d, "kvjit", "_version.py"), "w") as f:
            f.write(f"version = {kvjit.__version__!r}\n")
        env = {k: v for k, v in os.environ.items() if k not in ("KVJIT_LIB", "LD_LIBRARY_PATH", "PYTHONPATH")}
        code = "import kvjit; print(kvjit.library_path())"

        def run(extra):
            return subprocess.run([sys.executable, "-c", code], cwd=d, env=dict(env, **extra), capture_output=True,
                                  text=True, timeout=60)

        r = run({"KVJIT_LIB": os.path.join(d, "missing.so")})
        assert r.returncode != 0 and "LibraryNotFoundError" in r.stderr and "missing.so" in r.stderr, r.stderr
        r = run({})
        if r.returncode == 0:
            # A system-wide libkvjit (ldconfig) answers last; nothing else to check then.
            assert "kvjit" in r.stdout
        else:
            assert f"no libkvjit {kvjit.__version__} found" in r.stderr and "KVJIT_LIB" in r.stderr, r.stderr
        shutil.copy(lib, os.path.join(d, "kvjit", "libkvjit.so"))
        r = run({})
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == os.path.join(d, "kvjit", "libkvjit.so")
        r = run({"KVJIT_LIB": lib})
        assert r.returncode == 0 and r.stdout.strip() == lib, r.stderr


def test_status_names_match_the_library():
    lib = _lib.load()
    for status, name in _lib.STATUS_NAMES.items():
        assert lib.fn["kvjit_status_name"](status).decode() == name
    assert lib.fn["kvjit_status_name"](-999).decode() == "UNKNOWN"


def test_struct_layouts():
    # Offsets follow from the header's field order and LP64 alignment.
    assert ctypes.sizeof(_lib.StoreKvArgs) == 208
    assert _lib.StoreKvArgs.stream.offset == 144 and _lib.StoreKvArgs.dtype.offset == 152
    assert _lib.StoreKvArgs.k_scale.offset == 168 and _lib.StoreKvArgs.num_heads.offset == 184
    assert _lib.StoreKvArgs.k_cache_layout.offset == 192 and _lib.StoreKvArgs.v_cache_layout.offset == 200
    assert ctypes.sizeof(_lib.Layout) == 96 and _lib.Layout.num_row_dims.offset == 40
    assert _lib.Layout.row_extents.offset == 48 and _lib.Layout.row_strides.offset == 72
    assert ctypes.sizeof(_lib.Variant) == 208 and _lib.Variant.values.offset == 16
    assert ctypes.sizeof(_lib.OpField) == 72 and _lib.OpField.default_value.offset == 56
    assert ctypes.sizeof(_lib.OpInfo) == 40 and _lib.OpInfo.num_classes.offset == 32
    assert ctypes.sizeof(_lib.ContextOptions) == 88 and _lib.ContextOptions.allow_shared_dirs.offset == 56
    assert _lib.ContextOptions.remote_read_write.offset == 80
    assert ctypes.sizeof(_lib.ProgramDesc) == 80 and _lib.ProgramDesc.arch.offset == 72
    assert ctypes.sizeof(_lib.LaunchConfig) == 72 and _lib.LaunchConfig.stream.offset == 32
    assert _lib.LaunchConfig.num_args.offset == 64
    assert ctypes.sizeof(_lib.Stats) == 240 and ctypes.sizeof(_lib.MissInfo) == 808 and ctypes.sizeof(_lib.CacheInfo) == 32


def test_errors_carry_status_name_and_message():
    with raises(kvjit.InvalidArgumentError, match="bogus") as e:
        kvjit.parse_arch("bogus")
    err = e.value
    assert isinstance(err, kvjit.Error) and isinstance(err, ValueError)
    assert err.status == -1 and err.name == "ERR_INVALID_ARGUMENT" and "bogus" in err.message
    assert "ERR_INVALID_ARGUMENT" in str(err)
    if not has_driver():
        with raises(kvjit.Error) as e:
            kvjit.driver_version()
        assert e.value.status == -3 and e.value.name == "ERR_NO_DRIVER" and "libcuda" in e.value.message


# ---- contexts ----------------------------------------------------------------------------------


def test_context_options_and_info():
    with tempdir() as d:
        write = os.path.join(d, "w")
        with kvjit.Context(write, cache_path=[os.path.join(d, "r1"), os.path.join(d, "r2")],
                           cache_max_bytes=1 << 20, log=False) as ctx:
            info = ctx.cache_info()
            assert info["write_dir"] == write and info["max_bytes"] == 1 << 20
            assert info["read_dirs"] == [os.path.join(d, "r1"), os.path.join(d, "r2")]
            assert ctx.stats()["compiles"] == 0 and set(ctx.stats()) == set(_lib.STATS_FIELDS)
        assert "closed" in repr(ctx)
        ctx.close()  # idempotent
        with raises(ValueError, match="closed"):
            ctx.stats()
        mem = kvjit.Context(disable_cache=True)
        assert mem.cache_info()["write_dir"] is None
        mem.close()
    with raises(ValueError, match="disable_cache"):
        kvjit.Context(disable_cache=2)
    with raises(TypeError, match="cache_dir"):
        kvjit.Context(cache_dir=12)
    with raises(ValueError, match="cache_max_bytes"):
        kvjit.Context(cache_max_bytes=-1)
    assert kvjit.default_context() is kvjit.default_context()
    assert isinstance(kvjit.stats(), dict) and "write_dir" in kvjit.cache_info()


# ---- prewarm -----------------------------------------------------------------------------------


def test_prewarm_into_a_temp_cache_without_a_gpu():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        first = kvjit.prewarm(2048, 2048, arch="sm_90", index="int32", pdl="on", split=0, context=ctx)
        assert first["compiled"] >= 1 and first["cached"] == 0, first
        again = kvjit.prewarm(2048, 2048, arch=90, index="int32", pdl="on", context=ctx)
        assert again == {"compiled": 0, "cached": first["compiled"]}, again
        # One NVRTC program (a bundle) for all of a variant's kernels (issue 19).
        assert ctx.stats()["compiles"] == (1 if first["compiled"] > 1 else first["compiled"])
        assert any(name.endswith(".kvjit") for _, _, files in os.walk(d) for name in files)
        # K only, one split: decode batches 8 B accesses and plain stores, batches 17..512 8 B and
        # evict-first, 513..32768 16 B and evict-first, batches > 32768 two items per lane group
        # (128 B slices): four kernels.
        one = kvjit.prewarm(256, 0, arch="sm_80", split=2, index="int64", context=ctx)
        assert one["compiled"] == 4, one


def test_prewarm_defaults_are_the_clis():
    """Issue 25: kvjit.prewarm(N) builds what `kvjit prewarm --k-row-bytes N` does: V rows as wide
    as K rows, int32 and int64 indices."""
    with tempdir() as d1, tempdir() as d2, kvjit.Context(d1, log=False) as a, kvjit.Context(d2, log=False) as b:
        explicit = [kvjit.prewarm(256, 256, arch="sm_80", split=2, index=i, context=a)["compiled"]
                    for i in ("int32", "int64")]
        assert kvjit.prewarm(256, arch="sm_80", split=2, context=b)["compiled"] == sum(explicit) > 0


def test_prewarm_quantizing_variant():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        got = kvjit.prewarm(2048, 2048, arch="sm_90", dtype="bfloat16", cache_dtype="fp8_e4m3", num_heads=8,
                            context=ctx)
        assert got["compiled"] >= 1, got


def test_prewarm_bad_arguments():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        with raises(kvjit.InvalidArgumentError, match="split"):
            kvjit.prewarm(256, 256, arch=90, split=3, context=ctx)
        with raises(kvjit.Error, match="sm_90"):
            kvjit.prewarm(256, 256, arch=80, pdl="on", context=ctx)
        with raises(ValueError, match="index"):
            kvjit.prewarm(256, arch=90, index="int16", context=ctx)
        with raises(ValueError, match="pdl"):
            kvjit.prewarm(256, arch=90, pdl="sometimes", context=ctx)
        with raises(ValueError, match="cache_dtype"):
            kvjit.prewarm(256, arch=90, dtype="f16", context=ctx)
        with raises(ValueError, match="k_row_bytes"):
            kvjit.prewarm(-1, arch=90, context=ctx)
        with raises(kvjit.InvalidArgumentError, match="arch"):
            kvjit.prewarm(256, arch="sm_x", context=ctx)


# ---- the loader --------------------------------------------------------------------------------


def test_program_compile_only():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        prog = kvjit.Program(LOADER_SRC, kernels=["scale<256, float>", "fill"], options=["-std=c++17"],
                             name="scale.cu", context=ctx)
        assert prog.compile(arch="sm_90") == "compile"
        assert prog.compile(arch=90) == "disk"
        assert prog.compile(arch=80) == "compile"
        assert ctx.stats()["compiles"] == 2


def test_program_compile_error_surfaces_the_message():
    with tempdir() as d, kvjit.Context(d, log=False) as ctx:
        prog = kvjit.Program("__global__ void broken( { }", kernels=["broken"], name="broken.cu", context=ctx)
        with raises(kvjit.CompileError, match="broken.cu") as e:
            prog.compile(arch=90)
        assert e.value.status == -7 and e.value.name == "ERR_COMPILE" and "error" in e.value.message
        missing = kvjit.Program(LOADER_SRC, kernels=["nope"], name="missing.cu", context=ctx)
        with raises(kvjit.CompileError, match="nope"):
            missing.compile(arch=90)
        with raises(kvjit.InvalidArgumentError, match="arch"):
            kvjit.Program(LOADER_SRC, kernels=["fill"], options=["--gpu-architecture=sm_90"], context=ctx).compile(90)
    with raises(ValueError, match="kernels"):
        kvjit.Program(LOADER_SRC, kernels=[])
    with raises(TypeError, match="source"):
        kvjit.Program(12, kernels=["fill"])


def test_program_needs_a_driver_to_load():
    if has_driver():
        skip("a driver is there (the GPU tests cover loading)")
    prog = kvjit.Program(LOADER_SRC, kernels=["fill"])
    with raises(kvjit.Error) as e:
        prog.kernel("fill")
    assert e.value.name == "ERR_NO_DRIVER"
    with raises(kvjit.Error, match="no GPU"):
        prog.compile()  # arch 0 = "the current device"


def test_launch_argument_checks():
    kernel = kvjit.Kernel.__new__(kvjit.Kernel)  # no loaded program needed: checks come first
    kernel._handle = None
    kernel._lib = _lib.load()
    kernel._launch = None
    with raises(TypeError, match=r"args\[1\].*ctypes"):
        kernel.launch(1, 32, [ctypes.c_void_p(0), 3])
    with raises(TypeError, match=r"args\[0\]"):
        kernel.launch(1, 32, ["text"])
    with raises(ValueError, match="grid"):
        kernel.launch((1, 2, 3, 4), 32, [])
    with raises(ValueError, match="block"):
        kernel.launch(1, 0, [])
    with raises(TypeError, match="stream"):
        kernel.launch(1, 1, [], stream="default")


# ---- store_kv_cache: layouts the binding packs ---------------------------------------------------


def test_plain_contiguous_layout():
    s = packed(tensors())
    assert (s.version, s.k, s.v, s.k_cache, s.v_cache, s.indices) == (3, K, V, KC, VC, LOC)
    assert (s.k_cache_layout, s.v_cache_layout, s.k_layout, s.v_layout) == (None, None, None, None)  # flat
    assert (s.index_type, s.index_stride, s.batch) == (_lib.INDEX_INT64, 1, B)
    assert s.k_row_bytes == s.v_row_bytes == s.k_stride == s.v_stride == H * D * 2
    assert s.k_cache_stride == s.v_cache_stride == H * D * 2
    assert (s.num_slots, s.skip_slot, s.split, s.pdl, s.stream) == (1000, -1, 0, _lib.PDL_AUTO, None)
    assert (s.dtype, s.cache_dtype, s.scale_kind, s.k_scale, s.v_scale, s.num_heads) == (0, 0, 0, None, None, 0)


def test_strided_and_paged_layouts():
    row = H * D
    t = tensors(
        # k and v: token rows of a fused qkv buffer ([B, 3 * row]); k 2-D, v 3-D
        k=FakeCAI((B, row), "<f2", K, strides=(3 * row * 2, 2)),
        v=FakeCAI((B, H, D), "<f2", V, strides=(3 * row * 2, D * 2, 2)),
        # k_cache: paged [pages, page_size, H, D]; v_cache: every other slot of [2000, H*D]
        k_cache=FakeCAI((40, 25, H, D), "<f2", KC),
        v_cache=FakeCAI((1000, row), "<f2", VC, strides=(2 * row * 2, 2)),
        indices=FakeCAI((B,), "<i4", LOC, strides=(12,)),
    )
    s = packed(t, num_slots=900, skip_slot=7, split=4, pdl="off", stream=0x1234)
    assert s.k_stride == s.v_stride == 3 * row * 2 and s.k_row_bytes == s.v_row_bytes == row * 2
    assert s.k_cache_stride == row * 2 and s.v_cache_stride == 2 * row * 2
    assert (s.index_type, s.index_stride) == (_lib.INDEX_INT32, 3)
    assert (s.num_slots, s.skip_slot, s.split, s.pdl, s.stream) == (900, 7, 4, _lib.PDL_OFF, 0x1234)
    # a paged cache whose page stride has a gap is (pages, page_size), not one slot index (issue 29)
    gap = FakeCAI((40, 25, row), "<f2", KC, strides=(26 * row * 2, row * 2, 2))
    s = packed(tensors(k_cache=gap))
    assert s.k_cache_stride == 0 and s.num_slots == 1000
    assert (s.k_layout.page_size, s.k_layout.page_stride, s.k_layout.slot_stride) == (25, 26 * row * 2, row * 2)
    assert s.k_layout.row() == [(row, 2)] and s.v_layout is None


def test_k_only_asymmetric_and_raw_bytes():
    t = tensors(v=None, v_cache=None)
    s = packed(t)
    assert s.v is None and s.v_cache is None and s.v_row_bytes == 0
    # V rows of another width (e.g. MLA-style 576 / 512), caches with fewer slots for V
    t = tensors(v=FakeCAI((B, 512), "<f2", V), v_cache=FakeCAI((500, 512), "<f2", VC),
                k=FakeCAI((B, 576), "<f2", K), k_cache=FakeCAI((1000, 576), "<f2", KC))
    s = packed(t)
    assert (s.k_row_bytes, s.v_row_bytes, s.num_slots) == (1152, 1024, 500)
    # fp8 data as uint8 is copied as bytes; so is an fp16 row into a uint8 cache of twice the width
    t = tensors(typestr="|u1")
    assert packed(t).k_row_bytes == H * D
    t = tensors(k_cache=FakeCAI((1000, H * D * 2), "|u1", KC))
    assert packed(t).k_cache_stride == H * D * 2


def test_quantizing_layout_with_uint8_cache():
    t = tensors(typestr="<f4", k_cache=FakeCAI((1000, H, D), "|u1", KC), v_cache=FakeCAI((1000, H, D), "|u1", VC))
    ks = FakeCAI((H,), "<f4", 0x60000000)
    vs = FakeCAI((H, 1), "<f4", 0x60000100)
    s = packed(t, cache_dtype="fp8_e5m2", k_scale=ks, v_scale=vs)
    assert (s.dtype, s.cache_dtype, s.scale_kind, s.num_heads) == (
        _lib.DTYPE_F32, _lib.DTYPE_FP8_E5M2, _lib.SCALE_PER_HEAD, H)
    assert s.k_row_bytes == H * D * 4 and s.k_cache_stride == H * D and (s.k_scale, s.v_scale) == (
        0x60000000, 0x60000100)
    one = FakeCAI((1,), "<f4", 0x60000200)
    s = packed(t, cache_dtype="e4m3", k_scale=one, v_scale=one)
    assert (s.cache_dtype, s.scale_kind, s.num_heads) == (_lib.DTYPE_FP8_E4M3, _lib.SCALE_PER_TENSOR, 0)
    s = packed(t, cache_dtype="fp8_e4m3")
    assert s.scale_kind == _lib.SCALE_NONE and s.dtype == _lib.DTYPE_F32
    # without cache_dtype a uint8 cache of the right size is a byte copy target, not quantized
    with raises(ValueError, match="k_cache"):
        packed(t)


# ---- store_kv_cache: bad arguments (each error names the argument) --------------------------------

BAD = [
    ("k", TypeError, {"k": 12}),
    ("k", ValueError, {"k": FakeCAI((B * H * D,), "<f2", K)}),
    ("k", ValueError, {"k": FakeCAI((B, H, D), "<f2", K, strides=(H * D * 2, 2, H * 2))}),
    ("k", ValueError, {"k": FakeCAI((B, H * D), "<f2", K, strides=(0, 2))}),
    ("k", ValueError, {"k": FakeCAI((B, H * D), "<f2", K, strides=(H * D * 2, 3))}),
    ("k", TypeError, {"k": FakeCAI((B, H, D), ">f2", K)}),
    ("v", ValueError, {"v": FakeCAI((B + 1, H, D), "<f2", V)}),
    ("v_cache", ValueError, {"v_cache": None}),
    ("v", ValueError, {"v": None}),
    ("k_cache", ValueError, {"k_cache": FakeCAI((1000, H, D + 1), "<f2", KC)}),
    ("k_cache", ValueError, {"k_cache": FakeCAI((1000,), "<f2", KC)}),
    ("k_cache", ValueError, {"k_cache": FakeCAI((1000, H, D), "<f2", KC, strides=(0, D * 2, 2))}),
    ("k_cache", ValueError, {"k_cache": FakeCAI((0, H, D), "<f2", KC)}),
    ("k_cache", ValueError, {"k_cache": FakeCAI((1000, H, D), "<f2", KC, strides=(2, D * 2, 2))}),
    ("k_cache", TypeError, {"k_cache": FakeCAI((1000, H, D), "<i2", KC)}),
    ("v_cache", TypeError, {"v_cache": FakeCAI((1000, H, D), "<i2", VC)}),
    ("indices", TypeError, {"indices": FakeCAI((B,), "<f4", LOC)}),
    ("indices", ValueError, {"indices": FakeCAI((B, 1), "<i8", LOC)}),
    ("indices", ValueError, {"indices": FakeCAI((B - 1,), "<i8", LOC)}),
    ("indices", ValueError, {"indices": FakeCAI((B,), "<i8", LOC + 4)}),
    ("indices", ValueError, {"indices": FakeCAI((B,), "<i8", LOC, strides=(0,))}),
    ("indices", TypeError, {"indices": [1, 2, 3]}),
]


@parametrize("arg, exc, over", BAD)
def test_bad_tensors_name_the_argument(arg, exc, over):
    with raises(exc, match=rf"^{arg}: "):
        store(tensors(**over))


BAD_KEYWORDS = [
    ("num_slots", ValueError, {"num_slots": 1001}),
    ("num_slots", ValueError, {"num_slots": 0}),
    ("skip_slot", ValueError, {"skip_slot": 1000}),
    ("skip_slot", ValueError, {"skip_slot": 5, "num_slots": 5}),
    ("split", ValueError, {"split": -1}),
    ("split", TypeError, {"split": 1.5}),
    ("split", kvjit.InvalidArgumentError, {"split": 3}),  # the library's check, before any launch
    ("pdl", ValueError, {"pdl": "maybe"}),
    ("pdl", ValueError, {"pdl": 1}),
    ("k_scale", ValueError, {"k_scale": FakeCAI((1,), "<f4", 0x60000000)}),
    ("v_scale", ValueError, {"v_scale": FakeCAI((1,), "<f4", 0x60000000)}),
    ("cache_dtype", ValueError, {"cache_dtype": "int4"}),
    ("cache_dtype", ValueError, {"cache_dtype": "f16"}),
    ("k_cache", TypeError, {"cache_dtype": "fp8_e4m3"}),  # an f16 cache cannot hold fp8
    ("stream", TypeError, {"stream": "current"}),
    ("context", ValueError, {"context": "closed"}),
]


@parametrize("arg, exc, kw", BAD_KEYWORDS)
def test_bad_keywords_name_the_argument(arg, exc, kw):
    if kw.get("context") == "closed":
        ctx = kvjit.Context(disable_cache=True)
        ctx.close()
        kw = {"context": ctx}
    with raises(exc, match=rf"^{arg}: "):
        store(tensors(), **kw)


def test_entry_points_are_c_functions_that_bind_like_python():
    """kvjit.store_kv_cache / transfer_kv are kvjit._C's own functions (no Python frame per call);
    their arguments bind as a def's would, with Python's wording."""
    import inspect

    for fn in (kvjit.store_kv_cache, kvjit.transfer_kv):
        assert type(fn).__name__ == "builtin_function_or_method" and fn.__module__ == "kvjit", fn
    assert list(inspect.signature(kvjit.store_kv_cache).parameters) == [
        "k", "v", "k_cache", "v_cache", "indices", "num_slots", "skip_slot", "split", "pdl", "k_scale", "v_scale",
        "cache_dtype", "layout", "stream", "context"]
    assert "store_kv_cache" in dir(kvjit) and "transfer_kv" in dir(kvjit)
    t = tensors(batch=0)
    args = [t["k"], t["v"], t["k_cache"], t["v_cache"], t["indices"]]
    with raises(TypeError, match=r"takes 5 positional arguments but 6 were given"):
        kvjit.store_kv_cache(*args, 7)
    with raises(TypeError, match=r"missing required argument 'indices'"):
        kvjit.store_kv_cache(*args[:4])
    with raises(TypeError, match=r"unexpected keyword argument 'slots'"):
        kvjit.store_kv_cache(*args, slots=3)
    with raises(TypeError, match=r"multiple values for argument 'k'"):
        kvjit.store_kv_cache(*args, k=args[0])
    kvjit.store_kv_cache(**t)  # every argument by keyword
    kvjit.store_kv_cache(*args, num_slots=None, skip_slot=None, cache_dtype=None, stream=None, context=None)
    kvjit.store_kv_cache(*args, num_slots=1000, skip_slot=3, split=0, pdl="off", stream=0)  # the normaliser
    with raises(TypeError, match=r"^split: expected an int, got NoneType"):
        kvjit.store_kv_cache(*args, split=None)
    with raises(TypeError, match=r"transfer_kv\(\) missing required argument 'dst_indices'"):
        kvjit.transfer_kv(*args)


def fp8_tensors(src="<f2", cache="|u1", heads=H):
    return tensors(typestr=src, heads=heads, k_cache=FakeCAI((1000, heads, D), cache, KC),
                   v_cache=FakeCAI((1000, heads, D), cache, VC))


BAD_QUANT = [
    ("k_scale", TypeError, {"k_scale": FakeCAI((1,), "<f2", 0x60000000), "v_scale": FakeCAI((1,), "<f4", 0x6000)}),
    ("k_scale", ValueError, {"k_scale": FakeCAI((3,), "<f4", 0x60000000), "v_scale": FakeCAI((3,), "<f4", 0x6000)}),
    ("k_scale", ValueError, {"k_scale": FakeCAI((1,), "<f4", 0x60000002), "v_scale": FakeCAI((1,), "<f4", 0x6000)}),
    ("k_scale", ValueError, {"k_scale": FakeCAI((H,), "<f4", 0x6000, strides=(8,)), "v_scale": FakeCAI((H,), "<f4", 0)}),
    ("k_scale", ValueError, {"v_scale": FakeCAI((1,), "<f4", 0x6000)}),
    ("v_scale", ValueError, {"k_scale": FakeCAI((1,), "<f4", 0x6000)}),
    ("v_scale", ValueError, {"k_scale": FakeCAI((1,), "<f4", 0x6000), "v_scale": FakeCAI((H,), "<f4", 0x6000)}),
]


@parametrize("arg, exc, kw", BAD_QUANT)
def test_bad_scales_name_the_argument(arg, exc, kw):
    with raises(exc, match=rf"^{arg}: "):
        store(fp8_tensors(), cache_dtype="fp8_e4m3", **kw)


def test_bad_quantizing_dtypes():
    t = fp8_tensors(src="<i2")
    with raises(TypeError, match="^k: "):
        store(t, cache_dtype="fp8_e4m3")
    t = fp8_tensors()
    t["v"] = FakeCAI((B, H, D), "<f4", V)
    with raises(TypeError, match="^v: "):
        store(t, cache_dtype="fp8_e4m3")


def test_cai_strides_must_be_whole_elements():
    with raises(ValueError, match="^k: stride 3 bytes"):
        store(tensors(k=FakeCAI((B, H * D), "<f2", K, strides=(H * D * 2, 3))))


# ---- store_kv_cache: reaching the library ------------------------------------------------------


def test_batch_0_is_validated_and_launches_nothing():
    empty = tensors(batch=0)
    store(empty)  # returns KVJIT_OK after validation, before any driver call
    store(tensors(batch=0, k=FakeCAI((0, H, D), "<f2", 0), v=FakeCAI((0, H, D), "<f2", 0),
                  indices=FakeCAI((0,), "<i8", 0)))
    with raises(ValueError, match="^k_cache: "):
        store(tensors(batch=0, k_cache=FakeCAI((1000, 7), "<f2", KC)))


def test_valid_arguments_reach_the_driver():
    if has_driver():
        skip("a driver is there: a store with fake pointers would launch")
    with raises(kvjit.Error) as e:
        store(tensors())
    assert e.value.name == "ERR_NO_DRIVER"  # the library's validation passed
    with raises(kvjit.Error, match="libcuda"):
        kvjit.prepare(**tensors(), batch=0)
    with raises(kvjit.Error) as e:
        kvjit.oob_count()
    assert e.value.name == "ERR_NO_DRIVER"


def test_stream_from_keyword_and_cai():
    class TorchLikeStream:
        cuda_stream = 0xABC

    class StreamProtocol:
        def __cuda_stream__(self):
            return (0, 0xDEF)

    assert packed(tensors(), stream=TorchLikeStream()).stream == 0xABC
    assert packed(tensors(), stream=StreamProtocol()).stream == 0xDEF
    assert packed(tensors(), stream=ctypes.c_void_p(0x55)).stream == 0x55
    t = tensors(k=FakeCAI((B, H, D), "<f2", K, stream=2))
    assert packed(t).stream == 2  # the producer's stream (here: per-thread default)
    assert packed(t, stream=0x77).stream == 0x77  # an explicit stream wins


# ---- DLPack ------------------------------------------------------------------------------------


from _support import FakeDLPack  # noqa: E402


def test_dlpack_tensors():
    t = tensors(k=FakeDLPack((B, H, D), 4, 16, K - 64, byte_offset=64),  # bf16 with an offset
                k_cache=FakeDLPack((1000, H * D), 4, 16, KC, strides=(2 * H * D, 1)),
                indices=FakeDLPack((B,), 0, 32, LOC), typestr="<f2")
    t["v"] = FakeDLPack((B, H, D), 4, 16, V)
    t["v_cache"] = FakeDLPack((1000, H, D), 4, 16, VC)
    s = packed(t)
    assert (s.k, s.k_cache, s.indices, s.index_type) == (K, KC, LOC, _lib.INDEX_INT32)
    assert s.k_cache_stride == 2 * H * D * 2 and s.k_row_bytes == H * D * 2
    with raises(ValueError, match="^k: must be a CUDA tensor"):
        store(dict(t, k=FakeDLPack((B, H, D), 4, 16, K, device_type=1)))
    with raises(ValueError, match="^v_cache: on cuda:1"):
        store(dict(t, v_cache=FakeDLPack((1000, H, D), 4, 16, VC, device_id=1)))
    with raises(TypeError, match="^k_cache: dtype f16 differs"):
        store(dict(t, k_cache=FakeDLPack((1000, H, D), 2, 16, KC)))


def test_never_compile_and_the_remote_counters():
    """Context(compile_mode="never"): a miss is kvjit.Error ERR_NOT_CACHED naming the variant,
    nothing is compiled; the stats carry the remote tier's counters (zero without one)."""
    line = "store_kv_cache arch=90 k_row_bytes=256 v_row_bytes=256 index=int64 pdl=auto split=0 vec=16"
    with tempdir() as d:
        never = kvjit.Context(d, cache_path="", compile_mode="never", log=False)
        try:
            with raises(kvjit.Error, match="not cached"):
                kvjit.prewarm_line(line, context=never)
            st = never.stats()
            assert st["compiles"] == 0 and st["not_cached"] >= 1 and st["remote_hits"] == 0
        finally:
            never.close()
        always = kvjit.Context(d, cache_path="", compile_mode="always", log=False)
        try:
            assert kvjit.prewarm_line(line, context=always)["compiled"] > 0
        finally:
            always.close()
        again = kvjit.Context(d, cache_path="", compile_mode="never", log=False)
        try:
            assert kvjit.prewarm_line(line, context=again)["compiled"] == 0
        finally:
            again.close()
