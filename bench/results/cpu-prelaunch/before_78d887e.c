/* The pre-launch host work of kvjit_store_kv_cache at 78d887e (before the op framework):
 * validate + plan + plan key + fast lookup + blocks, as bench_prelaunch times the same steps after
 * it. Build against a checkout of 78d887e:
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -DKVJIT_BUILDING -Iinclude -Isrc -I/usr/local/cuda/include \
 *       -Ibuild/src bench/results/cpu-prelaunch/before_78d887e.c build/src/libkvjit_internal.a \
 *       -L/usr/local/cuda/lib64 -lnvrtc -ldl -lpthread -o before && ./before */
/* Throwaway: the pre-launch host work of kvjit_store_kv_cache at 78d887e (validate + plan + key + lookup + blocks). */
#include "store_kv.c"
#include <time.h>
static uint64_t now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return (uint64_t)t.tv_sec*1000000000ull+t.tv_nsec;}
static double run(kvjit_context *ctx, kvjit_store_kv_args *a){
  store_call c; kvjit_store_kv_plan plan;
  if (validate(ctx,a,&c)) { fprintf(stderr,"%s\n",kvjit_last_error()); exit(1);}
  kvjit_store_kv_plan_make_quant(&plan,90,c.k_row,c.v_row,c.vec,a->index_type,a->pdl,a->split,kvjit_store_kv_batch_class(a->batch),c.quantize?&c.quant:NULL);
  static kvjit_kernel dummy; kvjit_fast_insert(ctx,kvjit_store_kv_plan_key(&plan),&dummy);
  double best=1e9;
  for(int rep=0;rep<21;rep++){
    uint64_t t0=now(); volatile uint64_t sink=0;
    for(int i=0;i<100000;i++){
      validate(ctx,a,&c);
      kvjit_store_kv_plan_make_quant(&plan,90,c.k_row,c.v_row,c.vec,a->index_type,a->pdl,a->split,kvjit_store_kv_batch_class(a->batch),c.quantize?&c.quant:NULL);
      const kvjit_kernel *k=kvjit_fast_lookup(ctx,kvjit_store_kv_plan_key(&plan));
      sink+=(uint64_t)(uintptr_t)k+kvjit_store_kv_blocks(&plan,a->batch);
    }
    double ns=(double)(now()-t0)/100000; if(ns<best)best=ns;}
  return best;
}
int main(void){
  kvjit_context_options o=KVJIT_CONTEXT_OPTIONS_INIT; o.disable_cache=1; kvjit_context *ctx; kvjit_context_create(&ctx,&o);
  kvjit_store_kv_args a=KVJIT_STORE_KV_ARGS_INIT;
  a.k=(void*)0x10000; a.v=(void*)0x20000; a.k_cache=(void*)0x100000; a.v_cache=(void*)0x200000; a.indices=(void*)0x300000;
  a.batch=1; a.k_row_bytes=1024; a.v_row_bytes=1024; a.num_slots=1<<20; a.pdl=KVJIT_PDL_ON;
  printf("plain 1024 B batch 1 pdl on: %.1f ns\n",run(ctx,&a));
  a.pdl=KVJIT_PDL_OFF; printf("plain 1024 B batch 1 pdl off: %.1f ns\n",run(ctx,&a));
  a.batch=4096; a.pdl=KVJIT_PDL_AUTO; printf("plain 1024 B batch 4096 pdl auto: %.1f ns\n",run(ctx,&a));
  a.batch=16; a.k_row_bytes=a.v_row_bytes=2048; a.dtype=KVJIT_DTYPE_BF16; a.cache_dtype=KVJIT_DTYPE_FP8_E4M3; a.scale_kind=KVJIT_SCALE_PER_HEAD; a.num_heads=8; a.k_scale=(void*)0x400000; a.v_scale=(void*)0x400100;
  printf("quant bf16->e4m3 per-head 2048 B batch 16: %.1f ns\n",run(ctx,&a));
  kvjit_context_destroy(ctx);
}
