#pragma once

#include <memory>
#include <vector>

#include "engine/model.h"
#include "models/llama/llama_activations.h"
#include "models/llama/llama_shape.h"

namespace strata::models {

// A Llama-family decoder as the engine's Model: module 0 the token embedding, modules
// 1..n_layer the decoder layers, the last the final norm, the LM head and the loss.
class Llama final : public engine::Model {
 public:
  explicit Llama(const LlamaShape& shape);
  ~Llama() override;

  const LlamaShape& shape() const { return shape_; }

  std::span<engine::Module* const> modules() override { return module_pointers_; }
  void allocate_activations(gpu::Device& device, bool activation_checkpointing,
                            gpu::DataType compute) override;
  std::int64_t activation_bytes(bool activation_checkpointing,
                                gpu::DataType compute) const override;
  void load_batch(gpu::Stream& stream, std::span<const std::int32_t> inputs,
                  std::span<const std::int32_t> targets) override;
  const float* loss() const override;
  std::int64_t tokens_per_micro_batch() const override { return shape_.rows(); }
  double flops_per_token() const override { return shape_.flops_per_token(); }
  const engine::WeightSource* pretrained_weights() const override { return pretrained_.get(); }

  // Starts the parameters from `weights` instead of strata.seed's values.
  void set_pretrained(std::unique_ptr<engine::WeightSource> weights) {
    pretrained_ = std::move(weights);
  }

 private:
  LlamaShape shape_;
  std::unique_ptr<LlamaActivations> activations_;
  LlamaActivations* activations_pointer_ = nullptr;
  bool checkpointing_ = false;
  std::vector<std::unique_ptr<engine::Module>> modules_;
  std::vector<engine::Module*> module_pointers_;
  std::unique_ptr<engine::WeightSource> pretrained_;
};

}  // namespace strata::models
