/*
 * kvjit::transfer_kv as a PyTorch operator kernel (registered with store_kv_cache by op.cpp).
 *
 * The dispatcher picks this CUDA kernel when any argument is a CUDA tensor; the others are host
 * memory the kernel reads or writes directly (pinned: torch's pin_memory()). Pageable memory
 * would fault on the GPU, so each host tensor's whole extent is checked with the driver first.
 */
#include <stdint.h>
#include <string.h>

#include <string>

#include "door.h"
#include "op_glue.h"
#include "transfer_args.h"

namespace kvjit_torch {

namespace {

/* Schema: (Tensor src_k, Tensor? src_v, Tensor(a!) dst_k, Tensor(b!)? dst_v, Tensor src_indices,
 *          Tensor dst_indices, int src_num_slots, int dst_num_slots, int split, int pdl,
 *          int row_elements, Tensor? k_scale, Tensor? v_scale, int max_ctas) -> () */
namespace transfer_arg { /* named: op.cpp's store arguments share the module (a unity build) */
enum {
  SRC_K, SRC_V, DST_K, DST_V, SRC_INDICES, DST_INDICES, SRC_NUM_SLOTS, DST_NUM_SLOTS, SPLIT, PDL, ROW_ELEMENTS,
  K_SCALE, V_SCALE, MAX_CTAS, COUNT
};
}  // namespace transfer_arg
const bool kIsTensor[transfer_arg::COUNT] = {true,  true,  true,  true,  true, true, false,
                                           false, false, false, false, true, true, false};
const bool kIsOptional[transfer_arg::COUNT] = {false, true,  false, true,  false, false, false,
                                             false, false, false, false, true,  true,  false};

/* kvjit_door_enter() / kvjit_door_leave() on every exit. */
class ContextGuard {
 public:
  ContextGuard(int32_t device, bool without_context) {
    char msg[256];
    if (kvjit_door_enter(device, without_context, &guard_, msg, sizeof msg)) throw std::runtime_error(msg);
  }
  ~ContextGuard() { kvjit_door_leave(&guard_); }
  ContextGuard(const ContextGuard &) = delete;
  ContextGuard &operator=(const ContextGuard &) = delete;

 private:
  kvjit_door_guard guard_;
};

}  // namespace

void transfer_kv_kernel(StableIValue *stack, uint64_t num_args, uint64_t num_outputs) {
  if (num_args != transfer_arg::COUNT || num_outputs != 0)
    throw std::runtime_error("kvjit: transfer_kv kernel registered under a schema of " + std::to_string(num_args) +
                             " arguments and " + std::to_string(num_outputs) + " returns; it takes 14 and 0");
  CallArgs call(stack, num_args);
  call.adopt(kIsTensor, kIsOptional);
  kvjit_transfer_request req;
  view_of(call.tensor(transfer_arg::SRC_K), &req.src_k);
  view_of(call.tensor(transfer_arg::SRC_V), &req.src_v);
  view_of(call.tensor(transfer_arg::DST_K), &req.dst_k);
  view_of(call.tensor(transfer_arg::DST_V), &req.dst_v);
  view_of(call.tensor(transfer_arg::SRC_INDICES), &req.src_indices);
  view_of(call.tensor(transfer_arg::DST_INDICES), &req.dst_indices);
  req.src_num_slots = call.integer(transfer_arg::SRC_NUM_SLOTS);
  req.dst_num_slots = call.integer(transfer_arg::DST_NUM_SLOTS);
  req.split = call.integer(transfer_arg::SPLIT);
  req.pdl = call.integer(transfer_arg::PDL);
  req.row_elements = call.integer(transfer_arg::ROW_ELEMENTS);
  view_of(call.tensor(transfer_arg::K_SCALE), &req.k_scale);
  view_of(call.tensor(transfer_arg::V_SCALE), &req.v_scale);
  req.max_ctas = call.integer(transfer_arg::MAX_CTAS);

  kvjit_transfer_kv_args args;
  kvjit_transfer_layouts layouts; /* what args' layout pointers point at */
  int32_t device = -1;
  char msg[512];
  kvjit_request_error refused =
      kvjit_transfer_request_args(&req, g_torch.device_cuda, &args, &layouts, &device, msg, sizeof msg);
  if (refused) fail_request(refused, msg);
  if (device < 0) {
    /* Only reachable when registered for another dispatch key (the tests do, for CPU): an empty
     * transfer is validated by the library, anything else would hand it host memory it may not
     * reach. */
    if (args.batch != 0)
      fail_request(KVJIT_REQUEST_VALUE_ERROR, "src_k: no CUDA tensor among the arguments (the kernel runs on one)");
    kvjit_status status = kvjit_door.transfer(kvjit_door.ctx, &args);
    if (status != KVJIT_OK) fail_status(status);
    return;
  }
  const struct {
    const char *name;
    const kvjit_tensor_view *t;
  } host[] = {{"src_k", &req.src_k},     {"src_v", &req.src_v},           {"dst_k", &req.dst_k},
              {"dst_v", &req.dst_v},     {"src_indices", &req.src_indices}, {"dst_indices", &req.dst_indices},
              {"k_scale", &req.k_scale}, {"v_scale", &req.v_scale}};
  if (g_torch.current_cuda_stream == nullptr)
    throw std::runtime_error("kvjit: this torch has no CUDA (aoti_torch_get_current_cuda_stream not found)");
  DeviceGuard guard(device);
  bool has_host = false;
  for (const auto &h : host) has_host |= h.t->present && h.t->device_type != g_torch.device_cuda;
  ContextGuard context(device, has_host); /* the pinned check asks the driver in @p device's context */
  for (const auto &h : host)
    if (h.t->present && h.t->device_type != g_torch.device_cuda &&
        kvjit_door_check_pinned(h.name, h.t, msg, sizeof msg))
      fail_request(KVJIT_REQUEST_VALUE_ERROR, msg);
  void *stream = nullptr;
  check(g_torch.current_cuda_stream(device, &stream), "aoti_torch_get_current_cuda_stream");
  args.stream = static_cast<struct CUstream_st *>(stream);
  kvjit_status status = kvjit_door.transfer(kvjit_door.ctx, &args);
  if (status != KVJIT_OK) fail_status(status);
}

}  // namespace kvjit_torch
