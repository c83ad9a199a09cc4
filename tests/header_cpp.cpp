// The public header compiles alone, as C++, with nothing included before it.
#include "kvjit.h"

int main() {
  kvjit_context_options options = KVJIT_CONTEXT_OPTIONS_INIT;
  kvjit_store_kv_args args = KVJIT_STORE_KV_ARGS_INIT;
  kvjit_status st = KVJIT_ERR_COMPILE;
  const kvjit_layout layout = KVJIT_LAYOUT_INIT;
  args.v_cache_layout = &layout;
  return (layout.element_bytes == 1 && options.version == KVJIT_CONTEXT_OPTIONS_VERSION && args.pdl == KVJIT_PDL_AUTO && st < 0) ? 0 : 1;
}
