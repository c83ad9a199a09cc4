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
