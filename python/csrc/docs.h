/*
 * The docstrings of the public calls that are C functions (module.c): help() shows them, and the
 * first line is the signature inspect.signature() reads (torch.compile's rule checks it against
 * the traceable twin in python/kvjit/_torch.py).
 */
#ifndef KVJIT_DOCS_H
#define KVJIT_DOCS_H

#define STORE_KV_CACHE_DOC \
  "store_kv_cache(k, v, k_cache, v_cache, indices, *, num_slots=None, skip_slot=None, split=0, pdl='auto', " \
  "k_scale=None, v_scale=None, cache_dtype=None, layout=None, stream=None, context=None)\n--\n\n" \
  "``k_cache[indices] = k; v_cache[indices] = v`` in one kernel, on the current stream.\n" \
  "\n" \
  "Args:\n" \
  "    k, v: ``[B, H, D]`` or ``[B, H*D]`` CUDA tensors (torch, or anything with\n" \
  "        ``__cuda_array_interface__`` or ``__dlpack__``), each token's row contiguous.\n" \
  "        ``v`` and ``v_cache`` may both be None (K only).\n" \
  "    k_cache, v_cache: the caches as views, any strides; the layout comes from them:\n" \
  "        ``[slots, H, D]`` or ``[slots, H*D]`` (SGLang's pools: flat slots); paged\n" \
  "        ``[pages, page_size, H, D]``, whose page and slot strides need not flatten into one\n" \
  "        slot index and whose heads may be strided (vLLM's NHD caches, and its HND and\n" \
  "        FlashAttention ``[blocks, H, block_size, 2*D]`` caches as the NHD-shaped views vLLM\n" \
  "        passes, ``transpose(1, 2)`` and ``[..., :D]`` / ``[..., D:]``); vLLM's older K cache\n" \
  "        ``[blocks, H, D/x, block_size, x]``. Slot ``s`` is page ``s // page_size``, position\n" \
  "        ``s % page_size``. Views whose rows could share bytes are refused.\n" \
  "    indices: ``[B]`` int32 or int64. Ids < 0 and == ``skip_slot`` are skipped; ids >=\n" \
  "        ``num_slots`` are skipped and counted (:func:`oob_count`).\n" \
  "    num_slots: default the caches' slot count.\n" \
  "    skip_slot: a slot id never written (None: none).\n" \
  "    split: 0 automatic, else the parts each row is split into.\n" \
  "    pdl: \"auto\", \"on\" or \"off\" (programmatic dependent launch).\n" \
  "    k_scale, v_scale: float32 CUDA tensors of 1 (per tensor) or H (per head) elements, or\n" \
  "        None: an fp8 cache (``torch.float8_e4m3fn`` / ``float8_e5m2``, or uint8 with\n" \
  "        ``cache_dtype=\"fp8_e4m3\"`` / ``\"fp8_e5m2\"``) fed from float16/bfloat16/float32 rows\n" \
  "        stores ``fp8(x / scale)``.\n" \
  "    cache_dtype: None (the caches' own dtype) or an fp8 type for uint8 caches.\n" \
  "    layout: None (from the tensors) or ``\"vllm_paged\"``: vLLM's older paged caches, K\n" \
  "        ``[blocks, H, D/x, block_size, x]`` and V ``[blocks, H, D, block_size]``. Needed only\n" \
  "        there: a 4-D V of that layout has the rank of an NHD ``[blocks, block_size, H, D]``\n" \
  "        cache, so its shape alone cannot say which it is (a 5-D K with a V cache and no\n" \
  "        ``layout`` is refused, naming this keyword).\n" \
  "    stream: default torch's current stream for torch tensors, else the\n" \
  "        ``__cuda_array_interface__`` stream of k, else the legacy default stream.\n" \
  "    context: a :class:`Context` (default: the shared one).\n" \
  "\n" \
  "Raises:\n" \
  "    ValueError, TypeError: a bad argument, named first in the message.\n" \
  "    Error: the library failed (``.status``, ``.name``, ``.message``).\n" \
  "\n" \
  "Under torch.compile torch tensors go through ``torch.ops.kvjit.store_kv_cache`` (no graph\n" \
  "break) unless ``stream`` or ``context`` is given."

#define TRANSFER_KV_DOC \
  "transfer_kv(src_k, src_v, dst_k, dst_v, src_indices, dst_indices, *, src_num_slots=None, " \
  "dst_num_slots=None, split=0, pdl='auto', row_elements=None, k_scale=None, v_scale=None, max_ctas=0, " \
  "stream=None, context=None)\n--\n\n" \
  "``dst_k[dst_indices] = src_k[src_indices]; dst_v[dst_indices] = src_v[src_indices]`` in one\n" \
  "kernel on the current stream, between any two caches on the GPU or in pinned host memory.\n" \
  "\n" \
  "Ids < 0 are skipped; ids past either cache are skipped and counted\n" \
  "(:func:`transfer_kv_oob_count`). The destination ids must be distinct. ``src_v`` and\n" \
  "``dst_v`` may both be None (K only). The caches' rows must have the same bytes; a row is\n" \
  "everything after the source's first dim (or the destination's, when it has less there)\n" \
  "unless ``row_elements`` says how many trailing elements make one. Caches are views with any\n" \
  "strides, their layout read from the tensors as store_kv_cache reads it: flat slots, or\n" \
  "``[pages, page_size, H, D]`` whose slot dims do not flatten (SGLang's page_first_direct host\n" \
  "layout sliced per layer, ``host[0, :, layer]``; page_head's ``host[0, :, :, :,\n" \
  "layer].transpose(1, 2)``), heads strided; between CPU tensors only flat caches.\n" \
  "\n" \
  "Converting on the way: an fp8 (float8_e4m3fn / float8_e5m2) source into a float16, bfloat16\n" \
  "or float32 destination writes ``x * scale``; the other way ``fp8(x / scale)`` as\n" \
  ":func:`store_kv_cache` quantizes. ``k_scale`` / ``v_scale``: float32 CUDA tensors of 1 (per\n" \
  "tensor) or H (per head) scales, read when the kernel runs (graph-capturable); None: no scale.\n" \
  "\n" \
  "``max_ctas``: 0 the plan's budget (at most 4 CTAs over the host link, the model keeps its\n" \
  "SMs), N at most N CTAs, -1 every SM the batch can use.\n" \
  "\n" \
  "Raises:\n" \
  "    ValueError, TypeError: a bad argument, named first in the message.\n" \
  "    Error: the library failed.\n" \
  "\n" \
  "Under torch.compile torch tensors go through ``torch.ops.kvjit.transfer_kv`` (no graph\n" \
  "break) unless ``stream`` or ``context`` is given."

#endif
