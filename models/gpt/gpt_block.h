#pragma once

#include <memory>

#include "models/decoder/decoder_spec.h"
#include "models/gpt/gpt_shape.h"

namespace strata::models {

// GPT-2's block, as llm.c computes it:
//   h = x + proj(attention(qkv(ln1(x))))
//   out = h + mlp.proj(gelu(mlp.fc(ln2(h))))
// layer norms, biases on every linear, full multi-head attention, an MLP of 4 C.
BlockFamily gpt_blocks(std::shared_ptr<const GptShape> shape);

}  // namespace strata::models
