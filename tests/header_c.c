/* The public header compiles alone, as C, with nothing included before it. */
#include "kvjit.h"

int main(void) {
  kvjit_context_options options = KVJIT_CONTEXT_OPTIONS_INIT;
  kvjit_program_desc desc = KVJIT_PROGRAM_DESC_INIT;
  kvjit_launch_config config = KVJIT_LAUNCH_CONFIG_INIT;
  kvjit_store_kv_args args = KVJIT_STORE_KV_ARGS_INIT;
  kvjit_layout layout = KVJIT_LAYOUT_INIT;
  args.k_cache_layout = &layout;
  return (layout.version == KVJIT_LAYOUT_VERSION && options.version == KVJIT_CONTEXT_OPTIONS_VERSION && desc.version == KVJIT_PROGRAM_DESC_VERSION &&
          config.block[0] == 1 && args.version == KVJIT_STORE_KV_ARGS_VERSION && KVJIT_OK == 0)
             ? 0
             : 1;
}
