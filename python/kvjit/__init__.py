"""kvjit from Python: kvjit's ops on any framework's CUDA tensors, and the NVRTC loader.

    import kvjit
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)   # k_cache[loc] = k; v_cache[loc] = v

Tensors may be torch tensors or anything with ``__cuda_array_interface__`` or ``__dlpack__``
(CuPy, JAX, ...). With torch, ``torch.ops.kvjit.store_kv_cache`` and ``transfer_kv`` are the
ops for torch.compile and CUDA graphs.

The library is found through $KVJIT_LIB (a path to libkvjit.so), then a libkvjit.so* next to this
package, then the source tree's build/src/libkvjit.so, then the system's library path. It is
loaded on first use; kvjit.library_path() says which one.
"""

from . import _lib, _ops, _torch
from ._context import (Context, cache_info, default_context, explain_misses, oob_count, stats,
                       transfer_kv_oob_count)
from ._lib import (
    TARGET_ARCH_SPECIFIC,
    TARGET_FAMILY,
    TARGET_PTX,
    CompileError,
    Error,
    InvalidArgumentError,
    LibraryNotFoundError,
    LibraryVersionError,
)
from ._ops import prepare, transfer_kv_all_layers, transfer_kv_prepare
from ._prewarm import prewarm, prewarm_line
from ._program import (
    Binary,
    Kernel,
    Program,
    current_sm,
    device_count,
    device_info,
    driver_version,
    nvrtc_archs,
    nvrtc_version,
    parse_arch,
    parse_target,
    target_name,
)

# meson.build's project version (written into _version.py at build time); the library loaded
# must be the same version (checked at load: LibraryVersionError).
__version__ = _lib.PACKAGE_VERSION or "0+unknown"

__all__ = [
    "Binary", "CompileError", "Context", "Error", "InvalidArgumentError", "Kernel", "LibraryNotFoundError",
    "LibraryVersionError", "Program", "STATUS_NAMES", "TARGET_ARCH_SPECIFIC", "TARGET_FAMILY", "TARGET_PTX",
    "cache_info", "current_sm", "default_context", "device_count", "device_info", "driver_version", "explain_misses",
    "library_path", "nvrtc_archs", "nvrtc_version", "oob_count", "parse_arch", "parse_target", "prepare",
    "prewarm", "prewarm_line", "register_torch_ops", "stats", "store_kv_cache", "target_name", "transfer_kv",
    "transfer_kv_all_layers", "transfer_kv_oob_count", "transfer_kv_prepare", "version", "version_number",
]


def register_torch_ops():
    """Register ``torch.ops.kvjit.store_kv_cache`` and ``torch.ops.kvjit.transfer_kv`` (the C
    kernels, the CPU path and the fake implementations for torch.compile).

    Done when torch is imported (the installed package's "torch.backends" entry point) and at
    ``import kvjit`` when torch already is; call it before torch.compile otherwise (a source
    tree has no entry point). Idempotent.

    Returns:
        The store op, ``torch.ops.kvjit.store_kv_cache.default``.

    Raises:
        RuntimeError: why the ops cannot be registered.
    """
    return _torch.register()


_ENTRY_POINTS = ("store_kv_cache", "transfer_kv")


def __getattr__(name):
    """kvjit.store_kv_cache and kvjit.transfer_kv: the native module's C functions (a call costs
    no Python frame), loaded with the library on first use; STATUS_NAMES, read from it."""
    if name == "STATUS_NAMES":
        return _lib.status_names()
    if name not in _ENTRY_POINTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    fn = _ops.entry_point(name)
    if not hasattr(fn, "__code__"):  # the C function, not the stand-in that says why it is missing
        fn.__module__ = __name__
        globals()[name] = fn
        _torch.entry_points_handed_out()
    return fn


def __dir__():
    return sorted(set(globals()) | set(_ENTRY_POINTS) | {"STATUS_NAMES"})


def library_path():
    """Path of the libkvjit actually loaded (loads it if needed)."""
    return _lib.load().path


def version():
    """``"MAJOR.MINOR.PATCH"`` of the loaded libkvjit (kvjit_version_string)."""
    return _lib.load().version_string


def version_number():
    """``MAJOR * 10000 + MINOR * 100 + PATCH`` of the loaded libkvjit."""
    return _lib.load().version_number


# help(kvjit) and tracebacks name the public objects as kvjit's, not as their private modules'.
for _name in __all__:
    _obj = globals().get(_name)
    if getattr(_obj, "__module__", "").startswith("kvjit._"):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj

_torch.register_if_torch()
