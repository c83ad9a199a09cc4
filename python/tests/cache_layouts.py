"""The KV cache layouts serving runtimes use, as torch tensors (issue 29).

Each layout makes its storage, the views the runtime passes to its store op (the ones kvjit reads
its layout from) and the reference: torch's own indexing of those views. Written from vLLM
0.33.0's csrc/cache_kernels.cu and attention backends:

  nhd      K, V [blocks, block_size, H, D]                          reshape_and_cache_flash
  hnd      K, V [blocks, H, block_size, D], passed as transpose(1, 2)   reshape_and_cache_flash
  fa       one [blocks, H, block_size, 2D] (FlashAttention's packed layout), passed as
           transpose(1, 2)[..., :D] and [..., D:]                   reshape_and_cache_flash
  chunked  K [blocks, H, D/x, block_size, x] (x = 16 bytes of the cache type),
           V [blocks, H, D, block_size]                             reshape_and_cache
  mla      one [blocks, block_size, 512 + 64]: kv_c then k_pe       concat_and_cache_mla
  sglang   SGLang's MHA pool [size, H, D] (flat slots), K and V halves of one [size, H, 2D]

Slot s is block s // block_size, position s % block_size. Shared by test_gpu_layouts.py and
bench/bench_layouts.py.
"""


class Layout:
    name = ""
    vllm_op = ""          # vLLM's op for this layout (None: vLLM has no such cache)
    head_strided = False  # a head's rows are not one flat slot stride: before issue 29, one call per head
    kvjit_keywords = {}   # what kvjit.store_kv_cache needs besides the tensors
    lora, pe = 512, 64    # MLA's row halves

    def __init__(self, heads=8, dim=128, block=16, slots=1 << 18, device="cuda"):
        self.h, self.d, self.block, self.slots, self.device = heads, dim, block, slots, device
        self.blocks = slots // block

    def storage(self, torch, cache_dtype):
        """The tensors the runtime allocates, by name."""
        raise NotImplementedError

    def views(self, store):
        """(k_cache, v_cache) as the runtime passes them to its store op."""
        return store["k"], store["v"]

    def inputs(self, torch, count, tokens, dtype):
        """``count`` sets of (k, v) rows, [count, tokens, ...]."""
        shape = (count, tokens, self.h, self.d)
        return (torch.randn(shape, device=self.device).to(dtype), torch.randn(shape, device=self.device).to(dtype))

    def row_bytes(self, elem):
        """Bytes of one K row and one V row together, of ``elem``-byte elements."""
        return 2 * self.h * self.d * elem

    def reference(self, torch, views, k, v, slots):
        """views[slots] = k, v with torch's indexing (ids < 0 or past the cache are skipped)."""
        keep = (slots >= 0) & (slots < self.slots)
        slots, k, v = slots[keep].long(), k[keep], v[keep]
        kc, vc = views
        b, o = slots // self.block, slots % self.block
        self.put(kc, vc, b, o, k, v)

    def put(self, kc, vc, b, o, k, v):
        kc[b, o] = k
        vc[b, o] = v


class Nhd(Layout):
    name, vllm_op = "nhd", "reshape_and_cache_flash"

    def storage(self, torch, cache_dtype):
        shape = (self.blocks, self.block, self.h, self.d)
        return {n: torch.empty(shape, dtype=cache_dtype, device=self.device) for n in ("k", "v")}


class Hnd(Layout):
    name, vllm_op, head_strided = "hnd", "reshape_and_cache_flash", True

    def storage(self, torch, cache_dtype):
        shape = (self.blocks, self.h, self.block, self.d)
        return {n: torch.empty(shape, dtype=cache_dtype, device=self.device) for n in ("k", "v")}

    def views(self, store):
        return store["k"].transpose(1, 2), store["v"].transpose(1, 2)

    def head_views(self, torch, store, h):
        """Head h's K and V rows as flat [n, D] views, slot stride D: slot s is row
        (s // block_size) * H * block_size + s % block_size there (head_ids())."""
        n = (self.blocks - 1) * self.h * self.block + self.block
        return tuple(torch.as_strided(store[s], (n, self.d), (self.d, 1), h * self.block * self.d) for s in "kv")

    def head_ids(self, slots):
        return (slots // self.block) * (self.h * self.block) + slots % self.block


class Fa(Hnd):
    name = "fa"

    def storage(self, torch, cache_dtype):
        return {"kv": torch.empty((self.blocks, self.h, self.block, 2 * self.d), dtype=cache_dtype,
                                  device=self.device)}

    def views(self, store):
        both = store["kv"].transpose(1, 2)
        return both[..., :self.d], both[..., self.d:]

    def head_views(self, torch, store, h):
        n = (self.blocks - 1) * self.h * self.block + self.block
        base = h * self.block * 2 * self.d
        return (torch.as_strided(store["kv"], (n, self.d), (2 * self.d, 1), base),
                torch.as_strided(store["kv"], (n, self.d), (2 * self.d, 1), base + self.d))


class Chunked(Layout):
    name, vllm_op = "chunked", "reshape_and_cache"
    kvjit_keywords = {"layout": "vllm_paged"}

    def storage(self, torch, cache_dtype):
        x = 16 // torch.empty((), dtype=cache_dtype).element_size()
        return {"k": torch.empty((self.blocks, self.h, self.d // x, self.block, x), dtype=cache_dtype,
                                 device=self.device),
                "v": torch.empty((self.blocks, self.h, self.d, self.block), dtype=cache_dtype, device=self.device)}

    def put(self, kc, vc, b, o, k, v):
        x = kc.shape[4]
        kc[b, :, :, o, :] = k.reshape(k.shape[0], self.h, self.d // x, x)
        vc[b, :, :, o] = v


class Mla(Layout):
    name, vllm_op = "mla", "concat_and_cache_mla"

    def __init__(self, block=64, **kw):
        super().__init__(block=block, **kw)

    def storage(self, torch, cache_dtype):
        return {"kv": torch.empty((self.blocks, self.block, self.lora + self.pe), dtype=cache_dtype,
                                  device=self.device)}

    def views(self, store):
        return store["kv"][..., :self.lora], store["kv"][..., self.lora:]

    def inputs(self, torch, count, tokens, dtype):
        return (torch.randn((count, tokens, self.lora), device=self.device).to(dtype),
                torch.randn((count, tokens, self.pe), device=self.device).to(dtype))

    def row_bytes(self, elem):
        return (self.lora + self.pe) * elem


class Sglang(Layout):
    """SGLang's MHA pool: flat slots; here K and V halves of one [size, H, 2D] buffer, so that
    each head's D is strided (2D apart): a flat slot stride with strided row dims."""
    name, vllm_op = "sglang", None

    def __init__(self, block=1, **kw):
        super().__init__(block=block, **kw)

    def storage(self, torch, cache_dtype):
        return {"kv": torch.empty((self.slots, self.h, 2 * self.d), dtype=cache_dtype, device=self.device)}

    def views(self, store):
        return store["kv"][..., :self.d], store["kv"][..., self.d:]

    def put(self, kc, vc, b, o, k, v):
        kc[b] = k
        vc[b] = v


LAYOUTS = {c.name: c for c in (Nhd, Hnd, Fa, Chunked, Mla, Sglang)}


def fp8_rows(torch, rows, scale, heads=None):
    """fp8 e4m3 bytes of x / scale (scale: 1 value, or one per head of rows [B, H, ...]), saturated
    to +-448 as kvjit and vLLM store it, rounded as torch converts."""
    xf = rows.float()
    if scale.numel() == 1:
        xf = xf / scale
    else:
        shape = xf.shape
        xf = (xf.reshape(shape[0], heads, -1) / scale.view(heads, 1)).reshape(shape)
    return xf.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
