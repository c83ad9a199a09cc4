// The tooling header compiles alone, as C++, with nothing included before it.
#include "kvjit_tools.h"

int main() {
  kvjit_stats stats = KVJIT_STATS_INIT;
  kvjit_cache_visit_fn visit = nullptr;
  return (stats.version == KVJIT_STATS_VERSION && visit == nullptr) ? 0 : 1;
}
