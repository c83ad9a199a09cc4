"""Every public function against every class of bad argument (issue 18): ints past 64 bits, NUL
in strings, None, wrong types, out-of-range values. Each must raise ValueError or TypeError (or
a kvjit.Error subclass that is one) whose message starts with the argument's name: never
struct.error, ctypes.ArgumentError, ZeroDivisionError, AttributeError, a silent truncation, or
success.

A case that fails for a reason another task is to fix may be marked XFAIL: it is then expected
to fail, and passes as a failure ("XPASS") once fixed, so that the fix flips it. None is marked
today (issue 18's sweep flipped the 16 of _store.py, _tensor.py and _program.py). No GPU
needed: every call fails validation before any driver call.
"""

import ctypes
import re

from _support import FakeCAI, has_driver, parametrize, pytest, skip

import kvjit

B, H, D = 4, 8, 128
K, V, KC, VC, LOC = 0x10000000, 0x20000000, 0x30000000, 0x40000000, 0x50000000
BIG = 2**64 + 5  # would wrap to 5 in a uint64_t


def fakes(**over):
    t = {
        "k": FakeCAI((B, H, D), "<f2", K),
        "v": FakeCAI((B, H, D), "<f2", V),
        "k_cache": FakeCAI((1000, H, D), "<f2", KC),
        "v_cache": FakeCAI((1000, H, D), "<f2", VC),
        "indices": FakeCAI((B,), "<i8", LOC),
    }
    t.update(over)
    return t


def store(**kw):
    t = fakes(**{k: kw.pop(k) for k in list(kw) if k in ("k", "v", "k_cache", "v_cache", "indices")})
    kvjit.store_kv_cache(t["k"], t["v"], t["k_cache"], t["v_cache"], t["indices"], **kw)


def prepare(**kw):
    t = fakes(**{k: kw.pop(k) for k in list(kw) if k in ("k", "v", "k_cache", "v_cache", "indices")})
    kvjit.prepare(t["k"], t["v"], t["k_cache"], t["v_cache"], t["indices"], **kw)


def program(**kw):
    args = dict(source="extern \"C\" __global__ void f() {}", kernels=["f"])
    args.update(kw)
    return kvjit.Program(args.pop("source"), args.pop("kernels"), **args)


def closed_context():
    ctx = kvjit.Context(disable_cache=True)
    ctx.close()
    return ctx


def launch(**kw):
    kernel = kvjit.Kernel.__new__(kvjit.Kernel)  # argument checks come before the kernel is used
    kernel._handle = None
    args = dict(grid=1, block=1, args=[])
    args.update(kw)
    kernel.launch(args.pop("grid"), args.pop("block"), args.pop("args"), **args)


def transfer_args(**over):
    t = {
        "src_k": FakeCAI((1000, H, D), "<f2", K), "src_v": FakeCAI((1000, H, D), "<f2", V),
        "dst_k": FakeCAI((1000, H, D), "<f2", KC), "dst_v": FakeCAI((1000, H, D), "<f2", VC),
        "src_indices": FakeCAI((B,), "<i8", LOC), "dst_indices": FakeCAI((B,), "<i8", LOC + 4096),
    }
    t.update(over)
    return (t["src_k"], t["src_v"], t["dst_k"], t["dst_v"], t["src_indices"], t["dst_indices"])


def transfer(**kw):
    names = ("src_k", "src_v", "dst_k", "dst_v", "src_indices", "dst_indices")
    kvjit.transfer_kv(*transfer_args(**{k: kw.pop(k) for k in list(kw) if k in names}), **kw)


def transfer_all(**kw):
    args = dict(k_row_bytes=2048, src_num_slots=1000, dst_num_slots=1000)
    args.update(kw)
    table = FakeCAI((4,), "<i8", K)
    kvjit.transfer_kv_all_layers(table, None, table, None, FakeCAI((B,), "<i8", LOC), FakeCAI((B,), "<i8", LOC),
                                 **args)


XFAIL = "xfail"

# (id, argument named, exception class, call, mark): mark XFAIL = fails today (see the module doc)
CASES = [
    # Context: options
    ("context-cache_dir-nul", "cache_dir", ValueError, lambda: kvjit.Context(cache_dir="a\0b"), None),
    ("context-cache_dir-type", "cache_dir", TypeError, lambda: kvjit.Context(cache_dir=12), None),
    ("context-compile_mode-word", "compile_mode", ValueError, lambda: kvjit.Context(compile_mode="sometimes"), None),
    ("context-compile_mode-int", "compile_mode", ValueError, lambda: kvjit.Context(compile_mode=2), None),
    ("context-remote-nul", "remote_cache", ValueError, lambda: kvjit.Context(remote_cache="http://a\0b"), None),
    ("context-remote-type", "remote_cache", TypeError, lambda: kvjit.Context(remote_cache=["http://a"]), None),
    ("context-remote-rw", "remote_read_write", ValueError, lambda: kvjit.Context(remote_read_write=2), None),
    ("context-cache_path-nul", "cache_path", ValueError, lambda: kvjit.Context(cache_path=["/tmp", "x\0"]), None),
    ("context-cache_path-colon", "cache_path", ValueError, lambda: kvjit.Context(cache_path=["/a:b"]), None),
    ("context-cache_path-none-item", "cache_path", ValueError, lambda: kvjit.Context(cache_path=[None]), None),
    ("context-manifest-nul", "manifest_path", ValueError, lambda: kvjit.Context(manifest_path=b"m\0"), None),
    ("context-max-bytes-64bit", "cache_max_bytes", ValueError, lambda: kvjit.Context(cache_max_bytes=BIG), None),
    ("context-max-bytes-negative", "cache_max_bytes", ValueError, lambda: kvjit.Context(cache_max_bytes=-1), None),
    ("context-max-bytes-float", "cache_max_bytes", TypeError, lambda: kvjit.Context(cache_max_bytes=1.5), None),
    ("context-max-bytes-none", "cache_max_bytes", TypeError, lambda: kvjit.Context(cache_max_bytes=None), None),
    ("context-max-bytes-bool", "cache_max_bytes", TypeError, lambda: kvjit.Context(cache_max_bytes=True), None),
    ("context-lock-32bit", "lock_timeout_ms", ValueError, lambda: kvjit.Context(lock_timeout_ms=2**32), None),
    ("context-lock-str", "lock_timeout_ms", TypeError, lambda: kvjit.Context(lock_timeout_ms="5"), None),
    ("context-disable-str", "disable_cache", ValueError, lambda: kvjit.Context(disable_cache="yes"), None),
    ("context-log-float", "log", ValueError, lambda: kvjit.Context(log=1.0), None),
    ("context-shared-2", "allow_shared_dirs", ValueError, lambda: kvjit.Context(allow_shared_dirs=2), None),
    # Context: methods and the top-level functions taking one
    ("stats-context-type", "context", TypeError, lambda: kvjit.stats("ctx"), None),
    ("cache_info-context-type", "context", TypeError, lambda: kvjit.cache_info(context=3), None),
    ("oob_count-context-type", "context", TypeError, lambda: kvjit.oob_count(context=object()), None),
    ("oob_count-reset-str", "reset", TypeError, lambda: kvjit.oob_count(reset="no"), None),
    ("stats-closed", "context", ValueError, lambda: closed_context().stats(), None),
    ("explain_misses-context-type", "context", TypeError, lambda: kvjit.explain_misses("ctx"), None),
    ("explain_misses-closed", "context", ValueError, lambda: kvjit.explain_misses(closed_context()), None),
    # the top-level queries
    ("parse_arch-nul", "text", ValueError, lambda: kvjit.parse_arch("sm_90\0x"), None),
    ("parse_arch-none", "text", TypeError, lambda: kvjit.parse_arch(None), None),
    ("parse_arch-int", "text", TypeError, lambda: kvjit.parse_arch(90), None),
    ("parse_target-nul", "text", ValueError, lambda: kvjit.parse_target("sm_90a\0"), None),
    ("parse_target-none", "text", TypeError, lambda: kvjit.parse_target(None), None),
    ("target_name-str", "target", TypeError, lambda: kvjit.target_name("sm_90"), None),
    ("target_name-64bit", "target", ValueError, lambda: kvjit.target_name(BIG), None),
    ("device_info-str", "ordinal", TypeError, lambda: kvjit.device_info("0"), None),
    ("device_info-64bit", "ordinal", ValueError, lambda: kvjit.device_info(BIG), None),
    ("device_info-none", "ordinal", TypeError, lambda: kvjit.device_info(None), None),
    # Program and Kernel
    ("program-source-nul", "source", ValueError, lambda: program(source="__global__ void f() {}\0junk"), None),
    ("program-source-none", "source", TypeError, lambda: program(source=None), None),
    ("program-kernel-nul", "kernels[0]", ValueError, lambda: program(kernels=["f\0g"]), None),
    ("program-kernels-none", "kernels", TypeError, lambda: program(kernels=None), None),
    ("program-option-type", "options[0]", TypeError, lambda: program(options=[3]), None),
    ("program-name-nul", "name", ValueError, lambda: program(name="a\0.cu"), None),
    ("program-headers-type", "headers", TypeError, lambda: program(headers=["h.cuh"]), None),
    ("program-arch-64bit", "arch", ValueError, lambda: program(arch=BIG), None),
    ("program-arch-none", "arch", TypeError, lambda: program(arch=None), None),
    ("program-context-type", "context", TypeError, lambda: program(context="ctx"), None),
    ("launch-grid-64bit", "grid", ValueError, lambda: launch(grid=BIG), None),
    ("launch-grid-none", "grid", TypeError, lambda: launch(grid=None), None),
    ("launch-block-float", "block", ValueError, lambda: launch(block=1.5), None),
    ("launch-shared-64bit", "shared_bytes", ValueError, lambda: launch(shared_bytes=BIG), None),
    ("launch-arg-int", "args[0]", TypeError, lambda: launch(args=[3]), None),
    ("launch-args-none", "args", TypeError, lambda: launch(args=None), None),
    ("launch-stream-str", "stream", TypeError, lambda: launch(stream="s"), None),
    # store_kv_cache: keywords
    ("store-num_slots-64bit", "num_slots", ValueError, lambda: store(num_slots=BIG), None),
    ("store-num_slots-bool", "num_slots", TypeError, lambda: store(num_slots=True), None),
    ("store-skip_slot-64bit", "skip_slot", ValueError, lambda: store(skip_slot=BIG), None),
    ("store-skip_slot-str", "skip_slot", TypeError, lambda: store(skip_slot="0"), None),
    ("store-split-64bit", "split", ValueError, lambda: store(split=BIG), None),
    ("store-split-none", "split", TypeError, lambda: store(split=None), None),
    ("store-pdl-int", "pdl", ValueError, lambda: store(pdl=1), None),
    ("store-cache_dtype-nul", "cache_dtype", ValueError, lambda: store(cache_dtype="fp8_e4m3\0"), None),
    ("store-cache_dtype-int", "cache_dtype", ValueError, lambda: store(cache_dtype=4), None),
    ("store-stream-64bit", "stream", ValueError, lambda: store(stream=BIG), None),
    ("store-stream-str", "stream", TypeError, lambda: store(stream="default"), None),
    ("store-context-str", "context", TypeError, lambda: store(context="ctx"), None),
    ("store-context-closed", "context", ValueError, lambda: store(context=closed_context()), None),
    # store_kv_cache: tensors
    ("store-k-none", "k", TypeError, lambda: store(k=None), None),
    ("store-indices-none", "indices", TypeError, lambda: store(indices=None), None),
    ("store-k-list", "k", TypeError, lambda: store(k=[1, 2]), None),
    ("store-k-malformed-cai", "k", TypeError, lambda: store(k=FakeCAI((B, H, D), "<f2", K, strides=(1,))), None),
    ("store-k-typestr", "k", TypeError, lambda: store(k=FakeCAI((B, H, D), "f2x", K)), None),
    ("store-k-ptr-64bit", "k", ValueError, lambda: store(k=FakeCAI((B, H, D), "<f2", BIG)), None),
    ("store-k-shape-64bit", "k", ValueError, lambda: store(k=FakeCAI((B, H, BIG), "<f2", K)), None),
    ("store-k_cache-zero-itemsize", "k_cache", TypeError, lambda: store(k_cache=FakeCAI((1000, H, D), "<f0", KC)),
     None),
    ("store-k_scale-wrong-type", "k_scale", TypeError, lambda: store(k_scale="1.0"), None),
    # prepare: its own keyword, then the same checks
    ("prepare-batch-64bit", "batch", ValueError, lambda: prepare(batch=BIG), None),
    ("prepare-batch-str", "batch", TypeError, lambda: prepare(batch="0"), None),
    # prewarm
    ("prewarm-row-64bit", "k_row_bytes", ValueError, lambda: kvjit.prewarm(BIG, arch=90), None),
    ("prewarm-row-none", "k_row_bytes", ValueError, lambda: kvjit.prewarm(None, arch=90), None),
    ("prewarm-arch-nul", "arch", ValueError, lambda: kvjit.prewarm(256, arch="sm_90\0"), None),
    ("prewarm-arch-64bit", "arch", ValueError, lambda: kvjit.prewarm(256, arch=BIG), None),
    ("prewarm-split-64bit", "split", ValueError, lambda: kvjit.prewarm(256, arch=90, split=BIG), None),
    ("prewarm-heads-64bit", "num_heads", ValueError,
     lambda: kvjit.prewarm(256, arch=90, dtype="bf16", cache_dtype="fp8_e4m3", num_heads=BIG), None),
    ("prewarm-index-int", "index", ValueError, lambda: kvjit.prewarm(256, arch=90, index=16), None),
    ("prewarm-context-type", "context", TypeError, lambda: kvjit.prewarm(256, arch=90, context=1), None),
    # transfer_kv (helper C): keywords, tensors, tables, counters, manifest lines
    ("transfer-split-64bit", "split", ValueError, lambda: transfer(split=BIG), None),
    ("transfer-split-none", "split", TypeError, lambda: transfer(split=None), None),
    ("transfer-src_num_slots-64bit", "src_num_slots", ValueError, lambda: transfer(src_num_slots=BIG), None),
    ("transfer-dst_num_slots-str", "dst_num_slots", TypeError, lambda: transfer(dst_num_slots="9"), None),
    ("transfer-row_elements-64bit", "row_elements", ValueError, lambda: transfer(row_elements=BIG), None),
    ("transfer-pdl-int", "pdl", ValueError, lambda: transfer(pdl=1), None),
    ("transfer-stream-64bit", "stream", ValueError, lambda: transfer(stream=BIG), None),
    ("transfer-stream-str", "stream", TypeError, lambda: transfer(stream="default"), None),
    ("transfer-context-str", "context", TypeError, lambda: transfer(context="ctx"), None),
    ("transfer-context-closed", "context", ValueError, lambda: transfer(context=closed_context()), None),
    ("transfer-src_k-none", "src_k", TypeError, lambda: transfer(src_k=None), None),
    ("transfer-dst_indices-list", "dst_indices", TypeError, lambda: transfer(dst_indices=[0, 1]), None),
    ("transfer_prepare-batch-64bit", "batch", ValueError, lambda: kvjit.transfer_kv_prepare(*transfer_args(),
                                                                                            batch=BIG), None),
    ("transfer_prepare-batch-str", "batch", TypeError, lambda: kvjit.transfer_kv_prepare(*transfer_args(),
                                                                                         batch="0"), None),
    ("transfer_all-k_row_bytes-64bit", "k_row_bytes", ValueError, lambda: transfer_all(k_row_bytes=BIG), None),
    ("transfer_all-src-int", "src", ValueError, lambda: transfer_all(src=0), None),
    ("transfer_all-dst_num_slots-none", "dst_num_slots", TypeError, lambda: transfer_all(dst_num_slots=None), None),
    ("transfer_all-prepare-str", "prepare", TypeError, lambda: transfer_all(prepare="yes"), None),
    ("transfer_all-context-str", "context", TypeError, lambda: transfer_all(context="ctx"), None),
    ("transfer_oob-reset-str", "reset", TypeError, lambda: kvjit.transfer_kv_oob_count(reset="no"), None),
    ("transfer_oob-context-type", "context", TypeError, lambda: kvjit.transfer_kv_oob_count(context=3), None),
    ("prewarm_line-nul", "line", ValueError, lambda: kvjit.prewarm_line("transfer_kv\0"), None),
    ("prewarm_line-none", "line", TypeError, lambda: kvjit.prewarm_line(None), None),
    ("prewarm_line-context-type", "context", TypeError, lambda: kvjit.prewarm_line("", context=1), None),
]

# Exception types that are never an acceptable answer to a bad argument, even where they are a
# ValueError/TypeError subclass (ctypes.ArgumentError is neither).
FORBIDDEN = (ctypes.ArgumentError, ZeroDivisionError, AttributeError, OverflowError, KeyError, IndexError)


def check(arg, exc, call):
    """None when @p call raises @p exc naming @p arg first; else what went wrong."""
    try:
        call()
    except FORBIDDEN as e:
        return f"raised {type(e).__name__}: {e}"
    except (ValueError, TypeError) as e:
        if not isinstance(e, exc):
            return f"raised {type(e).__name__} (expected {exc.__name__}): {e}"
        if not re.match(rf"{re.escape(arg)}(\[\d+\])?: ", str(e)):
            return f"{type(e).__name__} does not start with '{arg}: ': {e}"
        return None
    except kvjit.Error as e:
        return f"raised {type(e).__name__} (a library error, not {exc.__name__} naming {arg}): {e}"
    except Exception as e:  # noqa: BLE001 - any other type is the finding
        return f"raised {type(e).__name__}: {e}"
    return "no error"


@parametrize("case", CASES)
def test_bad_argument_names_itself(case):
    name, arg, exc, call, mark = case
    problem = check(arg, exc, call)
    if mark == XFAIL:
        if problem is None:
            raise AssertionError(f"XPASS {name}: now raises {exc.__name__} naming {arg}; remove its XFAIL mark")
        if pytest is not None:
            pytest.xfail(f"{name}: {problem}")
        skip(f"xfail {name}: {problem}")
    assert problem is None, f"{name}: {problem}"


def test_device_count_is_0_without_a_driver():
    if has_driver():
        skip("a driver is there")
    assert kvjit.device_count() == 0


def test_the_table_covers_every_public_function():
    """A new public function needs rows here (or a reason below to have none)."""
    no_arguments = {"current_sm", "default_context", "device_count", "driver_version", "library_path",
                    "nvrtc_archs", "nvrtc_version", "register_torch_ops", "version", "version_number"}
    classes = {"CompileError", "Error", "InvalidArgumentError", "LibraryNotFoundError", "LibraryVersionError",
               "STATUS_NAMES", "Kernel", "Binary", "TARGET_ARCH_SPECIFIC", "TARGET_FAMILY", "TARGET_PTX"}
    covered = {"Context", "stats", "explain_misses", "cache_info", "oob_count", "parse_arch", "parse_target", "target_name",
               "device_info", "Program", "store_kv_cache", "prepare", "prewarm", "transfer_kv",
               "transfer_kv_prepare", "transfer_kv_all_layers", "transfer_kv_oob_count", "prewarm_line"}
    missing = set(kvjit.__all__) - no_arguments - classes - covered
    assert not missing, f"public functions without bad-argument cases: {sorted(missing)}"
    named = {c[0].split("-")[0] for c in CASES}
    assert {"context", "stats", "cache_info", "oob_count", "parse_arch", "device_info", "program", "launch",
            "store", "prepare", "prewarm"} <= named
