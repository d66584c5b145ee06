#pragma once

#include <memory>

#include "models/decoder/decoder.h"
#include "models/llama/llama_shape.h"

namespace strata::models {

// A Llama-family decoder: the token embedding (no learned positions: the blocks rotate q and k),
// the family's blocks (models/llama/llama_block.h), a final RMSNorm and the LM head, its own
// lm_head.weight or tied to embed_tokens. Parameter names are Hugging Face's.
class Llama final : public Decoder {
 public:
  explicit Llama(const LlamaShape& shape);

  const LlamaShape& shape() const { return *shape_; }

 private:
  explicit Llama(std::shared_ptr<const LlamaShape> shape);

  std::shared_ptr<const LlamaShape> shape_;  // shared with the blocks
};

}  // namespace strata::models
