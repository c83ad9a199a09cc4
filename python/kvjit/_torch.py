"""torch.ops.kvjit.store_kv_cache and torch.ops.kvjit.transfer_kv: kvjit's ops as PyTorch operators.

The schemas and fake (meta) implementations are registered with torch.library; the CUDA kernels
are C in the native module (op.cpp, op_transfer.cpp, through PyTorch's stable C ABI), so they run
without Python on the dispatcher's path: eagerly, inside torch.compile graphs (the mutated
caches are declared, so Dynamo traces them with no graph break) and inside torch.cuda.graph
capture, always on torch's current stream. On CPU tensors the op is the native module's CPU
path (the same request, a plain copy loop).

Registration needs torch imported. It happens when torch is imported (the package's
"torch.backends" entry point), at ``import kvjit`` when torch already is, or on
``kvjit.register_torch_ops()``.

kvjit.store_kv_cache and kvjit.transfer_kv are C functions (kvjit._C), which Dynamo cannot trace
into; torch.compiler.substitute_in_graph gives it their traceable twins below, which send the
same arguments to the ops. That rule is installed once the entry points have been handed out
(kvjit/__init__.py) and the ops are registered, whichever comes last: only a process that uses
them pays for importing torch._dynamo.
"""

import os
import sys
import threading

from . import _ops

NAMESPACE = "kvjit"
STORE_SCHEMA = ("store_kv_cache(Tensor k, Tensor? v, Tensor(a!) k_cache, Tensor(b!)? v_cache, Tensor indices, "
                "int num_slots=-1, int skip_slot=-1, int split=0, int pdl=0, Tensor? k_scale=None, "
                "Tensor? v_scale=None, int cache_dtype=0, int layout=0) -> ()")
TRANSFER_SCHEMA = ("transfer_kv(Tensor src_k, Tensor? src_v, Tensor(a!) dst_k, Tensor(b!)? dst_v, "
                   "Tensor src_indices, Tensor dst_indices, int src_num_slots=-1, int dst_num_slots=-1, "
                   "int split=0, int pdl=0, int row_elements=-1, Tensor? k_scale=None, Tensor? v_scale=None, "
                   "int max_ctas=0) -> ()")

_lock = threading.Lock()
_keep = []  # torch.library.Library objects: dropping one would unregister what it holds
store_op = None  # torch.ops.kvjit.store_kv_cache.default once registered
transfer_op = None  # torch.ops.kvjit.transfer_kv.default
error = None  # why registration failed, once it has
_entry_points = False  # kvjit.store_kv_cache / transfer_kv handed out: they need the compile rule
_compile_rule = False  # the rule installed


def _store_fake(k, v, k_cache, v_cache, indices, num_slots=-1, skip_slot=-1, split=0, pdl=0, k_scale=None,
                v_scale=None, cache_dtype=0, layout=0):
    """Shapes only: the op mutates its caches in place and returns nothing."""
    return None


def _transfer_fake(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots=-1, dst_num_slots=-1,
                   split=0, pdl=0, row_elements=-1, k_scale=None, v_scale=None, max_ctas=0):
    """Shapes only: the op mutates its destination caches in place and returns nothing."""
    return None


# The CPU path: the native module with every argument (the dispatcher leaves out trailing ones
# that equal their defaults when it calls a Python kernel).
def _store_cpu(k, v, k_cache, v_cache, indices, num_slots=-1, skip_slot=-1, split=0, pdl=0, k_scale=None,
               v_scale=None, cache_dtype=0, layout=0):
    _ops.native().store_kv_cache_op(k, v, k_cache, v_cache, indices, num_slots, skip_slot, split, pdl, k_scale,
                                    v_scale, cache_dtype, layout)


def _transfer_cpu(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots=-1, dst_num_slots=-1,
                  split=0, pdl=0, row_elements=-1, k_scale=None, v_scale=None, max_ctas=0):
    _ops.native().transfer_kv_op(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, src_num_slots,
                                 dst_num_slots, split, pdl, row_elements, k_scale, v_scale, max_ctas)


def define(torch, ns, cpu_path=True):
    """A FRAGMENT library of ``ns`` with both schemas, their fake implementations and (with
    ``cpu_path``) the CPU path: the native module, which raises ValueError/TypeError itself."""
    library = torch.library.Library(ns, "FRAGMENT")
    tags = (torch.Tag.needs_fixed_stride_order,)
    library.define(STORE_SCHEMA, tags=tags)
    library.define(TRANSFER_SCHEMA, tags=tags)
    torch.library.register_fake(f"{ns}::store_kv_cache", _store_fake, lib=library)
    torch.library.register_fake(f"{ns}::transfer_kv", _transfer_fake, lib=library)
    if cpu_path:
        library.impl("store_kv_cache", _store_cpu, "CPU")
        library.impl("transfer_kv", _transfer_cpu, "CPU")
    _keep.append(library)
    return library


def register_kernels(torch, ns, dispatch_key):
    """The C kernels for ``ns``::store_kv_cache and transfer_kv (schemas defined) on a dispatch key."""
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    cuda = os.path.join(lib_dir, "libtorch_cuda.so")
    _ops.native().register_torch(os.path.join(lib_dir, "libtorch_cpu.so"), cuda if os.path.exists(cuda) else None,
                                 ns, dispatch_key)


def register():
    """Register torch.ops.kvjit.* (needs torch imported); returns the store op overload.
    Idempotent; raises RuntimeError (or LibraryNotFoundError) saying why it cannot."""
    global store_op, transfer_op, error
    if store_op is not None:
        if _entry_points and not _compile_rule:
            install_compile_rule()
        return store_op
    with _lock:
        if store_op is not None:
            return store_op
        import torch

        try:
            if not _keep:
                define(torch, NAMESPACE)
            if torch.version.cuda is not None:
                register_kernels(torch, NAMESPACE, "CUDA")
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            raise
        error = None
        transfer_op = torch.ops.kvjit.transfer_kv.default
        store_op = torch.ops.kvjit.store_kv_cache.default
    if _entry_points:
        install_compile_rule()
    return store_op


# ---- torch.compile: the entry points' traceable twins ----------------------------------------------


def _traceable_store(k, v, k_cache, v_cache, indices, *, num_slots=None, skip_slot=None, split=0, pdl="auto",
                     k_scale=None, v_scale=None, cache_dtype=None, layout=None, stream=None, context=None):
    """kvjit.store_kv_cache as Dynamo traces it: the op, unless stream or context is given (a
    graph break then, into the op-argument C call)."""
    n = _ops.store_arguments(num_slots, skip_slot, split, pdl, cache_dtype, layout)
    if stream is None and context is None:
        return store_op(k, v, k_cache, v_cache, indices, n[0], n[1], n[2], n[3], k_scale, v_scale, n[4], n[5])
    return _ops.native().store_kv_cache_op(k, v, k_cache, v_cache, indices, n[0], n[1], n[2], n[3], k_scale,
                                           v_scale, n[4], n[5], _ops.stream_handle(stream),
                                           _ops.context_handle(context))


def _traceable_transfer(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, src_num_slots=None,
                        dst_num_slots=None, split=0, pdl="auto", row_elements=None, k_scale=None, v_scale=None,
                        max_ctas=0, stream=None, context=None):
    """kvjit.transfer_kv as Dynamo traces it (as _traceable_store)."""
    n = _ops.transfer_arguments(src_num_slots, dst_num_slots, split, pdl, row_elements, k_scale, v_scale, max_ctas)
    if stream is None and context is None:
        return transfer_op(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *n)
    return _ops.native().transfer_kv_op(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *n,
                                        _ops.stream_handle(stream), _ops.context_handle(context))


def entry_points_handed_out():
    """kvjit/__init__.py gave out the C entry points: with torch imported, register the ops and
    the compile rule now (quietly, as autoload(): register_torch_ops() raises why)."""
    global _entry_points
    _entry_points = True
    if "torch" in sys.modules:
        autoload()


def install_compile_rule():
    """Tell Dynamo to trace the twins in place of the C entry points (once; the ops registered)."""
    global _compile_rule
    with _lock:
        if _compile_rule:
            return
        import torch  # noqa: F401 - torch.compiler below imports torch._dynamo

        native = _ops.native()
        substitute = torch.compiler.substitute_in_graph
        substitute(native.store_kv_cache)(_traceable_store)
        substitute(native.transfer_kv)(_traceable_transfer)
        _compile_rule = True


def autoload():
    """torch's "torch.backends" entry point (run at the end of ``import torch``): register the ops
    so that torch.ops.kvjit.* exist whatever the import order. Never raises (a failure would fail
    ``import torch``): why it could not is kept in ``error`` and raised by register_torch_ops()."""
    try:
        register()
    except Exception:  # noqa: BLE001 - recorded in error
        pass


def register_if_torch():
    """At ``import kvjit``: register when torch is already imported (quietly, as autoload())."""
    if "torch" in sys.modules:
        autoload()
