#pragma once

#include <memory>

#include "models/decoder/decoder.h"
#include "models/gpt/gpt_shape.h"

namespace strata::models {

// A GPT-2 style decoder: token and learned position embeddings ("wte", "wpe"), GPT-2's blocks
// (models/gpt/gpt_block.h) and a final layer norm ("lnf") with the LM head tied to wte.
class Gpt final : public Decoder {
 public:
  explicit Gpt(const GptShape& shape);

  const GptShape& shape() const { return *shape_; }

 private:
  explicit Gpt(std::shared_ptr<const GptShape> shape);

  std::shared_ptr<const GptShape> shape_;  // shared with the blocks
};

}  // namespace strata::models
