#include "models/decoder/decoder.h"

#include "base/assert.h"
#include "gpu/stream.h"
#include "models/decoder/decoder_modules.h"

namespace strata::models {

Decoder::Decoder(DecoderSpec spec)
    : spec_(std::move(spec)), pass_{spec_.batch, spec_.seq_len, nullptr} {
  // The modules reach the activations through activations_pointer_, which
  // allocate_activations sets; they are built before any device exists.
  const DecoderState state{&spec_, &activations_pointer_, &checkpointing_, &pass_};
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
  pass_ = {spec_.batch, spec_.seq_len, nullptr};
}

std::int64_t Decoder::cache_bytes(std::int64_t max_seq, gpu::DataType compute) const {
  return KvCache::bytes_needed(spec_, max_seq, compute);
}

void Decoder::allocate_cache(gpu::Device& device, gpu::Stream& stream, std::int64_t max_seq,
                             gpu::DataType compute) {
  // Learned positions end at their table's last row (rotary ones do not end).
  STRATA_ASSERT(spec_.position_rows == 0 || max_seq <= spec_.position_rows);
  cache_.reset();
  cache_ = std::make_unique<KvCache>(device, stream, spec_, max_seq, compute);
}

void Decoder::load_cached(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                          std::int64_t tokens, std::span<const std::int32_t> start) {
  STRATA_ASSERT(activations_ != nullptr && cache_ != nullptr);
  // The activations hold a prefill of at most seq_len tokens per sequence.
  STRATA_ASSERT(tokens >= 1 && tokens <= spec_.seq_len);
  STRATA_ASSERT(std::ssize(inputs) == spec_.batch * tokens);
  STRATA_ASSERT(std::ssize(start) == spec_.batch);
  pass_positions_.assign(start.begin(), start.end());
  for (std::int32_t first : start) {
    // A prefill attends over its own tokens only: it must start each sequence.
    STRATA_ASSERT(first >= 0 && first + tokens <= cache_->max_seq() && (tokens == 1 || first == 0));
    pass_positions_.push_back(static_cast<std::int32_t>(first + tokens));
  }
  no_targets_.assign(inputs.size(), -1);
  const auto bytes = static_cast<std::int64_t>(inputs.size_bytes());
  stream.copy(activations_->tokens, inputs.data(), bytes, gpu::CopyKind::host_to_device);
  stream.copy(activations_->targets, no_targets_.data(), bytes, gpu::CopyKind::host_to_device);
  const std::int64_t positions_bytes = spec_.batch * std::int64_t{sizeof(std::int32_t)};
  stream.copy(cache_->start(), pass_positions_.data(), positions_bytes,
              gpu::CopyKind::host_to_device);
  stream.copy(cache_->length(), pass_positions_.data() + spec_.batch, positions_bytes,
              gpu::CopyKind::host_to_device);
  pass_ = {spec_.batch, tokens, cache_.get()};
}

const float* Decoder::loss() const {
  STRATA_ASSERT(activations_ != nullptr);
  return activations_->loss;
}

gpu::ConstTensor Decoder::logits_at(std::int64_t row) const {
  STRATA_ASSERT(activations_ && row >= 0 && row < pass_.rows());
  // A training forward may have written the loss's gradient over them (models/classifier.h).
  STRATA_ASSERT(!activations_->logits_hold_gradient);
  return activations_->logits.at(row * spec_.padded_vocab());
}

}  // namespace strata::models
