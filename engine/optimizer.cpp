#include "engine/optimizer.h"

#include "base/assert.h"
#include "cpu_adam/half.h"
#include "cpu_adam/optimizer.h"
#include "gpu/ops.h"

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

// Calls `run` with null pointers of the master's and the moments' element types.
template <class Run>
void with_types(StateTypes types, Run&& run) {
  using cpu_adam::bf16;
  if (types.bf16_master_and_grads) {
    if (types.bf16_moments) {
      run(static_cast<bf16*>(nullptr), static_cast<bf16*>(nullptr));
    } else {
      run(static_cast<bf16*>(nullptr), static_cast<float*>(nullptr));
    }
  } else if (types.bf16_moments) {
    run(static_cast<float*>(nullptr), static_cast<bf16*>(nullptr));
  } else {
    run(static_cast<float*>(nullptr), static_cast<float*>(nullptr));
  }
}

// `count` elements of T at the start of `bytes` (an empty span for count 0).
template <class T, class Byte>
std::span<T> typed(std::span<Byte> bytes, std::size_t count) {
  STRATA_ASSERT(bytes.size() >= count * sizeof(T));
  return {reinterpret_cast<T*>(bytes.data()), count};
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
  step(hyper, StateTypes{},
       StateArrays{std::as_writable_bytes(params), std::as_bytes(grads),
                   std::as_writable_bytes(exp_avg), std::as_writable_bytes(exp_avg_sq)},
       static_cast<std::int64_t>(params.size()), copy_type, copy);
}

void Optimizer::step(const StepHyperparameters& hyper, StateTypes types, const StateArrays& arrays,
                     std::int64_t count, ParamCopy copy_type, std::span<std::uint16_t> copy) const {
  const auto n = static_cast<std::size_t>(count);
  STRATA_ASSERT(arrays.params.size() == n * static_cast<std::size_t>(types.master_bytes()));
  STRATA_ASSERT(arrays.grads.size() == n * static_cast<std::size_t>(types.grad_bytes()));
  STRATA_ASSERT(copy_type == ParamCopy::none || copy.size() == n);
  with_types(types, [&]<class P, class S>(P*, S*) {
    // The gradients have the master's type.
    const auto grads = typed<const P>(arrays.grads, n);
    const auto params = typed<P>(arrays.params, n);
    const auto exp_avg = typed<S>(arrays.exp_avg, arrays.exp_avg.empty() ? 0 : n);
    const auto exp_avg_sq = typed<S>(arrays.exp_avg_sq, arrays.exp_avg_sq.empty() ? 0 : n);
    switch (config_.type) {
      case OptimizerType::adam:
      case OptimizerType::adamw:
        with_copy(copy_type, copy, [&]<class H>(std::span<H> out) {
          cpu_adam::step<P, H, P, S>(adam_config(hyper), hyper.step, params, grads, exp_avg,
                                     exp_avg_sq, out, hyper.grad_scale);
        });
        return;
      case OptimizerType::adagrad:
        with_copy(copy_type, copy, [&]<class H>(std::span<H> out) {
          cpu_adam::step<P, H, P, S>(adagrad_config(hyper), hyper.step, params, grads, exp_avg_sq,
                                     out, hyper.grad_scale);
        });
        return;
      case OptimizerType::lion:
        with_copy(copy_type, copy, [&]<class H>(std::span<H> out) {
          cpu_adam::step<P, H, P, S>(lion_config(hyper), hyper.step, params, grads, exp_avg, out,
                                     hyper.grad_scale);
        });
        return;
    }
  });
}

void Optimizer::step_on_device(gpu::Ops& ops, gpu::Stream& stream, const StepHyperparameters& hyper,
                               const gpu::OptimizerArrays& arrays, std::int64_t count) const {
  switch (config_.type) {
    case OptimizerType::adam:
    case OptimizerType::adamw:
      ops.adam_step(stream, adam_config(hyper), hyper.step, hyper.grad_scale, arrays, count);
      return;
    case OptimizerType::adagrad:
      ops.adagrad_step(stream, adagrad_config(hyper), hyper.step, hyper.grad_scale, arrays, count);
      return;
    case OptimizerType::lion:
      ops.lion_step(stream, lion_config(hyper), hyper.step, hyper.grad_scale, arrays, count);
      return;
  }
}

cpu_adam::AdamConfig Optimizer::adam_config(const StepHyperparameters& hyper) const {
  return cpu_adam::AdamConfig{static_cast<float>(hyper.lr),
                              static_cast<float>(hyper.betas[0]),
                              static_cast<float>(hyper.betas[1]),
                              static_cast<float>(config_.eps),
                              static_cast<float>(config_.weight_decay),
                              config_.bias_correction,
                              config_.type == OptimizerType::adamw || config_.adam_w_mode};
}

cpu_adam::AdagradConfig Optimizer::adagrad_config(const StepHyperparameters& hyper) const {
  return cpu_adam::AdagradConfig{static_cast<float>(hyper.lr), static_cast<float>(config_.eps),
                                 static_cast<float>(config_.weight_decay)};
}

cpu_adam::LionConfig Optimizer::lion_config(const StepHyperparameters& hyper) const {
  return cpu_adam::LionConfig{static_cast<float>(hyper.lr), static_cast<float>(hyper.betas[0]),
                              static_cast<float>(hyper.betas[1]),
                              static_cast<float>(config_.weight_decay)};
}

StateTypes state_types(const Bf16Config& bf16) {
  return StateTypes{bf16.enabled && bf16.bf16_master_weights_and_grads,
                    bf16.enabled && bf16.bf16_optimizer_states};
}

}  // namespace strata::engine
