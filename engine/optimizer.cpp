#include "engine/optimizer.h"

#include "base/assert.h"
#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"

namespace strata::engine {
namespace {

// Calls `run` with the copy span typed as cpu_adam wants it.
template <class Run>
void with_copy(ParamCopy copy_type, std::span<std::uint16_t> copy, Run&& run) {
  switch (copy_type) {
    case ParamCopy::none:
      run(std::span<cpu_adam::NoCopy>());
      return;
    case ParamCopy::bf16:
      run(std::span<cpu_adam::bf16>(reinterpret_cast<cpu_adam::bf16*>(copy.data()), copy.size()));
      return;
    case ParamCopy::fp16:
      run(std::span<cpu_adam::fp16>(reinterpret_cast<cpu_adam::fp16*>(copy.data()), copy.size()));
      return;
  }
}

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config) : config_(config) {}

int Optimizer::state_count() const {
  switch (config_.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      return 2;
    case OptimizerType::adagrad:
    case OptimizerType::lion:
      return 1;
  }
  return 2;
}

void Optimizer::step(const StepHyperparameters& hyper, std::span<float> params,
                     std::span<const float> grads, std::span<float> exp_avg,
                     std::span<float> exp_avg_sq, ParamCopy copy_type,
                     std::span<std::uint16_t> copy) const {
  STRATA_ASSERT(grads.size() == params.size());
  STRATA_ASSERT(copy_type == ParamCopy::none || copy.size() == params.size());
  auto lr = static_cast<float>(hyper.lr);
  auto beta1 = static_cast<float>(hyper.betas[0]);
  auto beta2 = static_cast<float>(hyper.betas[1]);
  auto weight_decay = static_cast<float>(config_.weight_decay);
  switch (config_.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw: {
      cpu_adam::AdamConfig adam{lr,
                                beta1,
                                beta2,
                                static_cast<float>(config_.eps),
                                weight_decay,
                                config_.bias_correction,
                                config_.type == OptimizerType::adamw || config_.adam_w_mode};
      with_copy(copy_type, copy, [&](auto out) {
        cpu_adam::step(adam, hyper.step, params, grads, exp_avg, exp_avg_sq, out, hyper.grad_scale);
      });
      return;
    }
    case OptimizerType::adagrad: {
      cpu_adam::AdagradConfig adagrad{lr, static_cast<float>(config_.eps), weight_decay};
      with_copy(copy_type, copy, [&](auto out) {
        cpu_adam::step(adagrad, hyper.step, params, grads, exp_avg_sq, out, hyper.grad_scale);
      });
      return;
    }
    case OptimizerType::lion: {
      cpu_adam::LionConfig lion{lr, beta1, beta2, weight_decay};
      with_copy(copy_type, copy, [&](auto out) {
        cpu_adam::step(lion, hyper.step, params, grads, exp_avg, out, hyper.grad_scale);
      });
      return;
    }
  }
}

}  // namespace strata::engine
