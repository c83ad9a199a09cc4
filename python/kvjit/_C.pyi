"""kvjit._C: the native module (python/csrc/module.c). Tensors are torch tensors or any object with
__cuda_array_interface__ or __dlpack__; the scalars are the op's (kvjit._ops normalises the
keywords); stream and context are int handles or None."""

from typing import Any, Callable, Optional, Tuple

Tensor = Any

def init(libkvjit_path: str, default_context: int, error: Callable[[int, str, str], BaseException]) -> None: ...
def store_kv_cache(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor], indices: Tensor,
                   num_slots: int, skip_slot: int, split: int, pdl: int, k_scale: Optional[Tensor],
                   v_scale: Optional[Tensor], cache_dtype: int, layout: int, stream: Optional[int] = None,
                   context: Optional[int] = None) -> None: ...
def store_kv_cache_prepare(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor],
                           indices: Tensor, num_slots: int, skip_slot: int, split: int, pdl: int,
                           k_scale: Optional[Tensor], v_scale: Optional[Tensor], cache_dtype: int, layout: int,
                           stream: Optional[int], context: Optional[int], batch: Optional[int]) -> None: ...
def store_kv_args(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor], indices: Tensor,
                  num_slots: int, skip_slot: int, split: int, pdl: int, k_scale: Optional[Tensor],
                  v_scale: Optional[Tensor], cache_dtype: int, layout: int,
                  stream: Optional[int] = None) -> bytes: ...
def transfer_kv(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor],
                src_indices: Tensor, dst_indices: Tensor, src_num_slots: int, dst_num_slots: int, split: int,
                pdl: int, row_elements: int, stream: Optional[int] = None, context: Optional[int] = None) -> None: ...
def transfer_kv_prepare(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor],
                        src_indices: Tensor, dst_indices: Tensor, src_num_slots: int, dst_num_slots: int,
                        split: int, pdl: int, row_elements: int, stream: Optional[int], context: Optional[int],
                        batch: Optional[int]) -> None: ...
def transfer_kv_args(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor],
                     src_indices: Tensor, dst_indices: Tensor, src_num_slots: int, dst_num_slots: int, split: int,
                     pdl: int, row_elements: int, stream: Optional[int] = None) -> bytes: ...
def describe(obj: Tensor, name: str) -> Tuple[int, Tuple[int, ...], Tuple[int, ...], int, str, int, int, int]: ...
def register_torch(libtorch_cpu: str, libtorch_cuda: Optional[str], namespace: str, dispatch_key: str) -> None: ...
