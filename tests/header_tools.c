/* The tooling header compiles alone, as C, with nothing included before it. */
#include "kvjit_tools.h"

int main(void) {
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_op_stats op_stats = KVJIT_OP_STATS_INIT;
  return (stats.version == KVJIT_STATS_VERSION && op_stats.version == KVJIT_OP_STATS_VERSION) ? 0 : 1;
}
