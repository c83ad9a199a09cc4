"""Finding and loading libkvjit, the ctypes mirror of include/kvjit.h, and the error types.

Every struct here mirrors the header field by field (same order, same C types); the tests check
the sizes and a round trip through the library. Only this module knows the C layouts.
"""

import ctypes
import ctypes.util
import glob
import os
import re
import struct
import threading

# ---- status codes ------------------------------------------------------------------------------

# The values the package tests for; every status's name comes from the library (kvjit_status_name,
# STATUS_NAMES below), the one table of them (KVJIT_STATUS_MAP of kvjit.h).
OK = 0
ERR_INVALID_ARGUMENT = -1
ERR_NO_DRIVER = -3
ERR_COMPILE = -7


_status_names = None


def status_names():
    """{status: name} of every kvjit_status, read from the library on first use."""
    global _status_names
    if _status_names is None:
        name_of = load().fn["kvjit_status_name"]
        names = {}
        for status in range(0, -1000, -1):
            name = name_of(status).decode()
            if name == "UNKNOWN":
                break
            names[status] = name
        _status_names = names
    return _status_names


def __getattr__(name):
    """STATUS_NAMES: status_names(), so that the package imports without the library."""
    if name == "STATUS_NAMES":
        return status_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- enums -------------------------------------------------------------------------------------

INDEX_INT32 = 1
INDEX_INT64 = 2
PDL_AUTO = 0
PDL_ON = 1
PDL_OFF = 2
FROM_MEMORY = 1
FROM_DISK = 2
FROM_COMPILE = 3
ORIGIN_NAMES = {FROM_MEMORY: "memory", FROM_DISK: "disk", FROM_COMPILE: "compile"}

DTYPE_BYTES = 0
DTYPE_F16 = 1
DTYPE_BF16 = 2
DTYPE_F32 = 3
DTYPE_FP8_E4M3 = 4
DTYPE_FP8_E5M2 = 5
SCALE_NONE = 0
SCALE_PER_TENSOR = 1
SCALE_PER_HEAD = 2

COMPILE_MODES = {"always": 0, "warn": 1, "never": 2}  # kvjit_compile_mode
STORE_KV_ARGS_VERSION = 3


# ---- errors ------------------------------------------------------------------------------------


class Error(Exception):
    """A kvjit call failed. ``status`` is the kvjit_status (negative int), ``name`` its enumerator
    name without prefix ("ERR_INVALID_ARGUMENT"), ``message`` the library's one-line detail."""

    def __init__(self, status, message="", name=None):
        self.status = status
        if name is None:
            try:
                name = status_names().get(status)
            except LibraryNotFoundError:
                pass
        self.name = name or "UNKNOWN"
        self.message = message
        super().__init__(f"{message or self.name} ({self.name})")


class InvalidArgumentError(Error, ValueError):
    """KVJIT_ERR_INVALID_ARGUMENT: the library rejected an argument (the message names it)."""


class CompileError(Error):
    """KVJIT_ERR_COMPILE: NVRTC rejected the source. ``log`` holds NVRTC's full log (the message
    carries its first error line)."""

    def __init__(self, status, message="", name=None, log=""):
        super().__init__(status, message, name)
        self.log = log


class LibraryNotFoundError(ImportError):
    """No libkvjit could be found or loaded; the message lists every place tried."""


class LibraryVersionError(LibraryNotFoundError):
    """The libkvjit found is not the version this package was built with (its ctypes layouts
    mirror exactly one kvjit.h); ``library_version`` and ``package_version`` say which."""

    def __init__(self, message, library_version=None, package_version=None):
        super().__init__(message)
        self.library_version = library_version
        self.package_version = package_version


def _package_version():
    """The version this package was built with: _version.py, written by meson into an installed
    package, or in a source tree meson.build's project version (the one version source)."""
    try:
        from ._version import version

        return version
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "..", "..", "meson.build"), encoding="utf-8") as f:
            text = f.read(4096)
    except OSError:
        return None
    m = re.search(r"project\(\s*'kvjit'.*?\bversion:\s*'([^']+)'", text, re.S)
    return m.group(1) if m else None


PACKAGE_VERSION = _package_version()


def _error_class(status):
    if status == ERR_INVALID_ARGUMENT:
        return InvalidArgumentError
    if status == ERR_COMPILE:
        return CompileError
    return Error


def error_for(status, message, name=None):
    """The kvjit.Error (subclass) for ``status`` with the library's one-line ``message``."""
    return _error_class(status)(status, message, name)


# ---- structs -----------------------------------------------------------------------------------


class ContextOptions(ctypes.Structure):
    _init = ("kvjit_context_options_init", 3)  # the library's defaults for the version this layout has
    _fields_ = [
        ("version", ctypes.c_uint),
        ("cache_dir", ctypes.c_char_p),
        ("cache_path", ctypes.c_char_p),
        ("disable_cache", ctypes.c_int),
        ("cache_max_bytes", ctypes.c_uint64),
        ("log", ctypes.c_int),
        ("lock_timeout_ms", ctypes.c_uint),
        ("manifest_path", ctypes.c_char_p),
        ("allow_shared_dirs", ctypes.c_int),
        # version 2
        ("read_only", ctypes.c_int),
        # version 3
        ("compile_mode", ctypes.c_int),
        ("remote_cache", ctypes.c_char_p),
        ("remote_read_write", ctypes.c_int),
    ]


STATS_FIELDS = (
    "memory_hits", "disk_hits", "compiles", "compile_failures", "compile_ns", "bad_entries",
    "disk_writes", "write_failures", "lock_waits", "lock_timeouts", "loads", "evictions",
    "unpublished_compiles",
    # version 2
    "not_cached", "remote_hits", "remote_misses", "remote_errors", "remote_timeouts", "remote_skipped",
    "remote_writes", "remote_bytes_in", "remote_bytes_out",
    # version 3: misses by cause (kvjit_miss_cause)
    "misses_cold", "misses_nvrtc", "misses_target", "misses_toolkit", "misses_options", "misses_source",
    "misses_other",
)
STATS_VERSION = 3


class Stats(ctypes.Structure):
    """kvjit_stats: the library writes the fields of the version set here (Library.new)."""

    _init = ("kvjit_stats_init", STATS_VERSION)
    _fields_ = [("version", ctypes.c_uint)] + [(name, ctypes.c_uint64) for name in STATS_FIELDS]


class MissInfo(ctypes.Structure):
    """kvjit_miss_info: one explained miss (kvjit_context_misses)."""

    _fields_ = [("cause", ctypes.c_int), ("key", ctypes.c_char * 33), ("message", ctypes.c_char * 768)]


MISSES_KEPT = 256  # KVJIT_MISSES_KEPT


class CacheInfo(ctypes.Structure):
    _fields_ = [
        ("write_dir", ctypes.c_char_p),
        ("read_dirs", ctypes.c_char_p),
        ("degraded_reason", ctypes.c_char_p),
        ("max_bytes", ctypes.c_uint64),
    ]


class Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("source", ctypes.c_char_p)]


class ProgramDesc(ctypes.Structure):
    _init = ("kvjit_program_desc_init", 1)
    _fields_ = [
        ("version", ctypes.c_uint),
        ("name", ctypes.c_char_p),
        ("source", ctypes.c_char_p),
        ("options", ctypes.POINTER(ctypes.c_char_p)),
        ("num_options", ctypes.c_size_t),
        ("headers", ctypes.POINTER(Header)),
        ("num_headers", ctypes.c_size_t),
        ("kernels", ctypes.POINTER(ctypes.c_char_p)),
        ("num_kernels", ctypes.c_size_t),
        ("arch", ctypes.c_int),
    ]


# ---- the loader's structs and constants (python/kvjit/_program.py uses them) --------------------

TARGET_ARCH_SPECIFIC = 0x10000
TARGET_FAMILY = 0x20000
TARGET_PTX = 0x40000
CURRENT_DEVICE = -1
KERNEL_ATTRIBUTES = {
    "max_threads_per_block": 0, "shared_size_bytes": 1, "const_size_bytes": 2, "local_size_bytes": 3,
    "num_regs": 4, "ptx_version": 5, "binary_version": 6, "cache_mode_ca": 7,
    "max_dynamic_shared_size_bytes": 8, "preferred_shared_memory_carveout": 9,
    "cluster_size_must_be_set": 10, "required_cluster_width": 11, "required_cluster_height": 12,
    "required_cluster_depth": 13, "non_portable_cluster_size_allowed": 14,
    "cluster_scheduling_policy_preference": 15,
}


class LaunchConfig(ctypes.Structure):
    _init = ("kvjit_launch_config_init", 1)
    _fields_ = [
        ("version", ctypes.c_uint),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("programmatic_serialization", ctypes.c_int),
        ("cluster", ctypes.c_uint * 3),
        ("cooperative", ctypes.c_int),
        ("priority", ctypes.c_int),
        ("num_args", ctypes.c_int),
    ]


LAYOUT_VERSION = 1
LAYOUT_MAX_ROW_DIMS = 3


class Layout(ctypes.Structure):
    """kvjit_layout (version 1): a cache as slot dims and row dims, strides in bytes."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("page_size", ctypes.c_int64),
        ("page_stride", ctypes.c_int64),
        ("slot_stride", ctypes.c_int64),
        ("element_bytes", ctypes.c_int64),
        ("num_row_dims", ctypes.c_int),
        ("row_extents", ctypes.c_int64 * LAYOUT_MAX_ROW_DIMS),
        ("row_strides", ctypes.c_int64 * LAYOUT_MAX_ROW_DIMS),
    ]

    def row(self):
        """[(extent, stride in bytes), ...], outermost first."""
        return [(self.row_extents[i], self.row_strides[i]) for i in range(self.num_row_dims)]


class StoreKvArgs(ctypes.Structure):
    """kvjit_store_kv_args (version 3), as the native module fills it (kvjit._ops.store_kv_args)."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("indices", ctypes.c_void_p),
        ("index_type", ctypes.c_int),
        ("index_stride", ctypes.c_int64),
        ("batch", ctypes.c_int64),
        ("k_row_bytes", ctypes.c_int64),
        ("v_row_bytes", ctypes.c_int64),
        ("k_stride", ctypes.c_int64),
        ("v_stride", ctypes.c_int64),
        ("k_cache_stride", ctypes.c_int64),
        ("v_cache_stride", ctypes.c_int64),
        ("num_slots", ctypes.c_int64),
        ("skip_slot", ctypes.c_int64),
        ("split", ctypes.c_int),
        ("pdl", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        # version 2
        ("dtype", ctypes.c_int),
        ("cache_dtype", ctypes.c_int),
        ("scale_kind", ctypes.c_int),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("num_heads", ctypes.c_int64),
        # version 3
        ("k_cache_layout", ctypes.c_void_p),
        ("v_cache_layout", ctypes.c_void_p),
    ]


# ---- transfer_kv (helper C's block) ---------------------------------------------------------

TRANSFER_KV_ARGS_VERSION = 2
LOCATION_DEVICE = 0
LOCATION_HOST = 1
TRANSFER_KV_MAX_LAYERS = 65535

# kvjit_transfer_kv_args for struct.pack ('@': each field's native alignment, as the C compiler
# gives it), for transfer_kv_all_layers: version, src_k, src_v, dst_k, dst_v,
# src_indices, dst_indices, index_type, src_index_stride, dst_index_stride, batch, k_row_bytes,
# v_row_bytes, src_k_stride, src_v_stride, dst_k_stride, dst_v_stride, src_num_slots,
# dst_num_slots, num_layers, src, dst, split, pdl, stream; version 2: src_dtype, dst_dtype,
# scale_kind, k_scale, v_scale, num_heads, max_ctas, src_k_layout, src_v_layout, dst_k_layout,
# dst_v_layout.
TRANSFER_KV_PACKER = struct.Struct("@I6Pi12qiiiiPiiiPPqi4P")


class OpField(ctypes.Structure):
    """kvjit_op_field: one field of an op's variants (static, the library's)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("help", ctypes.c_char_p),
        ("kind", ctypes.c_int),
        ("flags", ctypes.c_uint),
        ("min", ctypes.c_int64),
        ("max", ctypes.c_int64),
        ("words", ctypes.c_void_p),
        ("num_words", ctypes.c_size_t),
        ("default_value", ctypes.c_int64),
        ("prewarm", ctypes.c_char_p),
    ]


class OpInfo(ctypes.Structure):
    """kvjit_op_info: an op and its field table (static, the library's)."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("summary", ctypes.c_char_p),
        ("fields", ctypes.POINTER(OpField)),
        ("num_fields", ctypes.c_size_t),
        ("num_classes", ctypes.c_int),
    ]


VARIANT_MAX_FIELDS = 24


class Variant(ctypes.Structure):
    """kvjit_variant: an op and one value per field of its table (kvjit_variant_init fills it)."""
    _fields_ = [
        ("version", ctypes.c_uint),
        ("op", ctypes.POINTER(OpInfo)),
        ("values", ctypes.c_int64 * VARIANT_MAX_FIELDS),
    ]


# ---- the library -------------------------------------------------------------------------------

_P = ctypes.c_void_p
_I = ctypes.c_int
_S = ctypes.c_char_p
_PROTOTYPES = {
    # name: (restype, argtypes)
    "kvjit_version_number": (ctypes.c_uint, []),
    "kvjit_version_string": (_S, []),
    "kvjit_status_name": (_S, [_I]),
    "kvjit_status_string": (_S, [_I]),
    "kvjit_last_error": (_S, []),
    # The versioned structs' defaults (Library.new): one copy, the library's.
    "kvjit_context_options_init": (_I, [ctypes.POINTER(ContextOptions), ctypes.c_uint]),
    "kvjit_stats_init": (_I, [ctypes.POINTER(Stats), ctypes.c_uint]),
    "kvjit_program_desc_init": (_I, [ctypes.POINTER(ProgramDesc), ctypes.c_uint]),
    "kvjit_launch_config_init": (_I, [ctypes.POINTER(LaunchConfig), ctypes.c_uint]),
    "kvjit_context_create": (_I, [ctypes.POINTER(_P), ctypes.POINTER(ContextOptions)]),
    "kvjit_context_destroy": (None, [_P]),
    "kvjit_context_stats": (_I, [_P, ctypes.POINTER(Stats)]),
    "kvjit_context_misses": (_I, [_P, ctypes.POINTER(MissInfo), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "kvjit_miss_cause_name": (_S, [_I]),
    "kvjit_nvrtc_info": (_I, [ctypes.POINTER(_S), ctypes.POINTER(_S)]),
    "kvjit_context_cache_info": (_I, [_P, ctypes.POINTER(CacheInfo)]),
    "kvjit_nvrtc_archs": (_I, [ctypes.POINTER(_I), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]),
    "kvjit_nvrtc_version": (_I, [ctypes.POINTER(_I), ctypes.POINTER(_I)]),
    "kvjit_driver_version": (_I, [ctypes.POINTER(_I)]),
    "kvjit_device_count": (_I, [ctypes.POINTER(_I)]),
    "kvjit_device_info": (_I, [_I, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(_I)]),
    "kvjit_current_sm": (_I, [ctypes.POINTER(_I)]),
    "kvjit_parse_arch": (_I, [_S, ctypes.POINTER(_I)]),
    "kvjit_program_get": (_I, [_P, ctypes.POINTER(_P), ctypes.POINTER(_I), ctypes.POINTER(ProgramDesc)]),
    "kvjit_program_compile": (_I, [_P, ctypes.POINTER(_I), ctypes.POINTER(ProgramDesc)]),
    "kvjit_program_log": (_S, [_P]),
    "kvjit_program_key": (_S, [_P]),
    "kvjit_program_arch": (_I, [_P]),
    "kvjit_program_kernel": (_I, [_P, ctypes.POINTER(_P), _S, ctypes.c_size_t]),
    "kvjit_launch": (_I, [_P, ctypes.POINTER(LaunchConfig), _P]),
    # the loader (python/kvjit/_program.py)
    "kvjit_parse_target": (_I, [_S, ctypes.POINTER(_I)]),
    "kvjit_target_name": (_I, [_I, ctypes.c_char_p, ctypes.c_size_t]),
    "kvjit_program_build": (_I, [_P, ctypes.POINTER(_P), ctypes.POINTER(_I), ctypes.POINTER(ProgramDesc)]),
    "kvjit_program_status": (_I, [_P]),
    "kvjit_program_binary": (_I, [_P, ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_size_t)]),
    "kvjit_program_num_kernels": (ctypes.c_size_t, [_P]),
    "kvjit_program_kernel_name": (_S, [_P, ctypes.c_size_t]),
    "kvjit_program_lowered_name": (_S, [_P, ctypes.c_size_t]),
    "kvjit_program_get_global": (_I, [_P, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), _S]),
    "kvjit_kernel_get_attribute": (_I, [_P, _I, _I, ctypes.POINTER(_I)]),
    "kvjit_kernel_set_attribute": (_I, [_P, _I, _I, _I]),
    "kvjit_kernel_num_params": (_I, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "kvjit_kernel_param_info": (_I, [_P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                     ctypes.POINTER(ctypes.c_size_t)]),
    "kvjit_op_oob_count": (_I, [_P, _S, ctypes.POINTER(ctypes.c_uint64), _I]),
    # variants of any op (python/kvjit/_prewarm.py)
    "kvjit_op_find": (ctypes.POINTER(OpInfo), [_S]),
    "kvjit_variant_init": (_I, [ctypes.POINTER(Variant), ctypes.POINTER(OpInfo)]),
    "kvjit_variant_prewarm": (_I, [_P, ctypes.POINTER(Variant), ctypes.POINTER(ctypes.c_uint),
                                   ctypes.POINTER(ctypes.c_uint)]),
    # transfer_kv_all_layers and the generic prewarm; args packed with TRANSFER_KV_PACKER.
    "kvjit_transfer_kv": (_I, [_P, _S]),
    "kvjit_transfer_kv_prepare": (_I, [_P, _S]),
    "kvjit_prewarm_line": (_I, [_P, _S, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint)]),
}


class Library:
    """A loaded libkvjit: its path, the CDLL and one ctypes function object per entry point."""

    def __init__(self, path):
        self.path = path
        self.cdll = ctypes.CDLL(path)
        # The version first: a library of another version may lack or change any other symbol.
        version_fn = self.cdll.kvjit_version_string
        version_fn.restype = _S
        version_fn.argtypes = []
        found = (version_fn() or b"").decode(errors="replace")
        if PACKAGE_VERSION is None:
            raise LibraryVersionError(f"kvjit: the package has no version (no kvjit/_version.py and no "
                                      f"meson.build beside it), so {path} cannot be checked", found, None)
        if found != PACKAGE_VERSION:
            raise LibraryVersionError(f"kvjit: {path} is libkvjit {found}, this package is {PACKAGE_VERSION} "
                                      f"(rebuild or reinstall so that both come from one build)",
                                      found, PACKAGE_VERSION)
        self.fn = {}
        for name, (restype, argtypes) in _PROTOTYPES.items():
            f = getattr(self.cdll, name)
            f.restype = restype
            f.argtypes = argtypes
            self.fn[name] = f
        self.last_error_fn = self.fn["kvjit_last_error"]
        self.version_string = self.fn["kvjit_version_string"]().decode()
        self.version_number = self.fn["kvjit_version_number"]()

    def new(self, struct_type, **fields):
        """A versioned struct with the library's defaults for the version its layout has (the
        struct's kvjit_*_init), then ``fields`` set."""
        init, version = struct_type._init
        out = struct_type()
        self.check(self.fn[init](ctypes.byref(out), version))
        for name, value in fields.items():
            setattr(out, name, value)
        return out

    def last_error(self):
        return self.last_error_fn().decode(errors="replace")

    def error(self, status, log=None):
        """The exception for a failed call, with this thread's last-error detail."""
        name = self.fn["kvjit_status_name"](status).decode()
        if _error_class(status) is CompileError:
            return CompileError(status, self.last_error(), name, log or "")
        return error_for(status, self.last_error(), name)

    def check(self, status):
        if status != OK:
            raise self.error(status)


def _candidates():
    """(description, path) pairs in lookup order; paths may not exist."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("KVJIT_LIB")
    if env:
        yield "$KVJIT_LIB", env
        return
    # Shortest name first: libkvjit.so, then libkvjit.so.0, then libkvjit.so.0.1.0.
    for path in sorted(glob.glob(os.path.join(here, "libkvjit.so*")), key=len):
        yield "next to the package", path
    yield "the source tree's build dir", os.path.normpath(os.path.join(here, "..", "..", "build", "src", "libkvjit.so"))
    found = ctypes.util.find_library("kvjit")
    yield "ctypes.util.find_library('kvjit')", found


_library = None
_library_lock = threading.Lock()


def load():
    """The loaded library (loaded on first use; thread-safe). Raises LibraryNotFoundError."""
    global _library
    lib = _library
    if lib is not None:
        return lib
    with _library_lock:
        if _library is not None:
            return _library
        tried = []
        mismatch = None
        for where, path in _candidates():
            if not path:
                tried.append(f"{where}: nothing")
                continue
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{where}: {path} does not exist")
                continue
            try:
                _library = Library(path)
                return _library
            except LibraryVersionError as e:
                if where == "$KVJIT_LIB":
                    raise LibraryVersionError(f"{e} [KVJIT_LIB]", e.library_version, e.package_version) from None
                mismatch = mismatch or e
                tried.append(f"{where}: {path}: version {e.library_version}")
            except (OSError, AttributeError) as e:
                if where == "$KVJIT_LIB":
                    raise LibraryNotFoundError(f"kvjit: KVJIT_LIB={path} could not be loaded: {e}") from e
                tried.append(f"{where}: {path}: {e}")
        message = ("kvjit: no libkvjit %s found (pip install . from the kvjit source tree builds the package with "
                   "its library; or build it with `meson setup build && ninja -C build` and set "
                   "KVJIT_LIB=/path/to/libkvjit.so). Tried: " % (PACKAGE_VERSION or "(package version unknown)")) + "; ".join(tried)
        if mismatch is not None:
            raise LibraryVersionError(message, mismatch.library_version, PACKAGE_VERSION)
        raise LibraryNotFoundError(message)
