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
