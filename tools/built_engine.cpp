#include "tools/built_engine.h"

#include <utility>

#include "gpu/open_device.h"

namespace strata::tools {

std::unique_ptr<gpu::Device> open_run_device(const engine::Config& config,
                                             const gpu::World& world) {
  gpu::DeviceOptions options;
  options.memory_budget_bytes = config.strata.device_memory_budget;
  options.cuda_device_index = world.local_rank();  // one GPU per rank on a node
  return gpu::open_device(options);
}

BuiltEngine::BuiltEngine(gpu::World& world, std::unique_ptr<gpu::Device> opened,
                         const engine::Config& config, const models::ModelPlan& plan)
    : device(std::move(opened)),
      ops(gpu::create_ops(*device, gpu::OpsOptions{.tf32 = config.strata.allow_tf32})),
      comm(gpu::create_comm(world, *device)),
      model(models::build_model(plan)),
      runtime{*device, *ops, *comm},
      engine(runtime, config, *model) {}

}  // namespace strata::tools
