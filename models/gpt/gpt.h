#pragma once

#include <memory>
#include <vector>

#include "engine/model.h"
#include "models/gpt/gpt_activations.h"
#include "models/gpt/gpt_shape.h"

namespace strata::models {

// A GPT-2 style decoder as the engine's Model: module 0 is the token and position embedding,
// modules 1..n_layer the transformer blocks, and the last module the final layer norm with the
// tied LM head and the cross-entropy loss (it borrows module 0's wte).
class Gpt final : public engine::Model {
 public:
  explicit Gpt(const GptShape& shape);
  ~Gpt() override;

  const GptShape& shape() const { return shape_; }

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

  // Starts the parameters from `weights` instead of strata.seed's values (a GPT-2 folder's
  // weights, models/hf/pretrained_weights.h); before the Engine is made.
  void set_pretrained(std::unique_ptr<engine::WeightSource> weights) {
    pretrained_ = std::move(weights);
  }

 private:
  GptShape shape_;
  std::unique_ptr<GptActivations> activations_;
  GptActivations* activations_pointer_ = nullptr;  // what the modules read
  bool checkpointing_ = false;
  std::vector<std::unique_ptr<engine::Module>> modules_;
  std::vector<engine::Module*> module_pointers_;
  std::unique_ptr<engine::WeightSource> pretrained_;
};

}  // namespace strata::models
