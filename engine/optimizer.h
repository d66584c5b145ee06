#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "cpu_adam/optimizer.h"
#include "engine/config/config.h"

namespace strata::gpu {
class Ops;
class Stream;
struct OptimizerArrays;
}  // namespace strata::gpu

namespace strata::engine {

// The element type of the parameter copy an optimizer step writes for the device: the device's
// storage type (bf16 or fp16), or none when the device computes from the fp32 master itself.
enum class ParamCopy { none, bf16, fp16 };

// What changes from step to step: the scheduler's lr (and betas, for OneCycle's momentum
// cycling), the step count (from 1) and the gradient multiplier (1 / loss scale times the
// clipping coefficient).
struct StepHyperparameters {
  double lr = 0;
  std::array<double, 2> betas = {0.9, 0.999};
  std::int64_t step = 1;
  float grad_scale = 1.0f;
};

// The element types of an offloaded optimizer's arrays: the master parameters and the gradients
// are fp32, or bf16 with bf16.bf16_master_weights_and_grads; the moments (exp_avg, exp_avg_sq)
// are fp32, or bf16 with bf16.bf16_optimizer_states. A bf16 array is widened, stepped with the
// fp32 math and rounded to nearest even (cpu_adam/optimizer.h).
struct StateTypes {
  bool bf16_master_and_grads = false;
  bool bf16_moments = false;

  std::int64_t master_bytes() const { return bf16_master_and_grads ? 2 : 4; }
  std::int64_t grad_bytes() const { return master_bytes(); }
  std::int64_t moment_bytes() const { return bf16_moments ? 2 : 4; }
  bool all_fp32() const { return !bf16_master_and_grads && !bf16_moments; }
};
StateTypes state_types(const Bf16Config& bf16);

// One slice of an optimizer's arrays as raw memory of their StateTypes, `count` elements each;
// exp_avg / exp_avg_sq are empty when the optimizer has no such state.
struct StateArrays {
  std::span<std::byte> params;
  std::span<const std::byte> grads;
  std::span<std::byte> exp_avg;
  std::span<std::byte> exp_avg_sq;
};

// The optimizer the config chose (optimizer.type and its params), as one call over any slice of
// a partition. The update is elementwise, so cutting a partition into sub-groups or modules
// gives the same bits as one call over the whole (cpu_adam is bitwise identical for any tiling
// that keeps elements whole).
class Optimizer {
 public:
  explicit Optimizer(const OptimizerConfig& config);

  OptimizerType type() const { return config_.type; }
  // fp32 state arrays besides the master parameters: Adam/AdamW 2 (exp_avg, exp_avg_sq),
  // Adagrad 1 (exp_avg_sq), Lion 1 (exp_avg).
  int state_count() const;

  // Updates `params` (fp32 master) and the states in place. `exp_avg` / `exp_avg_sq` are empty
  // when the optimizer has no such state. `copy` receives the new parameters rounded to
  // `copy_type` (raw 16-bit patterns; empty for ParamCopy::none).
  void step(const StepHyperparameters& hyper, std::span<float> params, std::span<const float> grads,
            std::span<float> exp_avg, std::span<float> exp_avg_sq, ParamCopy copy_type,
            std::span<std::uint16_t> copy) const;
  // The same over arrays of `types`, `count` elements each.
  void step(const StepHyperparameters& hyper, StateTypes types, const StateArrays& arrays,
            std::int64_t count, ParamCopy copy_type, std::span<std::uint16_t> copy) const;
  // The same over `count` elements of fp32 arrays in device memory, enqueued on `stream` as one
  // device optimizer op (gpu::Ops::adam_step, adagrad_step, lion_step): cpu_adam::step itself on
  // the host backend, a fused kernel on CUDA.
  void step_on_device(gpu::Ops& ops, gpu::Stream& stream, const StepHyperparameters& hyper,
                      const gpu::OptimizerArrays& arrays, std::int64_t count) const;

 private:
  cpu_adam::AdamConfig adam_config(const StepHyperparameters& hyper) const;
  cpu_adam::AdagradConfig adagrad_config(const StepHyperparameters& hyper) const;
  cpu_adam::LionConfig lion_config(const StepHyperparameters& hyper) const;

  OptimizerConfig config_;
};

}  // namespace strata::engine
