#pragma once

#include <string>

#include "engine/module.h"
#include "models/gpt/gpt_activations.h"
#include "models/gpt/gpt_shape.h"

namespace strata::models {

// The modules of a Gpt. Each reads and writes the model's activations through `acts`, which the
// model allocates before the first step; `checkpointing` is read at each call.
struct GptModuleState {
  const GptShape* shape = nullptr;
  GptActivations** acts = nullptr;  // the model's pointer, set by allocate_activations
  const bool* checkpointing = nullptr;
};

class GptEmbedding final : public engine::Module {
 public:
  explicit GptEmbedding(GptModuleState state) : state_(state) {}
  std::string_view name() const override { return "embedding"; }
  std::vector<engine::ParamSpec> parameters() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  GptModuleState state_;
};

class GptBlock final : public engine::Module {
 public:
  GptBlock(GptModuleState state, std::int64_t layer)
      : state_(state), layer_(layer), name_("h." + std::to_string(layer)) {}
  std::string_view name() const override { return name_; }
  std::vector<engine::ParamSpec> parameters() const override;
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  void run_forward(engine::StepContext& context, const engine::TensorViews& params,
                   BlockActivations& block);

  GptModuleState state_;
  std::int64_t layer_;
  std::string name_;
};

class GptHead final : public engine::Module {
 public:
  explicit GptHead(GptModuleState state) : state_(state) {}
  std::string_view name() const override { return "head"; }
  std::vector<engine::ParamSpec> parameters() const override;
  std::vector<int> borrowed_modules() const override { return {0}; }
  void forward(engine::StepContext& context, const engine::TensorViews& params,
               std::span<const engine::TensorViews> borrowed) override;
  void backward(engine::StepContext& context, const engine::TensorViews& params,
                std::span<const engine::TensorViews> borrowed, const engine::TensorViews& grads,
                std::span<const engine::TensorViews> borrowed_grads) override;

 private:
  GptModuleState state_;
};

}  // namespace strata::models
