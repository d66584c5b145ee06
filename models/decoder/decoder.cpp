#include "models/decoder/decoder.h"

#include "base/assert.h"
#include "gpu/stream.h"
#include "models/decoder/decoder_modules.h"

namespace strata::models {

Decoder::Decoder(DecoderSpec spec) : spec_(std::move(spec)) {
  // The modules reach the activations through activations_pointer_, which
  // allocate_activations sets; they are built before any device exists.
  const DecoderState state{&spec_, &activations_pointer_, &checkpointing_};
  modules_.push_back(std::make_unique<DecoderEmbedding>(state));
  for (std::int64_t layer = 0; layer < spec_.n_layer; ++layer)
    modules_.push_back(spec_.blocks.make(state, layer));
  modules_.push_back(std::make_unique<DecoderHead>(state));
  for (auto& module : modules_)
    module_pointers_.push_back(module.get());
}

Decoder::~Decoder() = default;

void Decoder::allocate_activations(gpu::Device& device, bool activation_checkpointing,
                                   gpu::DataType compute) {
  checkpointing_ = activation_checkpointing;
  activations_pointer_ = nullptr;
  activations_ =
      std::make_unique<DecoderActivations>(device, spec_, activation_checkpointing, compute);
  activations_pointer_ = activations_.get();
}

std::int64_t Decoder::activation_bytes(bool activation_checkpointing, gpu::DataType compute) const {
  return DecoderActivations::bytes_needed(spec_, activation_checkpointing, compute);
}

void Decoder::load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                         std::span<const std::int32_t> targets) {
  STRATA_ASSERT(activations_ != nullptr);
  STRATA_ASSERT(static_cast<std::int64_t>(inputs.size()) == spec_.rows());
  STRATA_ASSERT(targets.size() == inputs.size());
  const auto bytes = static_cast<std::int64_t>(inputs.size_bytes());
  stream.copy(activations_->tokens, inputs.data(), bytes, gpu::CopyKind::host_to_device);
  stream.copy(activations_->targets, targets.data(), bytes, gpu::CopyKind::host_to_device);
}

const float* Decoder::loss() const {
  STRATA_ASSERT(activations_ != nullptr);
  return activations_->loss;
}

gpu::ConstTensor Decoder::logits_at(std::int64_t row) const {
  STRATA_ASSERT(activations_ && row >= 0 && row < spec_.rows());
  // A training forward may have written the loss's gradient over them (models/classifier.h).
  STRATA_ASSERT(!activations_->logits_hold_gradient);
  return activations_->logits.at(row * spec_.padded_vocab());
}

}  // namespace strata::models
