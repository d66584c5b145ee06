#pragma once

#include <memory>

#include "engine/config/config.h"
#include "engine/engine.h"
#include "gpu/comm.h"
#include "gpu/device.h"
#include "gpu/ops.h"
#include "gpu/process_group.h"
#include "models/model_plan.h"

namespace strata::tools {

// The device a run's config asks for: strata.device_memory_budget, this rank's GPU on its node
// (the host backend where there is none).
std::unique_ptr<gpu::Device> open_run_device(const engine::Config& config, const gpu::World& world);

// An engine with all it runs on: `device`, its ops (strata.allow_tf32), the communicator of
// `world`, and the model `plan` describes, built as `strata eval` and `strata generate` build
// theirs. Members are destroyed in reverse: the engine, the model (its activations are the
// device's), then the device.
struct BuiltEngine {
  BuiltEngine(gpu::World& world, std::unique_ptr<gpu::Device> opened, const engine::Config& config,
              const models::ModelPlan& plan);

  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<gpu::Ops> ops;
  std::unique_ptr<gpu::Comm> comm;
  std::unique_ptr<engine::Model> model;
  engine::Runtime runtime;
  engine::Engine engine;
};

}  // namespace strata::tools
