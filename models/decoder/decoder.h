#pragma once

#include <memory>
#include <vector>

#include "engine/model.h"
#include "models/decoder/decoder_activations.h"
#include "models/decoder/decoder_spec.h"
#include "models/decoder/kv_cache.h"

namespace strata::models {

// A decoder as the engine's Model: module 0 the embedding, modules 1..n_layer the family's
// blocks, the last the final norm, the LM head and the loss (models/decoder/decoder_modules.h).
// A family (models/gpt/gpt.h, models/llama/llama.h) is a DecoderSpec: its names, its norm, its
// blocks and their activation plan.
class Decoder : public engine::Model {
 public:
  explicit Decoder(DecoderSpec spec);
  ~Decoder() override;
  // The modules point at the decoder's spec and activations.
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  std::span<engine::Module* const> modules() override { return module_pointers_; }
  void allocate_activations(gpu::Device& device, bool activation_checkpointing,
                            gpu::DataType compute) override;
  std::int64_t activation_bytes(bool activation_checkpointing,
                                gpu::DataType compute) const override;
  void load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                  std::span<const std::int32_t> targets) override;
  const float* loss() const override;
  gpu::ConstTensor logits_at(std::int64_t row) const override;
  std::int64_t vocab() const override { return spec_.vocab; }
  std::int64_t tokens_per_micro_batch() const override { return spec_.rows(); }
  double flops_per_token() const override { return spec_.flops_per_token; }
  const engine::WeightSource* pretrained_weights() const override { return pretrained_.get(); }
  std::int64_t cache_bytes(std::int64_t max_seq, gpu::DataType compute) const override;
  void allocate_cache(gpu::Device& device, gpu::Stream& stream, std::int64_t max_seq,
                      gpu::DataType compute) override;
  void load_cached(gpu::Stream& stream, std::span<const std::int32_t> inputs, std::int64_t tokens,
                   std::span<const std::int32_t> start) override;

  // Starts the parameters from `weights` instead of strata.seed's values (a Hugging Face folder's
  // weights, models/hf/pretrained_weights.h); before the Engine is made.
  void set_pretrained(std::unique_ptr<engine::WeightSource> weights) {
    pretrained_ = std::move(weights);
  }

 private:
  DecoderSpec spec_;
  std::unique_ptr<DecoderActivations> activations_;
  DecoderActivations* activations_pointer_ = nullptr;  // what the modules read
  bool checkpointing_ = false;
  ForwardPass pass_;  // what the next forward runs; the modules read it
  std::unique_ptr<KvCache> cache_;
  // A cached pass's host values, kept until its copies have run.
  std::vector<std::int32_t> pass_positions_;  // start, then length
  std::vector<std::int32_t> no_targets_;      // -1 for every row: generation has no loss
  std::vector<std::unique_ptr<engine::Module>> modules_;
  std::vector<engine::Module*> module_pointers_;
  std::unique_ptr<engine::WeightSource> pretrained_;
};

}  // namespace strata::models
