/*
 * The empty kernels that give bench_ops the launch floor (a graph and a stream, PDL on and off).
 * Compiled at run time through kvjit's own loader.
 */

extern "C" __global__ void bench_empty(void) {}

/* The floor of a PDL launch: let the next grid be scheduled, wait on the previous one (the order
 * kvjit's store uses: triggering first is the faster chain). */
extern "C" __global__ void bench_empty_pdl(void) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* bench_overlap's residency control: CTAs that hold their SMs for @p ns nanoseconds and touch no
 * memory, so that a GEMM's slowdown beside them is what occupying those SMs costs, apart from any
 * traffic. */
extern "C" __global__ void bench_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

/* The same with ~60 registers per thread live across the wait (a copy's share of the register file:
 * kvjit's host-link plan at 1024 threads, SGLang's hicache kernel), so that the control also holds
 * what a copy's CTA holds of the SM. */
__device__ unsigned int bench_spin_sink;
extern "C" __global__ void __launch_bounds__(1024, 1) bench_spin_fat(unsigned long long ns) {
  unsigned int r[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) r[i] = threadIdx.x * (2u * i + 1u);
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
#pragma unroll
    for (int i = 0; i < 48; ++i) r[i] = r[i] * 1664525u + 1013904223u;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  unsigned int x = 0;
#pragma unroll
  for (int i = 0; i < 48; ++i) x ^= r[i];
  if (x == 0x9e3779b9u) bench_spin_sink = x;
}
