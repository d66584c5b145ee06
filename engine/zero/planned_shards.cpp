#include "engine/zero/planned_shards.h"

#include "base/assert.h"

namespace strata::engine::zero {

std::shared_ptr<gpu::Event> PlannedShards::upload_ahead(int module, void* /*device_target*/,
                                                        const gpu::Event* /*target_free*/) {
  STRATA_ASSERT(in_cpu(module));
  return nullptr;  // nothing was copied: nothing to wait for
}

std::span<std::byte> PlannedShards::values(Range /*range*/) {
  STRATA_ASSERT(false && "a planned tier holds no values");
  return {};
}

std::shared_ptr<gpu::Event> PlannedShards::write(Range /*range*/, bool /*expected*/) {
  STRATA_ASSERT(false && "a planned tier holds no values");
  return nullptr;
}

}  // namespace strata::engine::zero
