"""kvjit._C: the native module (python/csrc/module.c). Tensors are torch tensors or any object with
__cuda_array_interface__ or __dlpack__. store_kv_cache and transfer_kv are kvjit's public calls
themselves; the others take the op's scalars (kvjit._ops normalises keywords), stream and context
as int handles or None."""

from typing import Any, Callable, Dict, Optional, Tuple

Tensor = Any

def init(libkvjit_path: str, default_context: int, error: Callable[[int, str, str], BaseException],
         store_scalars: Callable[..., Tuple[Any, ...]], transfer_scalars: Callable[..., Tuple[Any, ...]],
         fast_cache_dtype: Dict[str, int], fast_layout: Dict[str, int], /) -> None: ...
def store_kv_cache(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor], indices: Tensor, *,
                   num_slots: Optional[int] = None, skip_slot: Optional[int] = None, split: int = 0,
                   pdl: Any = "auto", k_scale: Optional[Tensor] = None, v_scale: Optional[Tensor] = None,
                   cache_dtype: Any = None, layout: Optional[str] = None, stream: Any = None,
                   context: Any = None) -> None: ...
def transfer_kv(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor], src_indices: Tensor,
                dst_indices: Tensor, *, src_num_slots: Optional[int] = None, dst_num_slots: Optional[int] = None,
                split: int = 0, pdl: Any = "auto", row_elements: Optional[int] = None,
                k_scale: Optional[Tensor] = None, v_scale: Optional[Tensor] = None, max_ctas: int = 0,
                stream: Any = None, context: Any = None) -> None: ...
def store_kv_cache_op(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor], indices: Tensor,
                      num_slots: int, skip_slot: int, split: int, pdl: int, k_scale: Optional[Tensor],
                      v_scale: Optional[Tensor], cache_dtype: int, layout: int, stream: Optional[int] = None,
                      context: Optional[int] = None, /) -> None: ...
def store_kv_cache_prepare(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor],
                           indices: Tensor, num_slots: int, skip_slot: int, split: int, pdl: int,
                           k_scale: Optional[Tensor], v_scale: Optional[Tensor], cache_dtype: int, layout: int,
                           stream: Optional[int] = None, context: Optional[int] = None,
                           batch: Optional[int] = None, /) -> None: ...
def store_kv_args(k: Tensor, v: Optional[Tensor], k_cache: Tensor, v_cache: Optional[Tensor], indices: Tensor,
                  num_slots: int, skip_slot: int, split: int, pdl: int, k_scale: Optional[Tensor],
                  v_scale: Optional[Tensor], cache_dtype: int, layout: int, stream: Optional[int] = None,
                  /) -> bytes: ...
def transfer_kv_op(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor],
                   src_indices: Tensor, dst_indices: Tensor, src_num_slots: int, dst_num_slots: int, split: int,
                   pdl: int, row_elements: int, k_scale: Optional[Tensor], v_scale: Optional[Tensor], max_ctas: int,
                   stream: Optional[int] = None, context: Optional[int] = None, /) -> None: ...
def transfer_kv_prepare(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor],
                        src_indices: Tensor, dst_indices: Tensor, src_num_slots: int, dst_num_slots: int,
                        split: int, pdl: int, row_elements: int, k_scale: Optional[Tensor],
                        v_scale: Optional[Tensor], max_ctas: int, stream: Optional[int] = None,
                        context: Optional[int] = None, batch: Optional[int] = None, /) -> None: ...
def transfer_kv_args(src_k: Tensor, src_v: Optional[Tensor], dst_k: Tensor, dst_v: Optional[Tensor],
                     src_indices: Tensor, dst_indices: Tensor, src_num_slots: int, dst_num_slots: int, split: int,
                     pdl: int, row_elements: int, k_scale: Optional[Tensor], v_scale: Optional[Tensor],
                     max_ctas: int, stream: Optional[int] = None, /) -> bytes: ...
def describe(obj: Tensor, name: str, /) -> Tuple[int, Tuple[int, ...], Tuple[int, ...], int, str, int, int, int]: ...
def register_torch(libtorch_cpu: str, libtorch_cuda: Optional[str], namespace: str, dispatch_key: str,
                   /) -> None: ...
