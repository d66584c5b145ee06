#pragma once

#include "gpu/process_group.h"

namespace strata::engine::testing {

// The one World of a test process (a second one is refused): every test file of the binary
// shares it.
inline gpu::World& test_world() {
  static gpu::World instance;
  return instance;
}

}  // namespace strata::engine::testing
