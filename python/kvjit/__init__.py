"""kvjit from Python: store_kv_cache on CUDA tensors and the NVRTC loader, over libkvjit (ctypes).

    import kvjit
    kvjit.store_kv_cache(k, v, k_cache, v_cache, loc)   # k_cache[loc] = k; v_cache[loc] = v

The library is found through $KVJIT_LIB (a path to libkvjit.so), then a libkvjit.so* next to this
package, then the source tree's build/src/libkvjit.so, then the system's library path. It is
loaded on first use; kvjit.library_path() says which one.
"""

from ._context import Context, cache_info, default_context, explain_misses, oob_count, stats
from . import _lib as _lib_module
from ._lib import (
    CompileError,
    Error,
    InvalidArgumentError,
    LibraryNotFoundError,
    LibraryVersionError,
    STATUS_NAMES,
)
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
from ._lib import TARGET_ARCH_SPECIFIC, TARGET_FAMILY, TARGET_PTX
from ._store import prepare, prewarm
from ._torch_op import store_kv_cache
from ._transfer import (prewarm_line, transfer_kv, transfer_kv_all_layers, transfer_kv_oob_count,
                        transfer_kv_prepare)

# meson.build's project version (written into _version.py at build time); the library loaded
# must be the same version (checked at load: LibraryVersionError).
__version__ = _lib_module.PACKAGE_VERSION or "0+unknown"

__all__ = [
    "Binary", "CompileError", "Context", "Error", "InvalidArgumentError", "Kernel", "LibraryNotFoundError",
    "LibraryVersionError", "Program", "STATUS_NAMES", "TARGET_ARCH_SPECIFIC", "TARGET_FAMILY", "TARGET_PTX",
    "cache_info", "current_sm", "explain_misses", "default_context", "device_count", "device_info", "driver_version",
    "library_path", "nvrtc_archs", "nvrtc_version", "oob_count", "parse_arch", "parse_target", "prepare",
    "prewarm", "register_torch_ops", "stats", "store_kv_cache", "target_name", "version", "version_number",
    "prewarm_line", "transfer_kv", "transfer_kv_all_layers", "transfer_kv_oob_count", "transfer_kv_prepare",
]


def register_torch_ops():
    """Register torch.ops.kvjit.store_kv_cache and torch.ops.kvjit.transfer_kv (the CUDA kernels,
    CPU implementations and the fake ones for torch.compile). Done at `import kvjit` when torch
    is already imported; call this before torch.compile otherwise. Returns the store op;
    RuntimeError says why it cannot."""
    from . import _torch_op

    return _torch_op.register()


def _register_at_import():
    import sys

    if "torch" in sys.modules:
        from . import _torch_op

        _torch_op.try_register()


def library_path():
    """Path of the libkvjit actually loaded (loads it if needed)."""
    from . import _lib

    return _lib.load().path


def version():
    """"MAJOR.MINOR.PATCH" of the loaded libkvjit (kvjit_version_string)."""
    from . import _lib

    return _lib.load().version_string


def version_number():
    """MAJOR * 10000 + MINOR * 100 + PATCH of the loaded libkvjit."""
    from . import _lib

    return _lib.load().version_number


_register_at_import()
