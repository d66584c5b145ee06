#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "engine/config/config.h"
#include "engine/memory_estimate.h"
#include "engine/model.h"
#include "models/gpt/gpt_shape.h"
#include "models/llama/llama_shape.h"

namespace strata::models {

// The model a config describes, before any device exists: the built-in GPT (strata.model's shape
// keys, or a GPT-2 config.json) or a Llama-family decoder (a Llama, Mistral or Qwen2
// config.json), and where its starting weights come from.
struct ModelPlan {
  std::optional<GptShape> gpt;
  std::optional<LlamaShape> llama;
  std::string architecture;     // "GPT", "GPT-2", "llama", "mistral", "qwen2"
  std::string from_pretrained;  // a Hugging Face folder; "" = the weights strata.seed makes

  std::int64_t seq_len() const { return gpt ? gpt->seq_len : llama->seq_len; }
  std::int64_t vocab() const { return gpt ? gpt->vocab : llama->vocab; }
  std::int64_t padded_vocab() const { return gpt ? gpt->padded_vocab() : llama->padded_vocab(); }
  std::int64_t batch() const { return gpt ? gpt->batch : llama->batch; }
  // As allocated: the token tables' padded rows included (GptShape::parameter_count).
  std::int64_t parameter_count() const {
    return gpt ? gpt->parameter_count() : llama->parameter_count();
  }
  // The shape in one line for the start-up summary: "llama, 1.10B parameters (22 layers, ...)".
  std::string summary() const;
};

// Throws UserError naming the key or file and the fix for a shape strata cannot build (a
// config.json it refuses, a seq_len past the model's context or its sliding window).
ModelPlan plan_model(const engine::ModelConfig& model, std::int64_t micro_batch);

// The model, its pretrained weights attached when the plan has them (every tensor checked
// against the folder before anything is read, models/hf/pretrained_weights.h).
std::unique_ptr<engine::Model> build_model(const ModelPlan& plan);

}  // namespace strata::models
