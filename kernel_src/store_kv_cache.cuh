// PLACEHOLDER
extern "C" __global__ void kvjit_store_kv(void) {}
