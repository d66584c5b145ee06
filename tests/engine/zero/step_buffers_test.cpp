// The names of the step's buffers: made from the module's name and read back to it.
#include "engine/zero/step_buffers.h"

#include <gtest/gtest.h>

namespace strata::engine::zero {
namespace {

TEST(StepBuffers, NamesReadBackToTheirKindAndModule) {
  for (StepBuffer kind : {StepBuffer::gathered_params, StepBuffer::gradients,
                          StepBuffer::gradient_shard, StepBuffer::gradient_bucket}) {
    const std::string name = step_buffer_name(kind, "transformer.h.11 gradients");
    const std::optional<NamedStepBuffer> named = parse_step_buffer(name);
    ASSERT_TRUE(named.has_value()) << name;
    EXPECT_EQ(named->kind, kind) << name;
    EXPECT_EQ(named->module, "transformer.h.11 gradients") << name;
  }
  EXPECT_EQ(step_buffer_name(StepBuffer::gradient_shard, "lm_head"), "lm_head gradient shard");
}

TEST(StepBuffers, OtherNamesAreNotStepBuffers) {
  EXPECT_FALSE(parse_step_buffer("gradient partition").has_value());
  EXPECT_FALSE(parse_step_buffer(" gradients").has_value());  // no module
  EXPECT_FALSE(parse_step_buffer("the step's device memory (its arena)").has_value());
}

}  // namespace
}  // namespace strata::engine::zero
