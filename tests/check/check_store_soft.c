/*
 * The integer fp8 conversion (what GPUs before sm_89 run) checked on this GPU: the op's own
 * quantizing plan for this arch with fp8_soft forced, compiled and launched through the generic
 * loader. The public call cannot ask for it (the arch decides), so this one file of the harness
 * uses the library's plan (src/ops/store_kv_plan.h); everything else uses kvjit.h alone.
 */
#include "check_store.h"
#include "internal_util.h"
#include "store_kv_plan.h"

kvjit_status check_store_launch_soft(kvjit_context *ctx, const kvjit_store_kv_args *a, int sm, int prepare) {
  kvjit_store_kv_quant q = {a->dtype, a->cache_dtype, a->scale_kind, a->num_heads};
  kvjit_store_kv_plan plan;
  kvjit_status st = kvjit_store_kv_plan_make_quant(&plan, sm, a->k_row_bytes, a->v ? a->v_row_bytes : 0, 16,
                                                   a->index_type, a->pdl, a->split,
                                                   kvjit_store_kv_batch_class(a->batch), &q);
  if (st != KVJIT_OK) return st;
  plan.fp8_soft = 1;
  kvjit_op_program prog;
  if ((st = kvjit_store_kv_program(&plan, &prog)) != KVJIT_OK) return st;
  kvjit_program *program = NULL;
  if ((st = kvjit_program_get(ctx, &program, NULL, &prog.desc)) != KVJIT_OK) return st;
  kvjit_kernel *kernel = NULL;
  if ((st = kvjit_program_kernel(program, &kernel, prog.kernel, 0)) != KVJIT_OK || prepare) return st;
  if (a->batch == 0) return KVJIT_OK;
  kvjit_store_kv_params p = {a->k, a->v, a->k_cache, a->v_cache, a->indices, a->k_stride, a->v_stride,
                             a->k_cache_stride, a->v_cache_stride, a->index_stride, a->batch, a->num_slots,
                             a->skip_slot, a->k_scale, a->v_scale};
  void *args[] = {&p};
  kvjit_launch_config cfg = KVJIT_LAUNCH_CONFIG_INIT;
  cfg.grid[0] = (unsigned)kvjit_store_kv_blocks(&plan, a->batch);
  cfg.block[0] = (unsigned)plan.block;
  cfg.stream = a->stream;
  cfg.programmatic_serialization = plan.pdl;
  return kvjit_launch(kernel, &cfg, args);
}
