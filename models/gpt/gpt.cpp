#include "models/gpt/gpt.h"

#include "base/assert.h"
#include "gpu/stream.h"
#include "models/gpt/gpt_modules.h"

namespace strata::models {

Gpt::Gpt(const GptShape& shape) : shape_(shape) {
  STRATA_ASSERT(shape.d_model % shape.n_head == 0);
  // The modules reach the activations through activations_pointer_, which
  // allocate_activations sets; they are built before any device exists.
  GptModuleState state{&shape_, &activations_pointer_, &checkpointing_};
  modules_.push_back(std::make_unique<GptEmbedding>(state));
  for (std::int64_t layer = 0; layer < shape.n_layer; ++layer) {
    modules_.push_back(std::make_unique<GptBlock>(state, layer));
  }
  modules_.push_back(std::make_unique<GptHead>(state));
  for (auto& module : modules_)
    module_pointers_.push_back(module.get());
}

Gpt::~Gpt() = default;

void Gpt::allocate_activations(gpu::Device& device, bool activation_checkpointing,
                               gpu::DataType compute) {
  checkpointing_ = activation_checkpointing;
  activations_pointer_ = nullptr;
  activations_ = std::make_unique<GptActivations>(device, shape_, activation_checkpointing, compute);
  activations_pointer_ = activations_.get();
}

std::int64_t Gpt::activation_bytes(bool activation_checkpointing, gpu::DataType compute) const {
  return GptActivations::bytes_needed(shape_, activation_checkpointing, compute);
}

void Gpt::load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                     std::span<const std::int32_t> targets) {
  STRATA_ASSERT(activations_ != nullptr);
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) == shape_.rows());
  STRATA_ASSERT(targets.size() == inputs.size());
  auto bytes = static_cast<std::int64_t>(inputs.size_bytes());
  stream.copy(activations_->tokens, inputs.data(), bytes, gpu::CopyKind::host_to_device);
  stream.copy(activations_->targets, targets.data(), bytes, gpu::CopyKind::host_to_device);
}

const float* Gpt::loss() const {
  STRATA_ASSERT(activations_ != nullptr);
  return activations_->loss;
}

}  // namespace strata::models
