#pragma once

#include <cstdint>
#include <memory>

#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/open_device.h"
#include "gpu/ops.h"
#include "models/model_plan.h"
#include "tests/engine/test_world.h"

namespace strata::models::testing {

// An Engine for `config` on a host device of 64 MiB, its model planned for `micro_batch` rows:
// what the model tests train and load with. Members are destroyed in reverse: the engine, then the
// model (its activations are the device's), then the device.
struct HostEngine {
  HostEngine(const engine::Config& config, std::int64_t micro_batch)
      : device(gpu::create_host_device(options())),
        ops(gpu::create_ops(*device)),
        comm(gpu::create_comm(engine::testing::test_world(), *device)),
        model(build_model(plan_model(config.strata.model, micro_batch))),
        runtime{*device, *ops, *comm},
        engine(runtime, config, *model) {}

  static gpu::DeviceOptions options() {
    gpu::DeviceOptions options;
    options.memory_budget_bytes = 64 << 20;
    return options;
  }

  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::Ops> ops;
  std::unique_ptr<gpu::Comm> comm;
  std::unique_ptr<engine::Model> model;
  engine::Runtime runtime;
  engine::Engine engine;
};

}  // namespace strata::models::testing
