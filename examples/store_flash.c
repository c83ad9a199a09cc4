/* Store new tokens' K and V rows straight into vLLM's FlashAttention cache, a tensor
 * [num_blocks, 8 heads, 16 slots, 2 x 128] of bf16 whose K is [..., :128] and V [..., 128:] of
 * each head: one launch, whatever the layout. Slot s is position s % 16 of block s / 16. */
#include <stdint.h>

#include <kvjit.h>

enum { HEADS = 8, DIM = 128, BLOCK = 16, ELEM = 2 /* bf16 */ };

/* k, v: device pointers to batch rows of HEADS x DIM bf16; cache: num_blocks x HEADS x BLOCK x
 * 2 DIM bf16; slots: batch int64 slot ids (negative: padding, skipped). */
kvjit_status example_store_flash(kvjit_context *ctx, void *cache, const void *k, const void *v,
                                 const int64_t *slots, int64_t batch, int64_t num_blocks,
                                 struct CUstream_st *stream) {
  kvjit_layout kl = KVJIT_LAYOUT_INIT;  /* the K view, in bytes */
  kl.page_size = BLOCK;                 /* slots per block */
  kl.page_stride = HEADS * BLOCK * 2 * DIM * ELEM;
  kl.slot_stride = 2 * DIM * ELEM;      /* a slot's K and V of one head, side by side */
  kl.element_bytes = ELEM;
  kl.num_row_dims = 2;                  /* a token's row: (head, dim) */
  kl.row_extents[0] = HEADS;
  kl.row_extents[1] = DIM;
  kl.row_strides[0] = BLOCK * 2 * DIM * ELEM;
  kl.row_strides[1] = ELEM;
  kvjit_layout vl = kl;                 /* the V view: the same strides, DIM elements further */

  kvjit_store_kv_args a = KVJIT_STORE_KV_ARGS_INIT;
  a.k = k;
  a.v = v;
  a.k_cache = cache;
  a.v_cache = (char *)cache + DIM * ELEM;
  a.k_cache_layout = &kl;               /* the *_cache_stride fields stay 0 */
  a.v_cache_layout = &vl;
  a.indices = slots;
  a.index_type = KVJIT_INDEX_INT64;
  a.batch = batch;
  a.k_row_bytes = a.v_row_bytes = HEADS * DIM * ELEM;
  a.num_slots = num_blocks * BLOCK;
  a.stream = stream;
  return kvjit_store_kv_cache(ctx, &a); /* views that could overlap are refused, naming them */
}
