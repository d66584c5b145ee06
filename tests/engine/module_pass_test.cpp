// The module calls of one micro-batch, run on a counting device over a tier of the plan alone, as
// the memory estimate runs them: the order, what each call holds, and nothing left after.
#include "engine/module_pass.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/memory/stream_ordered_memory.h"
#include "engine/zero/flat_layout.h"
#include "engine/zero/grad_reducer.h"
#include "engine/zero/param_coordinator.h"
#include "engine/zero/param_tier.h"
#include "gpu/counting/counting_comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"

namespace strata::engine {
namespace {

// An embedding, a block of two tensors, and a head that borrows the embedding (tied weights).
TEST(ModulePass, CallsTheModulesInTheStepsOrderWithWhatEachHolds) {
  const zero::FlatLayout layout({{ParamSpec{"wte", {64, 8}}},
                                 {ParamSpec{"w", {8, 8}}, ParamSpec{"b", {8}}},
                                 {ParamSpec{"norm", {8}}}},
                                1);
  const std::vector<std::string> names{"embedding", "block", "head"};
  std::unique_ptr<gpu::Device> device = gpu::create_counting_device();
  std::unique_ptr<gpu::Ops> ops = gpu::create_ops(*device, {});
  std::unique_ptr<gpu::Comm> comm = gpu::counting::create_counting_comm(1, 0);
  gpu::Stream& stream = device->compute_stream();
  memory::StreamOrderedMemory memory(*device);
  zero::ParamTierOptions tier_options;
  tier_options.element_bytes = 4;
  zero::ParamTier tier(layout, tier_options, zero::ParamTier::PlanOnly{});
  zero::CoordinatorOptions gather;
  static_cast<zero::GatherRules&>(gather) =
      zero::gather_rules(3, 0, 0, 0, std::numeric_limits<std::int64_t>::max());
  gather.storage = gpu::DataType::float32;
  zero::ParamCoordinator coordinator(*ops, *comm, stream, layout, tier, memory, names, gather);
  zero::GradReducerOptions reduce;
  reduce.stage = 3;
  zero::GradReducer reducer(*device, *ops, *comm, stream, layout, memory, names, reduce);
  ModulePass pass(coordinator, reducer, names, {{}, {}, {0}});
  const std::int64_t before = memory.live_bytes();

  std::vector<std::string> calls;
  coordinator.begin_pass(true);
  reducer.begin_step();
  pass.forward([&](const ModuleCall& call) {
    calls.push_back(fmt::format("forward {}: {} tensors, {} borrowed", call.module,
                                call.params.size(), call.borrowed.size()));
  });
  pass.backward(
      true,
      [&](const ModuleCall& call) {
        calls.push_back(fmt::format("backward {}: {} gradients, {} borrowed", call.module,
                                    call.grads.size(), call.borrowed_grads.size()));
      },
      [&](int module) { calls.push_back(fmt::format("done {}", module)); });
  coordinator.end_step();

  EXPECT_EQ(calls, (std::vector<std::string>{
                       "forward 0: 1 tensors, 0 borrowed", "forward 1: 2 tensors, 0 borrowed",
                       "forward 2: 1 tensors, 1 borrowed", "backward 2: 1 gradients, 1 borrowed",
                       "done 2", "backward 1: 2 gradients, 0 borrowed", "done 1",
                       "backward 0: 1 gradients, 0 borrowed", "done 0"}));
  // Stage 3 keeps nothing past its use: the borrowed embedding's gradients lived from the head's
  // backward to its own, and the step's memory is back where it started.
  EXPECT_EQ(memory.live_bytes(), before);
  // Each pass gathers the embedding twice, for the head and for itself: 4 forward, 4 backward.
  EXPECT_EQ(coordinator.counters().gathers, 8);
}

}  // namespace
}  // namespace strata::engine
