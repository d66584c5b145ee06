// Links the installed engine: default_config() is compiled into libstrata_engine.a, so this
// program builds only if the exported targets carry the right headers and link line.
#include <cstdio>

#include "engine/config/config.h"

int main() {
  const strata::engine::Config config = strata::engine::default_config();
  std::printf("steps_per_print=%lld train_batch_size=%lld\n",
              static_cast<long long>(config.steps_per_print),
              static_cast<long long>(config.batch.train_batch_size));
  return 0;
}
