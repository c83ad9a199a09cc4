// vLLM's cache ops as a torch op library of our own (namespace vllm_peer), for bench/bench_layouts.py.
//
// The functions are vLLM's own host functions from its release's csrc/cache_kernels.cu (fetched by
// fetch.sh, compiled beside this file by build.sh), registered through the same stable-ABI path
// vLLM's csrc/torch_bindings.cpp uses (STABLE_TORCH_LIBRARY + TORCH_BOX) under the same schemas,
// so an eager call pays what vLLM's torch.ops._C_cache_ops.* pays: the dispatcher, the boxed
// call, vLLM's host function, the launch. Only the namespace differs, so that this library loads
// in a process that also has vLLM.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <string>

// Declared as vLLM's csrc/ops.h declares them; defined in cache_kernels.cu.
void reshape_and_cache(torch::stable::Tensor& key, torch::stable::Tensor& value, torch::stable::Tensor& key_cache,
                       torch::stable::Tensor& value_cache, torch::stable::Tensor& slot_mapping,
                       const std::string& kv_cache_dtype, torch::stable::Tensor& k_scale,
                       torch::stable::Tensor& v_scale, bool interleaved_v);
void reshape_and_cache_flash(torch::stable::Tensor& key, torch::stable::Tensor& value,
                             torch::stable::Tensor& key_cache, torch::stable::Tensor& value_cache,
                             torch::stable::Tensor& slot_mapping, const std::string& kv_cache_dtype,
                             torch::stable::Tensor& k_scale, torch::stable::Tensor& v_scale);
void concat_and_cache_mla(torch::stable::Tensor& kv_c, torch::stable::Tensor& k_pe, torch::stable::Tensor& kv_cache,
                          torch::stable::Tensor& slot_mapping, const std::string& kv_cache_dtype,
                          torch::stable::Tensor& scale, bool skip_scale);

STABLE_TORCH_LIBRARY(vllm_peer, m) {
  // The key/value rows [tokens, H, D] into the cache views at slot_mapping (int64; < 0 skipped).
  m.def("reshape_and_cache(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, Tensor slot_mapping, "
        "str kv_cache_dtype, Tensor k_scale, Tensor v_scale, bool interleaved_v=False) -> ()");
  m.def("reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, "
        "Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()");
  m.def("concat_and_cache_mla(Tensor kv_c, Tensor k_pe, Tensor! kv_cache, Tensor slot_mapping, str kv_cache_dtype, "
        "Tensor scale, bool skip_scale=False) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(vllm_peer, CUDA, m) {
  m.impl("reshape_and_cache", TORCH_BOX(&reshape_and_cache));
  m.impl("reshape_and_cache_flash", TORCH_BOX(&reshape_and_cache_flash));
  m.impl("concat_and_cache_mla", TORCH_BOX(&concat_and_cache_mla));
}
