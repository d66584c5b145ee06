#include "models/llama/llama.h"

#include "base/assert.h"
#include "gpu/stream.h"
#include "models/llama/llama_modules.h"

namespace strata::models {

Llama::Llama(const LlamaShape& shape) : shape_(shape) {
  STRATA_ASSERT(shape.n_head > 0 && shape.d_model % shape.n_head == 0);
  STRATA_ASSERT(shape.n_kv_head > 0 && shape.n_head % shape.n_kv_head == 0);
  STRATA_ASSERT(shape.head_dim() % 2 == 0);
  STRATA_ASSERT(static_cast<std::int64_t>(shape.inv_freq.size()) == shape.head_dim() / 2);
  LlamaModuleState state{&shape_, &activations_pointer_, &checkpointing_};
  modules_.push_back(std::make_unique<LlamaEmbedding>(state));
  for (std::int64_t layer = 0; layer < shape.n_layer; ++layer)
    modules_.push_back(std::make_unique<LlamaBlock>(state, layer));
  modules_.push_back(std::make_unique<LlamaHead>(state));
  for (auto& module : modules_)
    module_pointers_.push_back(module.get());
}

Llama::~Llama() = default;

void Llama::allocate_activations(gpu::Device& device, bool activation_checkpointing,
                                 gpu::DataType compute) {
  checkpointing_ = activation_checkpointing;
  activations_pointer_ = nullptr;
  activations_ = std::make_unique<LlamaActivations>(device, shape_, activation_checkpointing, compute);
  activations_pointer_ = activations_.get();
}

std::int64_t Llama::activation_bytes(bool activation_checkpointing, gpu::DataType compute) const {
  return LlamaActivations::bytes_needed(shape_, activation_checkpointing, compute);
}

void Llama::load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                       std::span<const std::int32_t> targets) {
  STRATA_ASSERT(activations_ != nullptr);
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) == shape_.rows());
  STRATA_ASSERT(targets.size() == inputs.size());
  const auto bytes = static_cast<std::int64_t>(inputs.size_bytes());
  stream.copy(activations_->tokens, inputs.data(), bytes, gpu::CopyKind::host_to_device);
  stream.copy(activations_->targets, targets.data(), bytes, gpu::CopyKind::host_to_device);
}

const float* Llama::loss() const {
  STRATA_ASSERT(activations_ != nullptr);
  return activations_->loss;
}

}  // namespace strata::models
