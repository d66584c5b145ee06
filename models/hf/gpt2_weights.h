#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/param_spec.h"
#include "models/gpt/gpt_shape.h"
#include "models/hf/hf_weights.h"

namespace strata::models {

// Where Hugging Face's GPT-2 keeps one of the built-in GPT's parameters: its name there (without
// the "transformer." prefix) and whether it is stored transposed. HF's GPT-2 uses Conv1D, whose
// weights are [in, out]; strata's linear weights are [out, in], as llm.c's.
struct Gpt2Name {
  std::string name;
  bool transposed = false;
};
// std::nullopt for a name the built-in GPT does not declare.
std::optional<Gpt2Name> gpt2_name(const std::string& strata_name);

// A GPT-2 folder's weights as the built-in GPT's starting values (engine::WeightSource). Every
// parameter the GPT declares is found (names with or without "transformer.", as older files have
// them), its shape checked against the declaration and its dtype against F32/BF16/F16, before
// anything is read. The attention-mask buffers old files carry (attn.bias, attn.masked_bias) and
// a tied lm_head.weight are not parameters and are passed over; any other tensor is refused.
class Gpt2Weights final : public engine::WeightSource {
 public:
  // `specs`: the GPT's parameters in declaration order across modules. Throws UserError naming
  // the folder, the tensor and the fix.
  Gpt2Weights(HfWeights weights, const std::vector<engine::ParamSpec>& specs);

  void read(std::size_t tensor_index, std::int64_t first_element,
            std::span<float> out) const override;

 private:
  struct Source {
    const HfWeights::Tensor* tensor = nullptr;
    bool transposed = false;
    std::int64_t rows = 0;  // strata's shape [rows, cols]
    std::int64_t cols = 0;
  };
  HfWeights weights_;
  std::vector<Source> sources_;  // by tensor index
};

}  // namespace strata::models
