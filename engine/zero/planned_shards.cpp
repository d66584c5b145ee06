#include "engine/zero/planned_shards.h"

#include "base/assert.h"

namespace strata::engine::zero {

std::span<std::byte> PlannedShards::values(Range /*range*/) {
  STRATA_ASSERT(false && "a planned tier holds no values");
  return {};
}

std::shared_ptr<gpu::Event> PlannedShards::write(Range /*range*/, bool /*expected*/) {
  STRATA_ASSERT(false && "a planned tier holds no values");
  return nullptr;
}

}  // namespace strata::engine::zero
