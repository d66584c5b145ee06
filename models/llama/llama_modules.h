#pragma once

#include <string>

#include "engine/module.h"
#include "models/llama/llama_activations.h"
#include "models/llama/llama_shape.h"

namespace strata::models {

// The modules of a Llama. Each reads and writes the model's activations through `acts`, which the
// model allocates before the first step; `checkpointing` is read at each call. Parameter names
// are Hugging Face's (LlamaForCausalLM's state dict), so a folder's tensors map one to one.
struct LlamaModuleState {
  const LlamaShape* shape = nullptr;
  LlamaActivations** acts = nullptr;
  const bool* checkpointing = nullptr;
};

class LlamaEmbedding final : public engine::Module {
 public:
  explicit LlamaEmbedding(LlamaModuleState state) : state_(state) {}
  std::string_view name() const override { return "embedding"; }
  std::vector<engine::ParamSpec> parameters() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  LlamaModuleState state_;
};

class LlamaBlock final : public engine::Module {
 public:
  LlamaBlock(LlamaModuleState state, std::int64_t layer)
      : state_(state), layer_(layer), name_("model.layers." + std::to_string(layer)) {}
  std::string_view name() const override { return name_; }
  std::vector<engine::ParamSpec> parameters() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  // Positions of the block's tensors in parameters(), with or without the q/k/v biases.
  struct Slots {
    std::size_t ln1, q, q_bias, k, k_bias, v, v_bias, o, ln2, gate, up, down;
  };
  Slots slots() const;
  void run_forward(engine::StepContext& context, const engine::TensorViews& w,
                   LlamaBlockActivations& a);

  LlamaModuleState state_;
  std::int64_t layer_;
  std::string name_;
};

// The final RMSNorm, the LM head (its own lm_head.weight, or embed_tokens borrowed when tied) and
// the cross-entropy loss.
class LlamaHead final : public engine::Module {
 public:
  explicit LlamaHead(LlamaModuleState state) : state_(state) {}
  std::string_view name() const override { return "head"; }
  std::vector<engine::ParamSpec> parameters() const override;
  std::vector<int> borrowed_modules() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  LlamaModuleState state_;
};

}  // namespace strata::models
