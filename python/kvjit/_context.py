"""kvjit_context: explicit contexts, the lazily created default one, counters and cache info."""

import ctypes
import os
import threading

from . import _lib


def _path_bytes(value, name):
    """A path option as bytes for the C string: None stays None; NUL (which C would silently cut
    the path at) and, in a list of dirs, ':' (the separator) are refused."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        parts = [_path_bytes(v, f"{name}[{i}]") for i, v in enumerate(value)]
        for i, part in enumerate(parts):
            if part is None or b":" in part:
                raise ValueError(f"{name}[{i}]: a dir in the list must be a path without ':', got {value[i]!r}")
        return b":".join(parts)
    try:
        data = os.fsencode(value)
    except TypeError:
        raise TypeError(f"{name}: expected a path (str, bytes or os.PathLike), got {type(value).__name__}") from None
    if b"\0" in data:
        raise ValueError(f"{name}: contains a NUL character: {value!r}")
    return data


def _tri_state(value, name):
    if type(value) is bool or (type(value) is int and value in (0, 1)):
        return int(value)
    raise ValueError(f"{name}: expected True, False or None (from the environment), got {value!r}")


def _compile_mode(value):
    """compile_mode: "always", "warn" or "never" (None, $KVJIT_COMPILE, is the library's default)."""
    if type(value) is str and value in _lib.COMPILE_MODES:
        return _lib.COMPILE_MODES[value]
    raise ValueError(f"compile_mode: expected 'always', 'warn', 'never' or None (from $KVJIT_COMPILE), got {value!r}")


def _text_bytes(value, name):
    """A text option (URLs) as bytes: None stays None; a NUL, which C would cut it at, is refused."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str or None, got {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name}: contains a NUL byte")
    return value.encode()


def _unsigned(value, name, bits, what):
    """A C unsigned of ``bits`` bits: TypeError for a non-int, ValueError out of range (never a
    silent wrap: 2**64 + 5 is not 5)."""
    if type(value) is not int:
        raise TypeError(f"{name}: expected an int ({what}), got {type(value).__name__}")
    if not 0 <= value < 2**bits:
        raise ValueError(f"{name}: must be 0..2**{bits}-1 ({what}), got {value}")
    return value


def context_arg(context):
    """``context``, or the default context for None; TypeError naming the argument otherwise."""
    if context is None:
        return default_context()
    if not isinstance(context, Context):
        raise TypeError(f"context: expected a kvjit.Context or None, got {type(context).__name__}")
    return context


class Context:
    """A kvjit context: cache configuration, loaded programs, counters. Safe to share between
    threads. Programs, kernels and the store variants it loaded stay valid while it lives: keep it
    alive as long as launches from it (or CUDA graphs that captured them) may run.

    Every option left at None comes from the environment (KVJIT_CACHE_DIR, KVJIT_CACHE_PATH, ...),
    as with KVJIT_CONTEXT_OPTIONS_INIT. cache_path may be a list of dirs.
    """

    def __init__(self, cache_dir=None, *, cache_path=None, disable_cache=None, cache_max_bytes=0, log=None,
                 lock_timeout_ms=0, manifest_path=None, allow_shared_dirs=None, compile_mode=None,
                 remote_cache=None, remote_read_write=None):
        self._handle = None
        lib = _lib.load()
        _unsigned(cache_max_bytes, "cache_max_bytes", 64, "bytes; 0: the default budget")
        _unsigned(lock_timeout_ms, "lock_timeout_ms", 32, "ms; 0: the default wait")
        # The library's defaults (every option from the environment), then what was given.
        opts = lib.new(_lib.ContextOptions, cache_dir=_path_bytes(cache_dir, "cache_dir"),
                       cache_path=_path_bytes(cache_path, "cache_path"), cache_max_bytes=cache_max_bytes,
                       lock_timeout_ms=lock_timeout_ms, manifest_path=_path_bytes(manifest_path, "manifest_path"),
                       remote_cache=_text_bytes(remote_cache, "remote_cache"))
        for name, value in (("disable_cache", disable_cache), ("log", log), ("allow_shared_dirs", allow_shared_dirs),
                            ("remote_read_write", remote_read_write)):
            if value is not None:
                setattr(opts, name, _tri_state(value, name))
        if compile_mode is not None:
            opts.compile_mode = _compile_mode(compile_mode)
        handle = ctypes.c_void_p()
        lib.check(lib.fn["kvjit_context_create"](ctypes.byref(handle), ctypes.byref(opts)))
        self._lib = lib
        self._handle = handle.value
        self._destroy = lib.fn["kvjit_context_destroy"]

    @property
    def handle(self):
        """The kvjit_context pointer as an int (for C code sharing this context)."""
        self._require_open()
        return self._handle

    def _require_open(self):
        if self._handle is None:
            raise ValueError("context: closed")

    def close(self):
        """Destroy the context now (no launch from it may be in flight). Idempotent."""
        handle, self._handle = self._handle, None
        if handle is not None:
            self._destroy(handle)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self):
        """Counters since creation: a dict of kvjit_stats' fields (ints)."""
        self._require_open()
        out = self._lib.new(_lib.Stats)
        self._lib.check(self._lib.fn["kvjit_context_stats"](self._handle, ctypes.byref(out)))
        return {name: getattr(out, name) for name in _lib.STATS_FIELDS}

    def cache_info(self):
        """Where the context caches: write_dir (None when memory only), read_dirs (list),
        degraded_reason (None or why the writable dir is unusable), max_bytes."""
        self._require_open()
        out = _lib.CacheInfo()
        self._lib.check(self._lib.fn["kvjit_context_cache_info"](self._handle, ctypes.byref(out)))

        def text(b):
            return None if b is None else os.fsdecode(b)

        read_dirs = text(out.read_dirs) or ""
        return {
            "write_dir": text(out.write_dir),
            "read_dirs": [d for d in read_dirs.split(":") if d],
            "degraded_reason": text(out.degraded_reason),
            "max_bytes": out.max_bytes,
        }

    def oob_count(self, reset=False):
        """Slot ids >= num_slots seen by this context's store kernels in the current CUDA context
        since the last reset. Synchronises the device."""
        self._require_open()
        if type(reset) is not bool and not (type(reset) is int and reset in (0, 1)):
            raise TypeError(f"reset: expected True or False, got {reset!r}")
        return self._oob_count(b"store_kv_cache", reset)

    def _oob_count(self, op, reset):
        """kvjit_op_oob_count of ``op``: the one bad-slot counter, for every op."""
        count = ctypes.c_uint64()
        self._lib.check(self._lib.fn["kvjit_op_oob_count"](self.handle, op, ctypes.byref(count), 1 if reset else 0))
        return count.value

    def __repr__(self):
        state = "closed" if self._handle is None else hex(self._handle)
        return f"<kvjit.Context {state}>"


_default = None
_default_lock = threading.Lock()


def default_context():
    """The process-wide context every function uses when given none; created on first use with
    all options from the environment. Never destroyed (launches may run until exit)."""
    ctx = _default
    if ctx is None:
        ctx = _create_default()
    return ctx


def _create_default():
    global _default
    with _default_lock:
        if _default is None:
            ctx = Context()
            ctx.close = lambda: None  # shared by everyone: closing it would break other users
            _default = ctx
        return _default


def stats(context=None):
    """kvjit_context_stats of ``context`` (default: the default context) as a dict."""
    return context_arg(context).stats()


def explain_misses(context=None):
    """The misses of ``context`` (default: the default context) explained, each key once, as dicts
    {"cause": "nvrtc" | "target" | "toolkit" | "options" | "source" | "cold" | "other", "key": hex,
    "message": one line naming what differs and what to do}. stats()' misses_* count them by cause."""
    ctx = context_arg(context)
    ctx._require_open()
    lib = ctx._lib
    out = (_lib.MissInfo * _lib.MISSES_KEPT)()
    count = ctypes.c_size_t(0)
    lib.check(lib.fn["kvjit_context_misses"](ctx._handle, out, len(out), ctypes.byref(count)))
    return [{"cause": lib.fn["kvjit_miss_cause_name"](m.cause).decode(), "key": m.key.decode(),
             "message": m.message.decode(errors="replace")} for m in out[:min(count.value, len(out))]]


def cache_info(context=None):
    """kvjit_context_cache_info of ``context`` (default: the default context) as a dict."""
    return context_arg(context).cache_info()


def oob_count(reset=False, context=None):
    """Out-of-range slot ids counted by store kernels (kvjit_op_oob_count)."""
    return context_arg(context).oob_count(reset)


def transfer_kv_oob_count(reset=False, context=None):
    """Slot ids past either cache (and unusable layer pointers) seen by ``context``'s transfer_kv
    kernels in the current CUDA context since the last reset. Synchronises."""
    if type(reset) is not bool and reset not in (0, 1):
        raise TypeError(f"reset: expected a bool, got {type(reset).__name__}")
    return context_arg(context)._oob_count(b"transfer_kv", reset)
